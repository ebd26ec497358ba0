module github.com/retryhttp/retryhttp/bench

go 1.23

require (
	github.com/PuerkitoBio/rehttp v1.4.0
	github.com/failsafe-go/failsafe-go v0.9.8
	github.com/go-resty/resty/v2 v2.16.5
	github.com/hashicorp/go-cleanhttp v0.5.2
	github.com/hashicorp/go-retryablehttp v0.7.8
	github.com/retryhttp/retryhttp v0.0.0
)

require (
	github.com/bits-and-blooms/bitset v1.24.4 // indirect
	github.com/influxdata/tdigest v0.0.1 // indirect
	golang.org/x/net v0.33.0 // indirect
	golang.org/x/time v0.10.0 // indirect
)

replace github.com/retryhttp/retryhttp => ..
