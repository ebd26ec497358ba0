package retryhttp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Defaults; docs/configuration.md lists them (checked by docs_test.go). Change them with the options below.
const (
	DefaultMaxRetries      = 5
	DefaultBackoffBase     = 1 * time.Second
	DefaultBackoffMax      = 32 * time.Second
	DefaultMultiplier      = 2.0
	DefaultJitter          = 1 * time.Second
	DefaultMaxRetryAfter   = 60 * time.Second
	DefaultMaxBufferedBody = 8 << 20 // 8 MiB: a long prompt with a few images
)

// Option configures a [RetryTransport]. Options are applied in order by [New].
// The retry-policy options have per-request counterparts of type
// [RequestOption], given to [ContextWithOptions] ([WithMaxRetries]: [MaxRetries]);
// the others shape the transport as a whole and have none.
type Option struct {
	apply func(*config)
}

// config is everything New assembles: the transport-wide parts and the
// retry policy, which RequestOptions may override per request.
type config struct {
	base   http.RoundTripper
	logger *slog.Logger
	clock  Clock
	hooks  Hooks
	// tokenEstimator is the user's WithTokenEstimator; nil means
	// DefaultTokenEstimator. Transport-wide: WithTokens sets counts per request.
	tokenEstimator func(*http.Request) (input, output int)

	keyFunc        func(*http.Request) string
	keyByModel     bool
	limits         Limits
	limitBurst     time.Duration
	maxConcurrency int

	// quota is the WithQuotaBackend state, shared by the transport's
	// upstreams; nil keeps every quota in memory. quotaTimeout bounds each
	// call to it (0: DefaultQuotaTimeout).
	quota        *sharedQuota
	quotaTimeout time.Duration

	// breaker and retryBudget configure each upstream's circuit breaker
	// and retry budget; their zero values mean the defaults.
	breaker     CircuitBreaker
	retryBudget RetryBudget
	// adaptive configures each upstream's adaptive concurrency limit; its
	// zero value means the defaults.
	adaptive AdaptiveConcurrency

	// quick: requests may take the quick path (quick.go), set by
	// configure from the rest.
	quick bool

	policy
}

// policy is the part of the configuration that decides, for one request,
// whether and when to retry. It is a plain value so a request can carry its
// own copy.
type policy struct {
	maxRetries       int
	backoffBase      time.Duration
	backoffMax       time.Duration
	multiplier       float64
	jitter           time.Duration
	jitterStrategy   JitterStrategy
	maxRetryAfter    time.Duration
	attemptTimeout   time.Duration
	maxBufferedBody  int64
	classifier       Classifier
	idempotencyKey   bool
	idempotencyGuard bool
	maxQueueWait     time.Duration
	// firstEventTimeout and firstEventMax bound the first-event check of
	// streams (firstevent.go); a timeout of 0 turns it off.
	firstEventTimeout time.Duration
	firstEventMax     int
}

func defaultConfig() config {
	return config{
		clock: systemClock{},
		policy: policy{
			maxRetries:      DefaultMaxRetries,
			backoffBase:     DefaultBackoffBase,
			backoffMax:      DefaultBackoffMax,
			multiplier:      DefaultMultiplier,
			jitter:          DefaultJitter,
			maxRetryAfter:   DefaultMaxRetryAfter,
			maxBufferedBody: DefaultMaxBufferedBody,

			firstEventTimeout: DefaultFirstEventTimeout,
			firstEventMax:     DefaultFirstEventMaxBytes,
		},
	}
}

// WithMaxRetries sets how many retries may follow the first attempt. The
// default is 5; 0 never retries. Negative values are treated as 0.
// Per request: [MaxRetries].
func WithMaxRetries(n int) Option {
	return MaxRetries(n).forTransport()
}

// MaxRetries overrides, for one request, how many retries may follow the
// first attempt; [WithMaxRetries] sets it for every request. 0 never
// retries (see [NoRetry]); negative values are treated as 0.
func MaxRetries(n int) RequestOption {
	return RequestOption{func(p *policy) { p.maxRetries = max(n, 0) }}
}

// WithBackoff sets the computed wait before retry k (k = 1, 2, ...):
// min(base·multiplier^(k-1), max), plus jitter. The default is 1s and 32s.
// A base of 0 or less retries at once (plus jitter); a max below base is
// raised to base. Per request: [Backoff].
func WithBackoff(base, max time.Duration) Option {
	return Backoff(base, max).forTransport()
}

