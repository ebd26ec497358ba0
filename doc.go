// Package retryhttp is a drop-in [http.RoundTripper] that lets an HTTP client
// ride out rate limits, overloads and flaky networks.
//
// Set it as an [http.Client]'s Transport, or hand such a client to a vendor
// SDK with the SDK's own retries turned off:
//
//	client := &http.Client{Transport: retryhttp.New(nil)}
//
// # The model
//
// Every request passes the same stages on every attempt:
//
//  1. admit: the request is checked once (a request that can never succeed,
//     such as one with an unsupported scheme or an invalid header, is refused
//     before anything is sent); then each attempt waits its turn on its
//     upstream: past a hold (a 429, or a quota the headers say is used up),
//     at the pace the rate-limit headers imply, within client-side limits
//     ([WithRateLimit]), first come first served, past the upstream's circuit
//     breaker (while it is open, callers wait for its probe's answer), and
//     for a concurrency slot ([WithMaxConcurrency]). A request that could not
//     be admitted in time fails at once with [ErrRateLimited], or
//     [ErrCircuitOpen] when the breaker is the reason;
//  2. send: the attempt goes out with a fresh, byte-identical copy of the body
//     (req.GetBody, a rewound io.Seeker, or a bounded buffer teed from the
//     first attempt) and, if set, its own timeout;
//  3. observe and classify: the response's rate-limit headers teach the
//     upstream's pacing, and its circuit breaker learns whether the upstream
//     is failing (5xx, 529, attempt timeouts, connection errors); 408, 429, 500, 502, 503, 504, 529 and network
//     errors are transient, everything else final, with the exceptions real
//     APIs force (a rate-limit 403 is transient, a 429 for exhausted quota
//     final); x-should-retry overrides the status, and [WithClassifier] can
//     decide first;
//  4. wait: the server's Retry-After or retry-after-ms is a floor; otherwise
//     exponential backoff with jitter (1s, 2s, 4s, 8s, 16s, each plus up to
//     1s, by default). A wait the server asks for that is longer than
//     [WithMaxRetryAfter], or one that would end past the context's deadline,
//     ends retrying at once: the caller gets the last outcome now rather than
//     a failure later. A retry after an upstream failure also draws on the
//     upstream's retry budget ([WithRetryBudget]), so an outage cannot
//     multiply the load on it.
//
// The outcome is the last response, returned with its body unread and its
// type kept (a 101 body stays an io.ReadWriteCloser), or an [*Error] when the
// last attempt ended in a transport error. Bodies of superseded attempts are
// drained (up to 64 KiB, for at most 200 ms) and closed so connections are
// reused, and a stalled body never holds up the call; response
// bodies are never buffered, so streams pass straight through.
//
// # Streams and tokens
//
// A 2xx server-sent event stream is read up to its first event before it is
// returned ([WithFirstEventCheck]: 2s, 64 KiB): a first event that is a
// transient error (Anthropic's overloaded_error, OpenAI's server_error
// chunk) is judged and retried as the 529, 500 or 429 it stands for, since
// nothing has reached the caller; otherwise the bytes read are served
// first and the rest passes straight through. Errors later in a stream are
// never retried: they are the caller's. Token limits (WithRateLimit) book
// an estimate when a request is admitted and are settled by the usage its
// response reports, read as the body passes; [WithKeyByModel] applies
// pacing, holds and limits per model, as providers do.
//
// # What is learned from a server, and how far it is trusted
//
// Real servers are not tidy: their clocks are seconds off, they cut
// whole-second resets down as often as up, most send no rate-limit headers
// at all, and some send absurd values. Adaptation must never make things
// worse than a plain retry loop, so four rules hold:
//
//   - Bounded trust: no state learned from a server (a hold, a pace, a quota
//     reading) keeps an upstream from being tried for longer than
//     WithMaxRetryAfter (60s by default). A hold cut to that bound ends in
//     a new probe: one request goes and its answer decides. So does a
//     queue waiting on the pace with nothing in flight: its first request
//     goes within the bound (and one pace interval) of the last attempt,
//     and the queue follows. A request that cannot wait for its own turn
//     still fails at once with ErrRateLimited and RetryAt.
//   - The server's clock: absolute times (RFC 3339 and epoch resets,
//     Retry-After dates) are read against the response's Date header (see
//     [ServerNow]) and treated as good to about a second (Quota.Coarse). A
//     reset at or before the server's now means now.
//   - Observations beat statements: 429s lower the pace (once per round
//     trip, as TCP does on loss) and lower what readings seemed to prove;
//     once the server is seen to accept, a 429's hold lasts one unit at the
//     accepted rate rather than a coarse Retry-After, and no longer than
//     the fine reset the same answer states; a bucket read full long before
//     the reset it stated has resets that bound no rate. The refused
//     request's own wait stays the Retry-After.
//   - No headers: after a 429 the upstream is paced at the rate the server
//     was seen to accept over the last second, doubling while requests wait
//     and none is refused, cut on a 429 to what a run of 429s measured (or
//     to 70%), then creeping up (see the pacer's modes: off, stated,
//     measured, observed). Retry-After stays a floor for the request that
//     got it.
//
// The robustness matrix (robustness_test.go, in simulated time) holds these
// rules against 1,197 server behaviours (header families, rounding, clock
// offsets, Retry-After styles, loads, round trips, callers that think,
// proxies' Dates, answers whose time varies); docs/design.md has the
// figures.
//
// # Errors
//
// [CheckResponse] turns any (resp, err) pair into an *Error for statuses of 400
// and above. It carries the status, attempts, whether retrying later may
// help and when, and what the provider said (its error type, message and
// request id). Error() is for logs; UserMessage is a calm sentence for end
// users. Neither ever holds credentials: URLs, error texts, log lines and
// hook arguments are redacted, the request's own credential headers'
// values wherever they appear, and [WithKeyFunc] keys are fingerprinted.
//
// # Shared quotas
//
// Limits belong to an account, not a process. [WithQuotaBackend] keeps the
// client-side limits and the holds learned from the server in a store that
// many processes share (the redisquota module keeps them in Redis); when the
// store cannot be reached, each process falls back to its local share of
// each limit.
//
// # Observability
//
// Stats reports, per upstream, requests, attempts, retries, 429s, upstream
// failures, the breaker's state, the queue and the budget left. Hooks
// ([WithHooks]) report attempts, retries, give-ups and breaker changes as they
// happen; [WithLogger] logs them through log/slog.
//
// # Time
//
// All waits go through a [Clock] ([WithClock]), so tests can run a whole retry
// schedule without sleeping through it.
package retryhttp
