package retryhttp

import (
	"errors"
	"time"

	"golang.org/x/time/rate"
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
// stream_options.include_usage), as they pass, without buffering. A body
// that is not read, or reports no usage, keeps its booking; requests
// already waiting keep the start they were given. A booking on a
// [QuotaBackend] is not settled.
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
	buckets [len(dimensions)]*rate.Limiter
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
func perMinute(n int, burst time.Duration, share float64) *rate.Limiter {
	if n <= 0 {
		return nil
	}
	perSecond, b := limitRate(n, burst, share)
	return rate.NewLimiter(rate.Limit(perSecond), b)
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

// reservation is a set of reservations made for one attempt.
type reservation []*rate.Reservation

// reserve books an attempt of in input and out output tokens at now and
// returns when it may start. cancel gives the booking back.
func (cl *clientLimits) reserve(now time.Time, in, out int) (time.Time, reservation) {
	var r reservation
	start := now
	book := func(lim *rate.Limiter, n int) {
		if lim == nil || n <= 0 {
			return
		}
		// A bucket can lend no more than its burst at a time: book larger
		// counts in burst-sized pieces; each waits behind the one before.
		for n > 0 {
			piece := min(n, lim.Burst())
			res := lim.ReserveN(now, piece)
			r = append(r, res)
			if at := now.Add(res.DelayFrom(now)); at.After(start) {
				start = at
			}
			n -= piece
		}
	}
	for _, d := range dimensions {
		book(cl.buckets[d], d.units(in, out))
	}
	return start, r
}

func (r reservation) cancel(now time.Time) {
	for i := len(r) - 1; i >= 0; i-- {
		r[i].CancelAt(now)
	}
}

// correct lowers the local buckets to what the server says remains: the
// server sees every client of the account, we only see ours.
func (cl *clientLimits) correct(now time.Time, l RateLimits) {
	lower := func(lim *rate.Limiter, q Quota) {
		if lim == nil || !q.HasRemaining {
			return
		}
		if excess := lim.TokensAt(now) - float64(q.Remaining); excess >= 1 {
			lim.ReserveN(now, min(int(excess), lim.Burst()))
		}
	}
	for _, d := range dimensions {
		lower(cl.buckets[d], *l.Quota(d))
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