// Backoff overrides, for one request, the computed wait before retry k:
// min(base·multiplier^(k-1), max), plus jitter; [WithBackoff] sets it for
// every request. A base of 0 or less retries at once (plus jitter); a max
// below base is raised to base.
func Backoff(base, max time.Duration) RequestOption {
	return RequestOption{func(p *policy) {
		p.backoffBase = base
		if base < 0 {
			p.backoffBase = 0
		}
		p.backoffMax = max
		if p.backoffMax < p.backoffBase {
			p.backoffMax = p.backoffBase
		}
	}}
}

// WithBackoffMultiplier sets the growth factor between computed waits. The
// default is 2. Values below 1 (and NaN) are treated as 1: a constant wait.
// Per request: [BackoffMultiplier].
func WithBackoffMultiplier(f float64) Option {
	return BackoffMultiplier(f).forTransport()
}

// BackoffMultiplier overrides, for one request, the growth factor between
// computed waits; [WithBackoffMultiplier] sets it for every request. Values
// below 1 (and NaN) are treated as 1: a constant wait.
func BackoffMultiplier(f float64) RequestOption {
	// Clamped here, not in the closure: one RequestOption may be applied by
	// many requests at once.
	if !(f >= 1) { // also catches NaN
		f = 1
	}
	return RequestOption{func(p *policy) { p.multiplier = f }}
}

// WithJitter sets the most random time added to each computed wait, drawn
// uniformly from [0, max) afresh each time. The default is 1s; 0 adds none.
// With [FullJitter] or [DecorrelatedJitter] the backoff's randomness comes from
// the strategy itself and this value is not added to it. A wait the server
// asked for (Retry-After) gets jitter in proportion to itself: up to a
// fifth of it, never more than this value, so a 50 ms Retry-After waits at
// most 60 ms; none after a quota's refusal (a 429) when the upstream's
// pace spaces the retries itself (one attempt an interval, as after a
// header-less 429, or a fixed window whose quota returns at once), so a
// retry goes when the server said (and a Retry-After of "now" takes the
// pace's next turn rather than a backoff). It also spreads the requests
// released together after a hold, so that they do not return as a herd.
// Per request: [Jitter].
func WithJitter(max time.Duration) Option {
	return Jitter(max).forTransport()
}

// Jitter overrides, for one request, the most random time added to each
// computed wait; [WithJitter] sets it for every request and describes how
// it is applied. 0 adds none; negative values are treated as 0.
func Jitter(max time.Duration) RequestOption {
	return RequestOption{func(p *policy) { p.jitter = maxDuration(max, 0) }}
}

// WithJitterStrategy chooses how randomness is applied to the backoff. The
// default, [AdditiveJitter], is the contract's "computed wait plus up to
// [WithJitter]". See [JitterStrategy]. Per request: [UseJitterStrategy].
func WithJitterStrategy(s JitterStrategy) Option {
	return UseJitterStrategy(s).forTransport()
}

// UseJitterStrategy overrides, for one request, how randomness is applied
// to the backoff; [WithJitterStrategy] sets it for every request. (It is
// not named [JitterStrategy], the name of the strategies' type.)
func UseJitterStrategy(s JitterStrategy) RequestOption {
	return RequestOption{func(p *policy) { p.jitterStrategy = s }}
}

// WithMaxRetryAfter sets the longest server-requested wait (Retry-After,
// retry-after-ms) that is honoured. A longer one ends retrying at once and the
// response that asked for it is returned. The default is 60s.
// Per request: [MaxRetryAfter].
func WithMaxRetryAfter(d time.Duration) Option {
	return MaxRetryAfter(d).forTransport()
}

// MaxRetryAfter overrides, for one request, the longest server-requested
// wait that is honoured; [WithMaxRetryAfter] sets it for every request. It
// is also the default limit on waiting to be admitted (see [MaxQueueWait]).
// Negative values are treated as 0.
func MaxRetryAfter(d time.Duration) RequestOption {
	return RequestOption{func(p *policy) { p.maxRetryAfter = maxDuration(d, 0) }}
}

