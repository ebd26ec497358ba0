package retrytest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// core is what a Server and a Transport share: the decisions, the bucket
// and the records. Rendering an answer is theirs.
type core struct {
	cfg   Config
	start time.Time
	// done is closed when a Server closes, to end real-time waits that
	// would otherwise keep httptest.Server.Close waiting. nil (never
	// closed) for a Transport.
	done chan struct{}

	mu        sync.Mutex
	rng       *rand.Rand
	streamRng *rand.Rand // Flaky.StreamError's own source
	reqTokens float64    // whole requests the bucket holds, fractional
	tokTokens float64    // the token bucket
	last      time.Time  // when the buckets were last brought up to date
	window    int64      // a fixed window's number, from 0 at the start
	winReqs   int        // requests the current fixed window has admitted
	winToks   int        // tokens the current fixed window has admitted
	scriptPos int        // the next step of the shared script run
	inService int
	peak      int

	attempts      int
	statuses      map[int]int
	resets        int
	truncated     int
	slowed        int
	streamErrors  int
	arrivals      []time.Duration
	hashes        []string
	requests      map[string]*RequestStats
	statusRecords int // per-request statuses kept, against MaxRecords
	dropped       int
}

func newCore(cfg Config) *core {
	cfg = cfg.withDefaults()
	now := cfg.Now()
	seed := uint64(cfg.Seed)
	return &core{
		cfg:   cfg,
		start: now,
		// PCG's second word is a fixed odd constant so that Seed alone
		// picks the stream.
		rng:       rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)),
		streamRng: rand.New(rand.NewPCG(seed, 0xbf58476d1ce4e5b9)),
		reqTokens: float64(cfg.RateLimit.Burst),
		tokTokens: float64(cfg.RateLimit.TokenBurst),
		last:      now,
		statuses:  make(map[int]int),
		requests:  make(map[string]*RequestStats),
	}
}

// answer is the provider's decision about one arrival.
type answer struct {
	n        int    // arrival number, from 1: the provider's request id
	id       string // the client's request id, "" if none
	reset    bool   // reset the connection instead of answering
	delay    time.Duration
	slot     bool // holds a capacity slot until finish
	hold     time.Duration
	status   int
	header   http.Header
	body     string
	success  bool // Config.Success (when set) answers instead of body
	truncate bool
	stream   *Stream // a 200 streamed as server-sent events, instead of body
	// streamPlan is the stream rendered, when it is sent.
	streamPlan *streamPlan
	req        streamRequest // what the request body asks of a stream
}

