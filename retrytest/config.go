package retrytest

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"
)

// DefaultMaxRecords is how many arrivals (times and body hashes), request
// ids and per-request statuses [Stats] keeps when Config.MaxRecords is 0.
// Counters go on counting past it; only the lists stop growing, so a long
// load test cannot exhaust memory.
const DefaultMaxRecords = 100_000

// DefaultSlowDelay is the slow-headers delay when Flaky.Slow is set and
// Flaky.SlowDelay is 0.
const DefaultSlowDelay = time.Second

// Family is the API whose headers and JSON bodies the provider imitates.
// It is a string so command-line flags convert to it directly.
type Family string

// The families. Each sends its own request-id header, rate-limit headers
// (when Config.RateLimit is set) and error bodies.
const (
	// Plain sends no rate-limit state headers, no request id, and RFC 9457
	// problem details (application/problem+json) as error bodies. It is the
	// zero value. With a [RateLimit] it still limits, but says nothing about
	// the limit until it is hit: its 429 carries only the Retry-After of the
	// RetryAfter style, and with [RetryAfterNone] nothing at all, as many
	// APIs do.
	Plain Family = ""
	// OpenAI sends x-request-id and x-ratelimit-{limit,remaining,reset}-requests
	// (and -tokens with a token limit), resets as Go durations until the
	// bucket is full ("1.5s", "20ms"), and bodies
	// {"error":{"message","type","param","code"}}.
	OpenAI Family = "openai"
	// Anthropic sends request-id and anthropic-ratelimit-requests-{limit,
	// remaining,reset} (and -tokens- and -input-tokens- with a token limit),
	// resets as RFC 3339 UTC instants in whole seconds (see [Rounding]), and
	// bodies
	// {"type":"error","error":{"type","message"},"request_id"}. 529 is its
	// overloaded_error.
	Anthropic Family = "anthropic"
	// GitHub sends x-github-request-id and x-ratelimit-{limit,remaining,
	// reset,used,resource} with the reset in Unix epoch seconds (see
	// [Rounding]), bodies {"message","documentation_url","status"}, and
	// signals an exhausted rate limit with 403, as GitHub's REST API mostly
	// does (set RateLimit.Status to 429 for the other form it documents).
	// GitHub's own limit is a fixed window (RateLimit.Window); without one
	// the family reports a token bucket in GitHub's format, as many other
	// APIs do.
	GitHub Family = "github"
	// IETF sends the IETF draft's structured fields
	// RateLimit: "default";r=R;t=T and RateLimit-Policy: "default";q=Q;w=W
	// (delay-seconds), and problem details as error bodies.
	IETF Family = "ietf"
)

// RetryAfterStyle is how the provider says when to come back on a 429, an
// overload window with a RetryAfter, a capacity 503 with a RetryAfter, or a
// [Step] with a RetryAfter.
type RetryAfterStyle string

// The Retry-After styles. Waits are rounded up to the unit of the style so
// that a client honouring the header is never early; only an HTTP-date
// follows Config.Rounding, as it is an absolute time.
const (
	// RetryAfterSeconds sends Retry-After as delay-seconds, at least 1
	// ("Retry-After: 2"). The empty style means the same.
	RetryAfterSeconds RetryAfterStyle = "seconds"
	// RetryAfterDate sends Retry-After as an HTTP-date (IMF-fixdate) on the
	// server's clock (Config.Now plus ClockOffset), cut to whole seconds as
	// Config.Rounding says.
	RetryAfterDate RetryAfterStyle = "date"
	// RetryAfterMillis sends only retry-after-ms, in whole milliseconds, at
	// least 1: a client must read that header to find the wait.
	RetryAfterMillis RetryAfterStyle = "ms"
	// RetryAfterMillisAndSeconds sends retry-after-ms and Retry-After
	// seconds together, as LLM APIs do; their SDKs prefer the former.
	RetryAfterMillisAndSeconds RetryAfterStyle = "ms+seconds"
	// RetryAfterNone sends no Retry-After at all, leaving the client to its
	// backoff and the rate-limit state headers.
	RetryAfterNone RetryAfterStyle = "none"
)