// WithAttemptTimeout bounds each attempt from the moment it is sent until
// its response headers arrive; reading the body is not timed, so streams are
// not cut. A timed-out attempt is transient and may be retried. The default, 0,
// sets no per-attempt timeout: the request context alone bounds the call.
// Per request: [AttemptTimeout].
func WithAttemptTimeout(d time.Duration) Option {
	return AttemptTimeout(d).forTransport()
}

// AttemptTimeout overrides, for one request, the bound on each attempt from
// the moment it is sent until its response headers arrive;
// [WithAttemptTimeout] sets it for every request. 0 sets none; negative
// values are treated as 0.
func AttemptTimeout(d time.Duration) RequestOption {
	return RequestOption{func(p *policy) { p.attemptTimeout = maxDuration(d, 0) }}
}

// WithMaxBufferedBody sets how many bytes of a request body that cannot be
// re-read (no GetBody, not an io.Seeker) are kept so it can be sent again.
// A larger body is sent once and not retried. The default is 8 MiB.
// Per request: [MaxBufferedBody].
func WithMaxBufferedBody(n int64) Option {
	return MaxBufferedBody(n).forTransport()
}

// MaxBufferedBody overrides, for one request, how many bytes of a body that
// cannot be re-read are kept so it can be sent again;
// [WithMaxBufferedBody] sets it for every request. A larger body is sent
// once and not retried. Negative values are treated as 0.
func MaxBufferedBody(n int64) RequestOption {
	return RequestOption{func(p *policy) { p.maxBufferedBody = max(n, 0) }}
}

// WithLogger sends the transport's logs to l: debug per attempt, info per
// retry (with the wait and the reason), warn on giving up. nil, the default,
// is silent. Credentials never appear in log lines: URLs and error texts are
// redacted as [Error]'s are (the request's own Authorization, X-Api-Key,
// Api-Key and Cookie values included), and an upstream keyed by [WithKeyFunc]
// is named by its fingerprint.
func WithLogger(l *slog.Logger) Option {
	return Option{func(c *config) { c.logger = l }}
}

// WithClock replaces the system clock, so tests can drive waits by hand.
// nil restores the system clock.
func WithClock(clk Clock) Option {
	return Option{func(c *config) {
		if clk == nil {
			clk = systemClock{}
		}
		c.clock = clk
	}}
}

// WithClassifier installs a classifier that is asked first about every
// outcome. It returns [Retry] or [Stop] to decide, or [Default] to defer to the
// built-in rules (see [Retryable]). Per request: [Classify].
func WithClassifier(f Classifier) Option {
	return Classify(f).forTransport()
}

// Classify overrides, for one request, the classifier asked first about
// every outcome; [WithClassifier] sets it for every request. It replaces
// the transport's classifier rather than adding to it: nil leaves the
// built-in rules alone to decide.
func Classify(f Classifier) RequestOption {
	return RequestOption{func(p *policy) { p.classifier = f }}
}

// Verdict is a classifier's answer about one attempt's outcome.
type Verdict int

const (
	// Default defers to the built-in rules.
	Default Verdict = iota
	// Retry marks the outcome transient: it is retried while the policy allows.
	Retry
	// Stop marks the outcome final: it is returned as it is.
	Stop
)

// Classifier decides whether an attempt's outcome is worth retrying. Exactly
// one of resp and err is non-nil. It must not read resp.Body.
type Classifier func(resp *http.Response, err error) Verdict

// Retryable reports whether the built-in rules retry this outcome, as
// RoundTrip judges it. Exactly one of resp and err should be non-nil.
//
// Responses: x-should-retry (true or false) wins when present; otherwise 408,
// 429, 500, 502, 503, 504 and 529 are transient and every other status final,
// except where the body says otherwise: a 429 whose body names an exhausted
// quota or billing (insufficient_quota) is final, a 403 naming GitHub's
// secondary rate limit transient. For those two statuses it peeks at the
// body (at most 16 KiB, for a short time) and puts the bytes back.
//
// Errors: transient unless a retry cannot help: the request's own context
// ended, a certificate failed verification, the server does not speak TLS,
// the host does not exist (DNS "not found"), or the request itself is
// invalid ([ErrInvalidRequest]). Everything else, including errors net/http
// reports without a type (an unexpected EOF, a closed idle connection), is a
// network failure and transient.
func Retryable(resp *http.Response, err error) bool {
	if err != nil {
		return retryableError(err)
	}
	if resp == nil {
		return false
	}
	if v, ok := parseShouldRetry(resp.Header); ok {
		return v
	}
	return retryableAnswer(resp)
}

