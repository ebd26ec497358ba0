package retryhttp

import (
	"errors"
	"sync"
	"time"
)

// ErrRateLimited reports that a request could not be admitted in time: the
// upstream's quota (a client-side limit, or a hold the server asked for) would
// not free up before the caller's deadline or the longest wait allowed. It is
// the Err of a retryable [*Error] whose RetryAt says when to try again.
var ErrRateLimited = errors.New("retryhttp: rate limited")

// Limits are client-side rate limits, per minute, enforced on each upstream
// before requests leave, so a burst reaches the provider at the rate it
// allows instead of as a wave of 429s. Zero means no limit of that kind.
type Limits struct {
	RequestsPerMinute     int // RPM
	TokensPerMinute       int // input and output together, as some providers count
	InputTokensPerMinute  int // ITPM
	OutputTokensPerMinute int // OTPM
}

// WithRateLimit enforces l on every upstream (see [WithKeyFunc]). Limits are
// smooth: at most one second's worth of a limit goes at once (never less
// than one request), unless [WithRateLimitBurst] allows more. Token counts come
// from [WithTokens], [WithTokenEstimator] or [DefaultTokenEstimator]; rate-limit
// headers that report fewer tokens remaining than the local count correct it.
//
// Tokens are counted as the providers count them: an attempt books its
// estimate when it is admitted (the output from max_tokens, as Anthropic
// reserves it), and the usage its 2xx response reports settles the booking
// as the body is read: tokens booked but not used go back to the budget at
// once, tokens used beyond the booking are charged. The usage is read from
// a JSON body's "usage" (Anthropic, OpenAI) or "usageMetadata" (Gemini),
// and from a stream's events (Anthropic's message_start and message_delta,
// OpenAI's final usage chunk, which it sends when the request sets
// stream_options.include_usage), as they pass, without buffering. Tokens
// given back go to the requests already queued too: each waiting request
// comes sooner by what they are worth, and leaves at once when they cover
// it. A body that is not read, or reports no usage, keeps its booking. A
// booking on a [QuotaBackend] is settled only when the backend implements
// [QuotaSettler].
func WithRateLimit(l Limits) Option {
	return Option{func(c *config) { c.limits = l }}
}

// WithRateLimitBurst sets how much of each [WithRateLimit] limit may go at once,
// as a duration's worth of it. The default is one second.
func WithRateLimitBurst(d time.Duration) Option {
	return Option{func(c *config) { c.limitBurst = d }}
}

// WithMaxQueueWait bounds how long a request may wait to be admitted (behind
// a hold, pacing, client-side limits, an open circuit breaker, or in the
// queue of the adaptive concurrency limit, see [AdaptiveConcurrency]). A request
// that surely cannot be admitted in time fails at once, without waiting
// first: with [ErrRateLimited], or [ErrCircuitOpen] for the breaker. A turn that
// is only projected by a pace still being learned is waited for up to the
// limit instead, since the pace may yet bring it forward. The default is the
// [WithMaxRetryAfter] limit (60s); the request context's deadline always
// applies too. Per request: [MaxQueueWait].
func WithMaxQueueWait(d time.Duration) Option {
	return MaxQueueWait(d).forTransport()
}

// MaxQueueWait overrides, for one request, how long it may wait to be
// admitted; [WithMaxQueueWait] sets it for every request. 0 (or less)
// means the request's [MaxRetryAfter] limit.
func MaxQueueWait(d time.Duration) RequestOption {
	return RequestOption{func(p *policy) { p.maxQueueWait = maxDuration(d, 0) }}
}

// PerMinute returns the limit on one dimension; 0: none.
func (l Limits) PerMinute(d Dimension) int {
	switch d {
	case Requests:
		return l.RequestsPerMinute
	case Tokens:
		return l.TokensPerMinute
	case InputTokens:
		return l.InputTokensPerMinute
	case OutputTokens:
		return l.OutputTokensPerMinute
	}
	return 0
}

func (l Limits) any() bool {
	for _, d := range dimensions {
		if l.PerMinute(d) > 0 {
			return true
		}
	}
	return false
}

// clientLimits holds one upstream's token buckets, one per dimension that
// has a limit (nil for the others).
type clientLimits struct {
	mu      sync.Mutex
	buckets [len(dimensions)]*bucket
	// refunded is closed, and cleared, when a settlement gives tokens
	// back: requests waiting for their booking wake and look again. Made
	// by the first waiter that asks for it.
	refunded chan struct{}
}

// newClientLimits makes the buckets for share of l (1: all of it; less
// for a process's share of limits kept by a QuotaBackend).
func newClientLimits(l Limits, burst time.Duration, share float64) *clientLimits {
	if !l.any() {
		return nil
	}
	cl := &clientLimits{}
	for _, d := range dimensions {
		cl.buckets[d] = perMinute(l.PerMinute(d), burst, share)
	}
	return cl
}

// perMinute is a bucket refilled at share of n per minute holding burst's
// worth of that, and never less than 1.
func perMinute(n int, burst time.Duration, share float64) *bucket {
	if n <= 0 {
		return nil
	}
	perSecond, b := limitRate(n, burst, share)
	return &bucket{rate: perSecond, size: float64(b), tokens: float64(b)}
}

// limitRate is the refill rate (per second) and the bucket size of share of
// a per-minute limit n, burst's worth of it (one second when burst is not
// positive) and never less than 1.
func limitRate(n int, burst time.Duration, share float64) (perSecond float64, size int) {
	if burst <= 0 {
		burst = time.Second
	}
	perSecond = float64(n) / 60 * share
	return perSecond, max(int(perSecond*burst.Seconds()), 1)
}

