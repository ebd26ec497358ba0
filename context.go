package retryhttp

import "context"

type requestOptionsKey struct{}

// ContextWithOptions returns a context that makes a RetryTransport apply opts
// on top of its own configuration for the one request made with it: for
// example WithMaxRetries(0) for a request that must not be retried, or a
// longer backoff for a batch job. Only the retry policy applies per request:
// retries, backoff, jitter, server-wait and queue-wait limits, attempt
// timeout, body buffer, classifier and idempotency options. Options that
// shape the transport or its upstreams as a whole (WithLogger, WithClock,
// WithHooks, WithKeyFunc, WithRateLimit, WithRateLimitBurst,
// WithTokenEstimator, WithMaxConcurrency, WithCircuitBreaker,
// WithRetryBudget, WithQuotaBackend) have no effect per request.
func ContextWithOptions(ctx context.Context, opts ...Option) context.Context {
	if prev := requestOptions(ctx); prev != nil {
		opts = append(append([]Option(nil), prev...), opts...)
	}
	return context.WithValue(ctx, requestOptionsKey{}, opts)
}

// NoRetry returns a context whose request is sent once, never retried.
func NoRetry(ctx context.Context) context.Context {
	return ContextWithOptions(ctx, WithMaxRetries(0))
}

func requestOptions(ctx context.Context) []Option {
	opts, _ := ctx.Value(requestOptionsKey{}).([]Option)
	return opts
}

// requestPolicy applies per-request options to a copy of the transport's
// configuration and keeps only its policy.
func (t *RetryTransport) requestPolicy(opts []Option) *policy {
	cfg := t.cfg
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&cfg)
		}
	}
	return &cfg.policy
}