// Rounding is how the provider cuts the absolute times it writes in headers
// to the whole seconds their formats hold: Anthropic's RFC 3339 resets,
// [GitHub]'s epoch X-RateLimit-Reset and Retry-After HTTP-dates. Real servers
// differ: some round up, many truncate (as Go's time.Format does), some
// round to the nearest second. A client that waits until a truncated reset
// may be up to a second early.
//
// Relative values are not affected: Retry-After delay-seconds and the [IETF]
// t= are always rounded up, [OpenAI]'s durations are in whole milliseconds
// rounded up. Nor is the Date header, which is truncated as net/http
// writes it.
type Rounding string

// The roundings. The zero value "" means [RoundUp].
const (
	// RoundUp rounds up to the next whole second, so a reset or
	// Retry-After date is never early.
	RoundUp Rounding = "ceil"
	// RoundDown truncates to the whole second, as time.Format does: a
	// reset up to a second early.
	RoundDown Rounding = "floor"
	// RoundNearest rounds to the nearest whole second, halves up.
	RoundNearest Rounding = "round"
)

// Config describes a provider. The zero value answers every request 200.
// A Config must not be changed while a provider built from it runs; the
// provider keeps its own copy of the slices.
type Config struct {
	// Family selects the headers and bodies imitated; [Plain] by default.
	Family Family
	// RetryAfter is the style of every Retry-After the provider sends;
	// [RetryAfterSeconds] by default.
	RetryAfter RetryAfterStyle
	// Rounding is how absolute times in headers (resets, Retry-After
	// dates) are cut to whole seconds; [RoundUp] by default.
	Rounding Rounding
	// ClockOffset is the server's clock minus the client's: how far ahead
	// (or, negative, behind) of Config.Now the provider's clock is. The
	// provider's own state (the rate limit, overload windows, arrival
	// times) runs on Config.Now, but every absolute time it writes (resets,
	// Retry-After dates and the Date header) is Now()+ClockOffset.
	// Relative values (Retry-After seconds, durations) are unaffected.
	ClockOffset time.Duration
	// ProxyDate writes the Date header from Config.Now, without
	// ClockOffset, as a proxy in front of the server does with its own
	// clock: the header then says nothing of the offset of the other
	// absolute times.
	ProxyDate bool

	// [RateLimit] is a token bucket, or a fixed window, shared by all
	// requests; its zero value sets no limit.
	RateLimit RateLimit
	// Overload lists windows during which every request is rejected.
	Overload []Window
	// Capacity limits how many requests are in service at once; its zero
	// value sets no limit.
	Capacity Capacity
	// Flaky adds random network faults; its zero value adds none.
	Flaky Flaky
	// Script answers the first requests, one step each, before any of the
	// provider's other behaviour; once it is used up the provider behaves
	// as the rest of the Config says. To repeat a step, repeat it in the
	// script ("503*1000"). See [ParseScript].
	Script []Step
	// ScriptPerRequest runs the Script once for every logical request (by
	// RequestIDHeader) rather than once for the provider: attempt k of each
	// request id gets step k. Requests without the header share one run.
	// Ids beyond MaxRecords distinct ones are not tracked and skip the
	// Script.
	ScriptPerRequest bool

	// Success answers requests that pass every check (and scripted 200s
	// without a Body). The provider's headers (request id, rate-limit
	// state) are set before it runs; the request body can be read again.
	// nil sends the family's small JSON success body. With [Capacity], the
	// request holds its slot until Success returns.
	Success http.Handler

	// Seed seeds the random source of [Flaky]. 0 is a seed like any other:
	// runs are reproducible whatever it is.
	Seed int64
	// Now is the provider's clock: for arrival times, the bucket, windows
	// and (plus ClockOffset) dates in headers. nil means [time.Now]. It is read once when the
	// provider is created (its start) and once per arrival, under a lock,
	// so a clock that steps on every reading gives evenly spaced arrivals.
	Now func() time.Time

	// RequestIDHeader names a request header that carries the client's own
	// id for a logical request, which its retries repeat; Stats.Requests
	// then groups attempts by it. Empty disables the grouping.
	RequestIDHeader string
	// MaxRecords bounds the lists in [Stats]; 0 means [DefaultMaxRecords].
	MaxRecords int
	// MaxAttempts is a fuse that stops a runaway retry loop: past this many
	// arrivals every request gets 410 Gone, which no client retries. 0 sets
	// no fuse.
	MaxAttempts int
}