// arrive records one request and decides its answer.
func (c *core) arrive(r *http.Request, body []byte) *answer {
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	var id string
	if c.cfg.RequestIDHeader != "" {
		id = r.Header.Get(c.cfg.RequestIDHeader)
	}
	req := readStreamRequest(body)
	cost := 0
	if c.cfg.RateLimit.tokenLimited() {
		// The user's function runs outside the lock: it may be slow.
		cost = c.cost(r, body)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	// The clock is read under the lock so that arrivals, refills and
	// windows are in order even when requests race.
	now := c.cfg.Now()
	c.attempts++
	a := &answer{n: c.attempts, id: id, header: make(http.Header), req: req}
	if len(c.arrivals) < c.cfg.MaxRecords {
		c.arrivals = append(c.arrivals, now.Sub(c.start))
		c.hashes = append(c.hashes, hash)
	} else {
		c.dropped++
	}
	prior, tracked := 0, false
	if id != "" {
		rs := c.requests[id]
		if rs == nil && len(c.requests) < c.cfg.MaxRecords {
			rs = new(RequestStats)
			c.requests[id] = rs
		}
		if rs != nil {
			prior, tracked = rs.Attempts, true
			rs.Attempts++
		}
	}
	// Always three draws per arrival, so the faults one request meets do
	// not depend on which faults earlier requests were configured to meet.
	uReset, uSlow, uTruncate := c.rng.Float64(), c.rng.Float64(), c.rng.Float64()

	c.setRequestID(a.header, a.n)
	c.setDate(a.header, now)
	if c.cfg.MaxAttempts > 0 && a.n > c.cfg.MaxAttempts {
		a.status = http.StatusGone
		c.setBody(a, `{"error":{"message":"retrytest fuse: more than MaxAttempts requests","type":"fuse"}}`, "application/json")
		return a
	}
	if s, ok := c.nextStep(id, prior, tracked); ok {
		c.scripted(a, s, now)
		return a
	}
	f := c.cfg.Flaky
	if uReset < f.Reset {
		a.reset = true
		c.resets++
		return a
	}
	if uSlow < f.Slow {
		a.delay = f.SlowDelay
		c.slowed++
	}
	since := now.Sub(c.start)
	for _, w := range c.cfg.Overload {
		if since >= w.From && since < w.Until {
			c.reject(a, orDefault(w.Status, http.StatusServiceUnavailable), "", "", 0)
			c.retryAfter(a.header, w.RetryAfter, now)
			return a
		}
	}
	if c.cfg.RateLimit.limited() && !c.take(a, now, cost) {
		return a
	}
	if capa := c.cfg.Capacity; capa.Max > 0 {
		if c.inService >= capa.maxAt(since) {
			c.reject(a, orDefault(capa.Status, http.StatusServiceUnavailable), "", "", 0)
			c.retryAfter(a.header, capa.RetryAfter, now)
			return a
		}
		c.inService++
		c.peak = max(c.peak, c.inService)
		a.slot, a.hold = true, capa.Hold
	}
	c.succeed(a)
	if uTruncate < f.Truncate {
		a.truncate = true
		c.truncated++
	}
	if a.stream != nil && f.StreamError > 0 && c.streamRng.Float64() < f.StreamError {
		a.stream.ErrorType, a.stream.ErrorAfter = transientStreamError(c.cfg.Family), 0
		c.streamErrors++
	}
	return a
}

// transientStreamError is the error type an overloaded provider of family
// opens a stream with.
func transientStreamError(family Family) string {
	if family == Anthropic {
		return "overloaded_error"
	}
	return "server_error"
}

// orDefault returns v, or def when v is 0.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// cost is what a request takes from the token bucket.
func (c *core) cost(r *http.Request, body []byte) int {
	n := 0
	if f := c.cfg.RateLimit.Tokens; f != nil {
		n = f(r, body)
	} else {
		n = (len(body) + 3) / 4
	}
	return min(max(n, 1), c.cfg.RateLimit.TokenBurst)
}

// nextStep returns the script step for this arrival, if there is one.
func (c *core) nextStep(id string, prior int, tracked bool) (Step, bool) {
	script := c.cfg.Script
	if len(script) == 0 {
		return Step{}, false
	}
	if c.cfg.ScriptPerRequest && id != "" {
		if !tracked || prior >= len(script) {
			return Step{}, false
		}
		return script[prior], true
	}
	if c.scriptPos >= len(script) {
		return Step{}, false
	}
	c.scriptPos++
	return script[c.scriptPos-1], true
}

// scripted makes a the answer that step s describes.
func (c *core) scripted(a *answer, s Step, now time.Time) {
	a.delay = s.Delay
	if s.Delay > 0 {
		c.slowed++
	}
	if s.Fault == FaultReset {
		a.reset = true
		c.resets++
		return
	}
	a.status = s.status()
	c.retryAfter(a.header, s.RetryAfter, now)
	switch {
	case s.Stream != nil:
		st := *s.Stream
		a.stream = &st
	case s.Body != "":
		c.setBody(a, s.Body, sniff(s.Body))
	case a.status == http.StatusOK:
		c.succeed(a)
	case a.status >= 400:
		b, ct := errorBody(c.cfg.Family, a.status, s.ErrorType, a.n, "requests", c.cfg.RateLimit.Burst)
		c.setBody(a, b, ct)
	}
	if s.Fault == FaultTruncate {
		a.truncate = true
		c.truncated++
	}
	for k, v := range s.Header {
		a.header[k] = append([]string(nil), v...)
	}
}

// sniff is the content type of a Step's own body: JSON if it looks like it,
// else what net/http would guess.
func sniff(body string) string {
	if body[0] == '{' || body[0] == '[' {
		return "application/json"
	}
	return http.DetectContentType([]byte(body))
}

func (c *core) setBody(a *answer, body, contentType string) {
	a.body = body
	a.header.Set("Content-Type", contentType)
}

// succeed makes a a 200.
func (c *core) succeed(a *answer) {
	a.status, a.success = http.StatusOK, true
	switch {
	case c.cfg.Success != nil:
	case a.req.stream:
		a.stream = &Stream{} // the request asked for a stream
	default:
		c.setBody(a, successBody(c.cfg.Family, a.n), "application/json")
	}
}

// reject makes a an error answer in the family's style.
func (c *core) reject(a *answer, status int, typ, limitKind string, limit int) {
	a.status = status
	b, ct := errorBody(c.cfg.Family, status, typ, a.n, limitKind, limit)
	c.setBody(a, b, ct)
}

// setRequestID sets the family's request-id header, which the APIs send on
// every answer and clients put in their errors.
func (c *core) setRequestID(h http.Header, n int) {
	switch c.cfg.Family {
	case OpenAI:
		h.Set("X-Request-Id", requestID(n))
	case Anthropic:
		h.Set("Request-Id", requestID(n))
	case GitHub:
		h.Set("X-Github-Request-Id", requestID(n))
	}
}

// setDate sets the Date header a server sends on every answer: the
// arrival's instant on the server's clock (the client's, with ProxyDate),
// truncated to the second as net/http writes it. Setting it keeps
// net/http from writing its own.
func (c *core) setDate(h http.Header, now time.Time) {
	if !c.cfg.ProxyDate {
		now = now.Add(c.cfg.ClockOffset)
	}
	h.Set("Date", now.UTC().Truncate(time.Second).Format(http.TimeFormat))
}

// stamp is the absolute time t as the server writes it: on its own clock
// (ClockOffset), in UTC, cut to whole seconds as Rounding says.
func (c *core) stamp(t time.Time) time.Time {
	t = t.Add(c.cfg.ClockOffset).UTC()
	switch c.cfg.Rounding {
	case RoundDown:
		return t.Truncate(time.Second)
	case RoundNearest:
		return t.Round(time.Second)
	}
	return ceilTime(t)
}

// limitState is what the families report of the rate limit after an
// arrival: the request limit and, when there is one, the token limit.
type limitState struct {
	limit, remaining int
	reset            time.Duration // until the bucket is full or the window ends
	tokens           bool
	tLimit           int
	tRemaining       int
	tReset           time.Duration
	q, w             int64 // the IETF policy: q requests per w seconds
}

// take brings the limit up to date and spends from it if it holds enough,
// setting the family's headers on a. On a rejection it makes a the
// rejection and returns false.
func (c *core) take(a *answer, now time.Time, cost int) bool {
	rl := c.cfg.RateLimit
	var (
		reqOK, tokOK bool
		wait         time.Duration // until this request would pass, if rejected
		st           limitState
	)
	if rl.Window > 0 {
		reqOK, tokOK, wait, st = c.takeWindow(now, cost)
	} else {
		reqOK, tokOK, wait, st = c.takeBucket(now, cost)
	}
	c.setLimitHeaders(a.header, now, st)
	if reqOK && tokOK {
		return true
	}
	kind, limit := "requests", rl.Burst
	if reqOK {
		kind, limit = "tokens", rl.TokenBurst
	}
	typ := map[Family]string{OpenAI: "rate_limit_exceeded", Anthropic: "rate_limit_error", GitHub: "rate_limit"}[c.cfg.Family]
	c.reject(a, rl.Status, typ, kind, limit)
	c.retryAfter(a.header, wait, now)
	return false
}

// takeBucket is take for the token buckets.
func (c *core) takeBucket(now time.Time, cost int) (reqOK, tokOK bool, wait time.Duration, st limitState) {
	rl := c.cfg.RateLimit
	tokens := rl.tokenLimited()
	if el := now.Sub(c.last); el > 0 {
		c.reqTokens = math.Min(float64(rl.Burst), c.reqTokens+rl.Rate*el.Seconds())
		if tokens {
			c.tokTokens = math.Min(float64(rl.TokenBurst), c.tokTokens+rl.TokenRate*el.Seconds())
		}
		c.last = now
	}
	reqOK = c.reqTokens >= 1-epsilon
	tokOK = !tokens || c.tokTokens >= float64(cost)-epsilon
	if reqOK && tokOK {
		c.reqTokens = math.Max(0, c.reqTokens-1)
		c.tokTokens = math.Max(0, c.tokTokens-float64(cost))
	}
	// The wait until this request would pass: the later of the two.
	if !reqOK {
		wait = seconds((1 - c.reqTokens) / rl.Rate)
	}
	if !tokOK {
		wait = max(wait, seconds((float64(cost)-c.tokTokens)/rl.TokenRate))
	}
	st = limitState{
		limit:     rl.Burst,
		remaining: whole(c.reqTokens),
		reset:     seconds((float64(rl.Burst) - c.reqTokens) / rl.Rate),
		tokens:    tokens,
	}
	st.q, st.w = ietfPolicy(rl.Rate)
	if tokens {
		st.tLimit, st.tRemaining = rl.TokenBurst, whole(c.tokTokens)
		st.tReset = seconds((float64(rl.TokenBurst) - c.tokTokens) / rl.TokenRate)
	}
	return reqOK, tokOK, wait, st
}

// takeWindow is take for a fixed window: Burst requests (and TokenBurst
// tokens) per Window, the windows counted from the provider's start.
func (c *core) takeWindow(now time.Time, cost int) (reqOK, tokOK bool, wait time.Duration, st limitState) {
	rl := c.cfg.RateLimit
	tokens := rl.tokenLimited()
	since := now.Sub(c.start)
	n := int64(since / rl.Window)
	if since < 0 && since%rl.Window != 0 {
		n-- // floor, for a clock read before the start
	}
	// A new window starts afresh; a clock that steps back stays in the
	// window it was in.
	if n > c.window {
		c.window, c.winReqs, c.winToks = n, 0, 0
	}
	end := c.start.Add(time.Duration(c.window+1) * rl.Window)
	reqOK = c.winReqs+1 <= rl.Burst
	tokOK = !tokens || c.winToks+cost <= rl.TokenBurst
	if reqOK && tokOK {
		c.winReqs++
		c.winToks += cost
	} else {
		wait = end.Sub(now)
	}
	st = limitState{
		limit:     rl.Burst,
		remaining: rl.Burst - c.winReqs,
		reset:     end.Sub(now),
		tokens:    tokens,
		q:         int64(rl.Burst),
		w:         max(1, ceilSeconds(rl.Window)),
	}
	if tokens {
		st.tLimit, st.tRemaining, st.tReset = rl.TokenBurst, rl.TokenBurst-c.winToks, st.reset
	}
	return reqOK, tokOK, wait, st
}

// setLimitHeaders writes the family's rate-limit state, which the APIs send
// on every answer, 200 and 429 alike. Plain sends none.
func (c *core) setLimitHeaders(h http.Header, now time.Time, st limitState) {
	itoa := strconv.Itoa
	switch c.cfg.Family {
	case OpenAI:
		// A Go duration until the bucket is full, in whole milliseconds
		// ("90ms", "1.2s", "0s"): OpenAI sends no finer values.
		h.Set("X-Ratelimit-Limit-Requests", itoa(st.limit))
		h.Set("X-Ratelimit-Remaining-Requests", itoa(st.remaining))
		h.Set("X-Ratelimit-Reset-Requests", ceilDur(st.reset, time.Millisecond).String())
		if st.tokens {
			h.Set("X-Ratelimit-Limit-Tokens", itoa(st.tLimit))
			h.Set("X-Ratelimit-Remaining-Tokens", itoa(st.tRemaining))
			h.Set("X-Ratelimit-Reset-Tokens", ceilDur(st.tReset, time.Millisecond).String())
		}
	case Anthropic:
		// The instant the bucket is full again, RFC 3339 in UTC with whole
		// seconds, as Rounding says (by default rounded up, never early).
		h.Set("Anthropic-Ratelimit-Requests-Limit", itoa(st.limit))
		h.Set("Anthropic-Ratelimit-Requests-Remaining", itoa(st.remaining))
		h.Set("Anthropic-Ratelimit-Requests-Reset", c.stamp(now.Add(st.reset)).Format(time.RFC3339))
		if st.tokens {
			reset := c.stamp(now.Add(st.tReset)).Format(time.RFC3339)
			for _, p := range []string{"Anthropic-Ratelimit-Tokens-", "Anthropic-Ratelimit-Input-Tokens-"} {
				h.Set(p+"Limit", itoa(st.tLimit))
				h.Set(p+"Remaining", itoa(st.tRemaining))
				h.Set(p+"Reset", reset)
			}
		}
	case GitHub:
		h.Set("X-Ratelimit-Limit", itoa(st.limit))
		h.Set("X-Ratelimit-Remaining", itoa(st.remaining))
		h.Set("X-Ratelimit-Reset", strconv.FormatInt(c.stamp(now.Add(st.reset)).Unix(), 10))
		h.Set("X-Ratelimit-Used", itoa(st.limit-st.remaining))
		h.Set("X-Ratelimit-Resource", "core")
	case IETF:
		h.Set("RateLimit", `"default";r=`+itoa(st.remaining)+`;t=`+strconv.FormatInt(ceilSeconds(st.reset), 10))
		h.Set("RateLimit-Policy", `"default";q=`+strconv.FormatInt(st.q, 10)+`;w=`+strconv.FormatInt(st.w, 10))
	}
}

// ietfPolicy states a refill rate as the draft's integer quota q per window
// of w seconds: the shortest of a second, a minute or an hour in which the
// rate is whole, else an hour rounded down (at least 1).
func ietfPolicy(rate float64) (q, w int64) {
	for _, w := range []int64{1, 60, 3600} {
		if q := rate * float64(w); q == math.Trunc(q) {
			return int64(q), w
		}
	}
	return max(1, int64(rate*3600)), 3600
}

// retryAfter writes a wait in the configured style; a wait of 0 writes
// nothing.
func (c *core) retryAfter(h http.Header, wait time.Duration, now time.Time) {
	if wait <= 0 {
		return
	}
	secs := strconv.FormatInt(max(1, ceilSeconds(wait)), 10)
	ms := strconv.FormatInt(max(1, int64(ceilDur(wait, time.Millisecond)/time.Millisecond)), 10)
	switch c.cfg.RetryAfter {
	case RetryAfterSeconds:
		h.Set("Retry-After", secs)
	case RetryAfterDate:
		h.Set("Retry-After", c.stamp(now.Add(wait)).Format(http.TimeFormat))
	case RetryAfterMillis:
		h.Set("Retry-After-Ms", ms)
	case RetryAfterMillisAndSeconds:
		h.Set("Retry-After-Ms", ms)
		h.Set("Retry-After", secs)
	}
}

// wait waits d of real time, or until the client gives up or the server
// closes; it reports whether the whole wait passed.
func (c *core) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-c.done:
		return false
	}
}

