module github.com/retryhttp/retryhttp/outbox

// bbolt v1.4 needs Go 1.23; the core module builds with 1.22.
go 1.23

require (
	github.com/redis/go-redis/v9 v9.18.0
	github.com/retryhttp/retryhttp v0.0.0
	go.etcd.io/bbolt v1.4.3
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/sys v0.29.0 // indirect
	golang.org/x/time v0.10.0 // indirect
)

replace github.com/retryhttp/retryhttp => ..