// RateLimit is a token bucket: it holds up to Burst requests, refills at
// Rate per second, and each request takes one. Optionally a second bucket
// counts tokens (the units LLM APIs bill by) and a request takes what
// Tokens says it costs. A request is admitted only if both buckets have
// enough; otherwise it is rejected and takes nothing.
//
// With a [Window] it is a fixed window instead, as [GitHub]'s API (and many
// others) count: at most Burst requests (and TokenBurst tokens) in each
// Window, the windows laid end to end from the provider's start; what is
// left of one is not carried into the next.
//
// The families report the limit: "limit" is Burst, "remaining" is the
// whole requests (tokens) left after this one, and "reset" is when the
// bucket will be full again, or when the window ends. A rejection's
// Retry-After is the wait until the request would pass: until enough has
// refilled, or until the window ends.
type RateLimit struct {
	// Rate is how many requests per second refill the bucket. 0 disables
	// the rate limit (and the token limit), unless a [Window] is set.
	Rate float64
	// Burst is the bucket's size: how many requests may arrive at once.
	// 0 means one second's worth, at least 1. With a [Window] it is how
	// many requests each window admits; 0 then means Rate*Window, at
	// least 1.
	Burst int
	// Window, when positive, makes the limit a fixed window of this length
	// instead of a bucket: Burst requests per [Window], Rate serving only as
	// Burst's default. It needs a Burst or a Rate.
	Window time.Duration
	// TokenRate is how many tokens per second refill the token bucket; 0
	// sets no token limit (with a [Window], unless TokenBurst is set).
	TokenRate float64
	// TokenBurst is the token bucket's size; 0 means one second's worth,
	// at least 1. With a [Window] it is how many tokens each window admits;
	// 0 then means TokenRate*Window (no token limit when TokenRate is 0
	// too).
	TokenBurst int
	// Tokens says what a request costs in tokens, given its body. nil
	// counts one token per 4 bytes of body, at least 1. A cost above
	// TokenBurst is charged as TokenBurst, so every request can pass once
	// the bucket is full. Anthropic reports the one token bucket as both
	// its -tokens- and -input-tokens- headers.
	Tokens func(r *http.Request, body []byte) int
	// Status is the status of a rejection: 0 means 429, or 403 for the
	// [GitHub] family.
	Status int
}

// Window is a span of time, measured from the provider's start, during
// which every request (that no Script step answers) is rejected.
type Window struct {
	// From and Until bound the window: an arrival at From is rejected, one
	// at Until is not.
	From, Until time.Duration
	// Status is the rejection's status: 0 means 503. 529 sends [Anthropic]'s
	// overloaded_error body whatever the family.
	Status int
	// RetryAfter, when positive, is sent in the [Config]'s RetryAfter style.
	// 0 sends none, as [Anthropic]'s 529s usually carry none.
	RetryAfter time.Duration
}

// Capacity serves at most Max requests at once, each for Hold, and answers
// 503 (or Status) at once to any request that finds every slot taken, as a
// server shedding load does. A request holds its slot from its arrival until its
// answer starts (or its client gives up); a client that has its 200 may
// count on the slot being free again.
type Capacity struct {
	// Max is the number of slots; 0 sets no limit.
	Max int
	// Hold is how long an admitted request stays in service, in real time.
	Hold time.Duration
	// RetryAfter, when positive, is sent with each refusal in the
	// [Config]'s RetryAfter style.
	RetryAfter time.Duration
	// Status is the refusal's status: 0 means 503. 529 sends [Anthropic]'s
	// overloaded_error body whatever the family, as an overloaded LLM
	// provider answers.
	Status int
	// Changes change Max mid-run, as a server that loses (or regains)
	// capacity does: from each change's At (from the provider's start, on
	// Config.Now) on, the provider serves at most its Max at once. They
	// must be in order of At; each Max must be at least 1. Requests in
	// service when Max drops finish as they are.
	Changes []CapacityChange
}

