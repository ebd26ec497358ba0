module github.com/retryhttp/retryhttp

// Go 1.22 is the oldest release this package builds with: it uses
// math/rand/v2 and per-iteration loop variables (1.22), log/slog and the
// min/max builtins (1.21).
go 1.22

require github.com/hashicorp/go-cleanhttp v0.5.2
