// Package otelretry instruments retryhttp with OpenTelemetry: traces and
// metrics shaped the way a platform team expects of an HTTP client that
// retries. It is a module of its own, so the retryhttp core imports no
// OpenTelemetry.
//
//	t := otelretry.New(nil,
//		otelretry.WithRetryOptions(retryhttp.WithMaxRetries(3)),
//	) // the global tracer and meter providers and propagators by default
//	defer t.Close()
//	client := &http.Client{Transport: t}
//
// # Traces
//
// Every request gets a span for the logical request (kind internal, named
// "retryhttp GET") and, under it, one client span per attempt, made by
// otelhttp and so following the HTTP client semantic conventions
// (http.request.method, url.full, server.address, http.response.status_code,
// error.type), with http.request.resend_count on resends. The trace context
// (W3C traceparent with the default propagators) goes out on every attempt,
// naming that attempt's span as the parent.
//
// The logical span records each wait as a "retryhttp.wait" event: the wait
// before an attempt was admitted (a hold, its paced turn, the slow-start
// probe, the client-side limits, the breaker, a concurrency slot) and the
// wait between attempts (the backoff, or the server's Retry-After), with its
// kind, duration in seconds, the attempt it came before, and, between
// attempts, the outcome that led to it. When the request ends the span gets
// its verdict (success, failure, gave_up, canceled), the stop reason when
// retrying stopped early, the attempts made, the final status or error
// type, and the upstream as Stats names it.
//
// URLs in spans are retryhttp's redacted ones: no user information, no
// secret-looking query values, none of the request's credentials.
//
// # Metrics
//
// http.client.request.duration per attempt (otelhttp), and the metrics of
// this package, whose attributes all come from short fixed lists but for the
// upstream, which is the Stats key (scheme, host and port, or a fingerprint):
// retryhttp.attempts, retryhttp.retry.delay, retryhttp.queue.duration,
// retryhttp.requests.given_up, retryhttp.request.duration,
// retryhttp.breaker.transitions, and gauges read from Stats on collection:
// retryhttp.breaker.status, retryhttp.requests.queued, retryhttp.pace.rate,
// retryhttp.ratelimit.remaining and .limit per dimension,
// retryhttp.hold.remaining and retryhttp.retry_budget.remaining.
// docs/observability.md in the repository lists every metric and attribute
// and suggests a dashboard.
//
// # Design
//
// retryhttp reports through its Hooks and Stats, which carry what is needed
// (the request's context, the upstream key, what each wait was for, each
// attempt's verdict and duration, the stop reason). New builds the layers,
// outermost first:
//
//  1. Transport: the logical span, and a small per-request record in the
//     request's context where the hooks and the attempt layers find it;
//  2. retryhttp.RetryTransport, with this package's hooks (span events and
//     metrics) followed by the caller's (WithHooks);
//  3. otelhttp.Transport: the attempt's client span, the trace context in
//     its headers, http.client.request.duration;
//  4. the base transport, under a thin layer that puts the redacted URL and
//     the resend count on the client span.
//
// The gauges come from one callback that reads Stats when the metrics are
// collected; Close unregisters it.
package otelretry