// finish records the status an answer went out with (0 for none) and frees
// its capacity slot. It is called before the answer's bytes go out, so a
// client holding an answer finds it counted and the slot free.
func (c *core) finish(a *answer, status int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a.slot {
		c.inService--
		a.slot = false
	}
	c.statuses[status]++
	if a.id == "" || c.statusRecords >= c.cfg.MaxRecords {
		return
	}
	if rs := c.requests[a.id]; rs != nil {
		rs.Statuses = append(rs.Statuses, status)
		c.statusRecords++
	}
}

// epsilon absorbs floating-point noise in the bucket: 0.1 + 0.2 tokens
// must count as 0.3, not as a hair less, or a header would say 0 where the
// arithmetic of the configured rate says 1.
const epsilon = 1e-9

// whole is the whole number of tokens in a bucket holding f.
func whole(f float64) int { return int(math.Floor(f + epsilon)) }

// seconds converts fractional seconds to a Duration, rounding up to the
// nanosecond so a wait is never reported shorter than it is; a value within
// a thousandth of a nanosecond of a whole one is floating-point noise and
// is rounded to it instead, so 1/(1/7) seconds is 7s, not 7s+1ns.
func seconds(s float64) time.Duration {
	if s <= 0 {
		return 0
	}
	ns := s * float64(time.Second)
	if r := math.Round(ns); math.Abs(ns-r) < 1e-3 {
		return time.Duration(r)
	}
	return time.Duration(math.Ceil(ns))
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// ceilDur rounds d up to a multiple of unit.
func ceilDur(d, unit time.Duration) time.Duration {
	if r := d % unit; r != 0 {
		d += unit - r
	}
	return d
}

// ceilTime is t in UTC rounded up to a whole second, the resolution of the
// date formats in headers, so a reset or Retry-After is never early.
func ceilTime(t time.Time) time.Time {
	t = t.UTC()
	if s := t.Truncate(time.Second); !s.Equal(t) {
		return s.Add(time.Second)
	}
	return t
}
