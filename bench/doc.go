// Package bench measures retryhttp side by side with go-retryablehttp and
// failsafe-go: the per-request overhead against a stub transport
// (BenchmarkGET, BenchmarkPOST64K) and goodput against a loopback provider
// that enforces a rate limit (BenchmarkGoodput). It is a module of its own so
// the peers never appear in retryhttp's go.mod. docs/benchmarks.md records
// the results and the commands.
package bench