// retryableAnswer is Retryable for a response without an x-should-retry
// verdict: the body's word on a 403 or 429, else the status.
func retryableAnswer(resp *http.Response) bool {
	if v, ok := bodyVerdict(resp); ok {
		return v
	}
	return retryableResponse(resp)
}

// retryableResponse classifies by status, with GitHub's rate-limit 403.
func retryableResponse(resp *http.Response) bool {
	if resp.StatusCode == http.StatusForbidden {
		return rateLimited403(resp.Header)
	}
	return retryableStatus(resp.StatusCode)
}

// rateLimited403 reports a 403 that is a rate limit, not a refusal: GitHub
// sends its primary rate limit as 403 with x-ratelimit-remaining: 0, and
// secondary limits with a Retry-After.
func rateLimited403(h http.Header) bool {
	if h.Get("Retry-After") != "" {
		return true
	}
	return h.Get("X-Ratelimit-Remaining") == "0"
}

func retryableStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests,
		http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout,
		StatusOverloaded:
		return true
	}
	return false
}

// errNoOutcome reports a base RoundTripper that broke its contract by
// returning neither a response nor an error. Sending again will not mend it.
var errNoOutcome = errors.New("retryhttp: base RoundTripper returned no response and no error")

// StatusOverloaded is the non-standard 529 that Anthropic (and others) send
// when the service as a whole is overloaded.
const StatusOverloaded = 529

func retryableError(err error) bool {
	if errors.Is(err, errAttemptTimeout) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, ErrInvalidRequest) || errors.Is(err, ErrBodyNotReplayable) || errors.Is(err, errNoOutcome) {
		return false
	}
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalidCert x509.CertificateInvalidError
	var recordErr tls.RecordHeaderError
	if errors.As(err, &certErr) || errors.As(err, &unknownAuth) ||
		errors.As(err, &hostErr) || errors.As(err, &invalidCert) ||
		errors.As(err, &recordErr) {
		return false
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return false
	}
	return true
}

// classify applies the user's classifier, then the built-in rules, then the
// rules only an error body can settle (see bodyVerdict). byUser reports
// that the classifier decided.
func (p *policy) classify(resp *http.Response, err error) (retry, byUser bool) {
	if p.classifier != nil {
		switch p.classifier(resp, err) {
		case Retry:
			return true, true
		case Stop:
			return false, true
		}
	}
	return Retryable(resp, err), false
}

// classifyResponse is classify for a response whose header keys were
// scanned (see scanHeader): without an X-Should-Retry key there is no
// header verdict to look up.
func (p *policy) classifyResponse(resp *http.Response, shouldRetry bool) (retry, byUser bool) {
	if p.classifier != nil {
		switch p.classifier(resp, nil) {
		case Retry:
			return true, true
		case Stop:
			return false, true
		}
	}
	switch {
	case shouldRetry:
		return Retryable(resp, nil), false
	case resp.StatusCode < 400:
		// No retryable status, and no body to peek at (see bodyVerdict):
		// most answers stop here.
		return false, false
	}
	return retryableAnswer(resp), false
}

// maxVerdictBody bounds the peek at 403 and 429 bodies.
const maxVerdictBody = 16 << 10

// bodyVerdict settles the two cases where real APIs make a status-only
// verdict wrong, by peeking at the error body (bounded, and put back):
//
//   - a 429 whose body says the quota or billing is used up (OpenAI's
//     insufficient_quota) is permanent: waiting will not refill it;
//   - a 403 whose body names GitHub's secondary rate limit is transient:
//     waiting is exactly what helps.
func bodyVerdict(resp *http.Response) (retry, ok bool) {
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusForbidden:
	default:
		return false, false
	}
	p := parseProviderError(peekBody(resp, maxVerdictBody), resp.Header.Get("Content-Type"))
	switch {
	case resp.StatusCode == http.StatusTooManyRequests && quotaExhausted(p.Type):
		return false, true
	case resp.StatusCode == http.StatusForbidden && p.Type == "secondary_rate_limit":
		return true, true
	}
	return false, false
}

func maxDuration(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}