// CapacityChange is a change of Capacity.Max at a time.
type CapacityChange struct {
	At  time.Duration // from the provider's start
	Max int           // the slots from then on, at least 1
}

// maxAt is the number of slots at since (from the provider's start).
func (c Capacity) maxAt(since time.Duration) int {
	n := c.Max
	for _, ch := range c.Changes {
		if since < ch.At {
			break
		}
		n = ch.Max
	}
	return n
}

// Flaky adds network faults to answers that no Script step decides. Each
// probability is in [0, 1].
type Flaky struct {
	// Reset is the probability that a request gets no answer: the server
	// resets the connection (TCP RST); the [Transport] returns a
	// *net.OpError wrapping syscall.ECONNRESET.
	Reset float64
	// Truncate is the probability that a 200's body is cut short: the
	// Content-Length is the full length but only half the body is sent
	// before the connection closes (the [Transport]'s body fails with
	// io.ErrUnexpectedEOF).
	Truncate float64
	// Slow is the probability that the answer's headers come only after
	// SlowDelay of real time.
	Slow float64
	// SlowDelay is the slow-headers delay; 0 means [DefaultSlowDelay].
	SlowDelay time.Duration
	// StreamError is the probability that a streamed success (a [Stream])
	// opens with an error event of a transient kind instead of its first
	// event, as an overloaded provider's streams do: [Anthropic]'s
	// overloaded_error, the others' server_error. The connection then ends
	// normally. It is drawn from a random source of its own, so setting it
	// does not change which other faults a seed stages.
	StreamError float64
}

// Validate reports what is wrong with c, or nil. [NewServer] and [NewTransport]
// panic on a [Config] that does not validate.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch c.Family {
	case Plain, OpenAI, Anthropic, GitHub, IETF:
	default:
		bad("unknown Family %q", string(c.Family))
	}
	switch c.RetryAfter {
	case "", RetryAfterSeconds, RetryAfterDate, RetryAfterMillis, RetryAfterMillisAndSeconds, RetryAfterNone:
	default:
		bad("unknown RetryAfter style %q", string(c.RetryAfter))
	}
	switch c.Rounding {
	case "", RoundUp, RoundDown, RoundNearest:
	default:
		bad("unknown Rounding %q: want %q, %q or %q", string(c.Rounding), RoundUp, RoundDown, RoundNearest)
	}
	rl := c.RateLimit
	if !finiteNonNegative(rl.Rate) || !finiteNonNegative(rl.TokenRate) {
		bad("RateLimit.Rate and TokenRate must be finite and not negative")
	}
	if rl.Burst < 0 || rl.TokenBurst < 0 {
		bad("RateLimit.Burst and TokenBurst must not be negative")
	}
	if rl.Window < 0 {
		bad("RateLimit.Window must not be negative")
	}
	if rl.Window > 0 && rl.Rate == 0 && rl.Burst == 0 {
		bad("RateLimit.Window needs a Burst (or a Rate): how many requests a window admits")
	}
	if rl.TokenRate > 0 && rl.Rate == 0 && rl.Window == 0 {
		bad("RateLimit.TokenRate needs a Rate: the token limit comes with a request limit")
	}
	if rl.Status != 0 && !isError(rl.Status) {
		bad("RateLimit.Status %d is not an error status (400-599)", rl.Status)
	}
	for i, w := range c.Overload {
		if w.From < 0 || w.Until <= w.From {
			bad("Overload[%d]: need 0 <= From < Until, have %v, %v", i, w.From, w.Until)
		}
		if w.Status != 0 && !isError(w.Status) {
			bad("Overload[%d]: Status %d is not an error status (400-599)", i, w.Status)
		}
		if w.RetryAfter < 0 {
			bad("Overload[%d]: negative RetryAfter", i)
		}
	}
	if c.Capacity.Max < 0 || c.Capacity.Hold < 0 || c.Capacity.RetryAfter < 0 {
		bad("Capacity fields must not be negative")
	}
	if c.Capacity.Status != 0 && !isError(c.Capacity.Status) {
		bad("Capacity.Status %d is not an error status (400-599)", c.Capacity.Status)
	}
	if len(c.Capacity.Changes) > 0 && c.Capacity.Max == 0 {
		bad("Capacity.Changes need a Capacity.Max: the slots before the first change")
	}
	for i, ch := range c.Capacity.Changes {
		if ch.At < 0 || ch.Max < 1 || (i > 0 && ch.At < c.Capacity.Changes[i-1].At) {
			bad("Capacity.Changes[%d]: need At >= 0 in order and Max >= 1, have %v, %d", i, ch.At, ch.Max)
		}
	}
	f := c.Flaky
	for _, p := range []float64{f.Reset, f.Truncate, f.Slow, f.StreamError} {
		if !(p >= 0 && p <= 1) { // also catches NaN
			bad("Flaky probabilities must be in [0, 1], have %v", p)
			break
		}
	}
	if f.SlowDelay < 0 {
		bad("Flaky.SlowDelay must not be negative")
	}
	for i, s := range c.Script {
		if err := s.validate(); err != nil {
			bad("Script[%d]: %v", i, err)
		}
	}
	if c.ScriptPerRequest && c.RequestIDHeader == "" {
		bad("ScriptPerRequest needs a RequestIDHeader to tell requests apart")
	}
	if c.MaxRecords < 0 || c.MaxAttempts < 0 {
		bad("MaxRecords and MaxAttempts must not be negative")
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("retrytest: invalid Config: %w", err)
	}
	return nil
}

