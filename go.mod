module github.com/retryhttp/retryhttp

// Go 1.22 is the oldest release this package builds with: it uses
// math/rand/v2 and per-iteration loop variables (1.22), log/slog and the
// min/max builtins (1.21).
go 1.22

require (
	github.com/hashicorp/go-cleanhttp v0.5.2
	github.com/jarcoal/httpmock v1.4.2
	github.com/schollz/progressbar/v3 v3.18.0
	go.uber.org/goleak v1.3.0
	golang.org/x/term v0.28.0
	golang.org/x/time v0.10.0
)

require (
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	golang.org/x/sys v0.29.0 // indirect
)

require (
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/kr/text v0.2.0 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	github.com/stretchr/testify v1.10.0
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
