package retryhttp

import (
	"context"
	"sync/atomic"
)

// RequestOption overrides the retry policy for one request. Give it to
// [ContextWithOptions]. Each constructor ([MaxRetries], [Backoff], ...) has a
// transport-wide counterpart, an [Option] given to [New] ([WithMaxRetries],
// [WithBackoff], ...), that sets the default for every request.
//
// It is a type of its own so that an option that shapes the transport as a
// whole ([WithLogger], [WithRateLimit], [WithCircuitBreaker], ...) cannot be given
// per request, where it could have no effect: passing one does not compile.
type RequestOption struct {
	apply func(*policy)
}

// forTransport makes o the transport-wide default: the WithX counterpart of
// a per-request constructor X is X(...).forTransport(), so the two share
// one copy of the argument checks.
func (o RequestOption) forTransport() Option {
	return Option{func(c *config) { o.apply(&c.policy) }}
}

type requestOptionsKey struct{}

// ContextWithOptions returns a context that makes a [RetryTransport] apply opts
// on top of its own configuration for the one request made with it: for
// example MaxRetries(0) for a request that must not be retried, or a
// longer [Backoff] for a batch job. Calls accumulate: options from an outer
// ContextWithOptions apply first, so on the same setting the later call wins.
func ContextWithOptions(ctx context.Context, opts ...RequestOption) context.Context {
	optionsUsed.Store(true)
	if prev := requestOptions(ctx); prev != nil {
		opts = append(append([]RequestOption(nil), prev...), opts...)
	}
	return context.WithValue(ctx, requestOptionsKey{}, opts)
}

// NoRetry returns a context whose request is sent once, never retried:
// ContextWithOptions(ctx, MaxRetries(0)).
func NoRetry(ctx context.Context) context.Context {
	return ContextWithOptions(ctx, MaxRetries(0))
}

// optionsUsed is set once any context carries request options: until then
// no request can carry any, and a request skips looking for them (a walk up
// its context's chain of parents, on every request).
var optionsUsed atomic.Bool

func requestOptions(ctx context.Context) []RequestOption {
	if !optionsUsed.Load() {
		return nil
	}
	return optionsIn(ctx)
}

// optionsIn returns the request options ctx carries. It is kept out of
// line so that requestOptions, whose first test ends most calls, inlines.
//
//go:noinline
func optionsIn(ctx context.Context) []RequestOption {
	opts, _ := ctx.Value(requestOptionsKey{}).([]RequestOption)
	return opts
}

// requestPolicy applies per-request options to a copy of the transport's
// retry policy.
func (t *RetryTransport) requestPolicy(opts []RequestOption) *policy {
	p := t.cfg.policy
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&p)
		}
	}
	return &p
}