func finiteNonNegative(f float64) bool { return f >= 0 && !math.IsInf(f, 1) }

func isError(status int) bool { return status >= 400 && status <= 599 }

// ceilCount rounds a count up to a whole one, ignoring floating-point
// noise (100 * 0.07 is 7, not 8), and caps it so it fits an int.
func ceilCount(f float64) int {
	if r := math.Round(f); math.Abs(f-r) < 1e-9 {
		f = r
	}
	return int(math.Min(math.Ceil(f), math.MaxInt32))
}

// limited reports whether the RateLimit (with its defaults) limits at all.
func (rl RateLimit) limited() bool { return rl.Rate > 0 || rl.Window > 0 }

// tokenLimited reports whether the RateLimit (with its defaults) also
// limits tokens.
func (rl RateLimit) tokenLimited() bool {
	return rl.TokenRate > 0 || (rl.Window > 0 && rl.TokenBurst > 0)
}

// withDefaults validates c and fills in its defaults, copying the slices so
// the caller's later edits cannot race the provider.
func (c Config) withDefaults() Config {
	if err := c.Validate(); err != nil {
		panic(err)
	}
	if c.RetryAfter == "" {
		c.RetryAfter = RetryAfterSeconds
	}
	if c.Rounding == "" {
		c.Rounding = RoundUp
	}
	// One second's worth, or one window's.
	per := 1.0
	if w := c.RateLimit.Window; w > 0 {
		per = w.Seconds()
	}
	if (c.RateLimit.Rate > 0 || c.RateLimit.Window > 0) && c.RateLimit.Burst == 0 {
		c.RateLimit.Burst = max(1, ceilCount(c.RateLimit.Rate*per))
	}
	if c.RateLimit.TokenRate > 0 && c.RateLimit.TokenBurst == 0 {
		c.RateLimit.TokenBurst = max(1, ceilCount(c.RateLimit.TokenRate*per))
	}
	if c.RateLimit.Status == 0 {
		c.RateLimit.Status = http.StatusTooManyRequests
		if c.Family == GitHub {
			c.RateLimit.Status = http.StatusForbidden
		}
	}
	if c.Flaky.Slow > 0 && c.Flaky.SlowDelay == 0 {
		c.Flaky.SlowDelay = DefaultSlowDelay
	}
	if c.MaxRecords == 0 {
		c.MaxRecords = DefaultMaxRecords
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Overload = append([]Window(nil), c.Overload...)
	c.Capacity.Changes = append([]CapacityChange(nil), c.Capacity.Changes...)
	script := make([]Step, len(c.Script))
	for i, s := range c.Script {
		s.Header = s.Header.Clone()
		script[i] = s
	}
	c.Script = script
	return c
}