// bucket is a token bucket that lends, as rate.Limiter's reservations do: a
// booking takes its tokens at once, into debt if need be, and may start
// when the refill has paid the debt before it back. The bookings waiting
// form a queue by their place in the debt; tokens given back (a
// settlement's refund) pay part of the debt at once, so every place in the
// queue comes sooner by what they are worth. The bucket counts what was
// booked and given back in all, for the bookings to work out their place.
// Guarded by its clientLimits' mu.
type bucket struct {
	rate     float64   // tokens per second
	size     float64   // the most it holds
	tokens   float64   // at last; negative: owed
	last     time.Time // when tokens was last brought up to date
	booked   float64   // tokens booked in all, less those given back by cancels
	refunded float64   // tokens given back by settlements in all
}

// advance refills the bucket up to now.
func (b *bucket) advance(now time.Time) {
	if now.After(b.last) {
		b.tokens = min(b.size, b.tokens+now.Sub(b.last).Seconds()*b.rate)
		b.last = now
	}
}

// take books n tokens at now and returns when they are paid for.
func (b *bucket) take(now time.Time, n float64) time.Time {
	b.advance(now)
	b.tokens -= n
	b.booked += n
	return now.Add(b.duration(-b.tokens))
}

// duration is how long the refill takes to bring n tokens; 0 for n <= 0.
func (b *bucket) duration(n float64) time.Duration {
	if n <= 0 {
		return 0
	}
	return time.Duration(min(n/b.rate*float64(time.Second), float64(maxWaitDuration)))
}

// maxWaitDuration caps the waits a bucket computes (a count that could not
// be paid for in a lifetime must not overflow).
const maxWaitDuration = 100 * 365 * 24 * time.Hour

// tokensAt is what the bucket holds at now (negative: owed).
func (b *bucket) tokensAt(now time.Time) float64 {
	if now.After(b.last) {
		return min(b.size, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	return b.tokens
}

// reservation is an attempt's booking on the client-side limits: on each
// bucket, how many tokens, when they are paid for, and where the bucket's
// totals stood just after it (nil: nothing booked).
type reservation = *booking

type booking struct {
	cl    *clientLimits
	parts [len(dimensions)]bookingPart
}

type bookingPart struct {
	n        float64   // tokens booked; 0: none on this dimension
	at       time.Time // when they were paid for, as booked
	booked   float64   // the bucket's booked total just after
	refunded float64   // the bucket's refunded total when booked
}

// reserve books an attempt of in input and out output tokens at now and
// returns when it may start. cancel gives the booking back.
func (cl *clientLimits) reserve(now time.Time, in, out int) (time.Time, reservation) {
	r := &booking{cl: cl}
	start := now
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, d := range dimensions {
		b, n := cl.buckets[d], d.units(in, out)
		if b == nil || n <= 0 {
			continue
		}
		at := b.take(now, float64(n))
		r.parts[d] = bookingPart{n: float64(n), at: at, booked: b.booked, refunded: b.refunded}
		start = later(start, at)
	}
	return start, r
}

// startAt is when the booking may start now: when it was booked, brought
// forward by the tokens settlements gave back since (see bucket).
func (r reservation) startAt() time.Time {
	var start time.Time
	if r == nil {
		return start
	}
	r.cl.mu.Lock()
	defer r.cl.mu.Unlock()
	for d, p := range r.parts {
		if p.n == 0 {
			continue
		}
		start = later(start, p.startOn(r.cl.buckets[d]))
	}
	return start
}

// startOn is when the part may start on its bucket b: when it was booked,
// brought forward by what settlements gave back to b since.
func (p bookingPart) startOn(b *bucket) time.Time {
	return p.at.Add(-b.duration(b.refunded - p.refunded))
}

// refunds returns a channel closed when a settlement gives tokens back to
// the buckets of r: a waiting request's start may have come sooner. Nil
// when r books no tokens that could come back.
func (r reservation) refunds() <-chan struct{} {
	if r == nil {
		return nil
	}
	r.cl.mu.Lock()
	defer r.cl.mu.Unlock()
	for d, p := range r.parts {
		if p.n > 0 && d != int(Requests) {
			if r.cl.refunded == nil {
				r.cl.refunded = make(chan struct{})
			}
			return r.cl.refunded
		}
	}
	return nil
}

// cancel gives back a booking that will not be used, as
// rate.Reservation.CancelAt does: nothing once its time has passed (a
// booking refused at once, due now on one limit, gives that back too), and
// never the tokens booked after it (the bookings behind keep their place).
func (r reservation) cancel(now time.Time) {
	if r == nil {
		return
	}
	r.cl.mu.Lock()
	defer r.cl.mu.Unlock()
	for d, p := range r.parts {
		if p.n == 0 {
			continue
		}
		b := r.cl.buckets[d]
		if p.startOn(b).Before(now) {
			continue // its time has come: the tokens are spent
		}
		back := p.n - max(b.booked-p.booked, 0)
		if back <= 0 {
			continue
		}
		b.advance(now)
		b.tokens = min(b.size, b.tokens+back)
		b.booked -= back
	}
}

// correct lowers the local buckets to what the server says remains: the
// server sees every client of the account, we only see ours.
func (cl *clientLimits) correct(now time.Time, l RateLimits) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, d := range dimensions {
		b, q := cl.buckets[d], *l.Quota(d)
		if b == nil || !q.HasRemaining {
			continue
		}
		if excess := b.tokensAt(now) - float64(q.Remaining); excess >= 1 {
			b.take(now, min(float64(int(excess)), b.size))
		}
	}
}

// countsTokens reports a limit on tokens: only then is a request's body
// read for an estimate.
func (cl *clientLimits) countsTokens() bool {
	for _, d := range dimensions {
		if d != Requests && cl.buckets[d] != nil {
			return true
		}
	}
	return false
}
