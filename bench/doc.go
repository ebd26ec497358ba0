// Package bench measures retryhttp side by side with go-retryablehttp,
// failsafe-go, resty v2 and rehttp: the per-request overhead against a stub
// transport (BenchmarkGET, BenchmarkPOST64K), goodput against a provider that
// enforces a rate limit (BenchmarkGoodput), the same kind of burst against
// providers that round their resets, run on another clock, send no
// rate-limit headers or GitHub's (BenchmarkWorlds), and behaviour under
// overload, an outage that ends (BenchmarkOutage) and providers of fixed or
// changing capacity (BenchmarkCapacity: five worlds, with a reference client
// capped at the capacity). The providers are loopback retrytest
// servers, the fake provider retryhttp ships for its users' tests. It is a
// module of its own so the peers never appear in retryhttp's go.mod.
// docs/benchmarks.md records the results and the commands.
package bench
