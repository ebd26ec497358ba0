package retryhttp

import (
	"sort"
	"sync/atomic"
	"time"
)

// Stats is a snapshot of one upstream's state (see [WithKeyFunc] for what an
// upstream is): what it has been sent, what it answered, and what the
// transport currently holds back. Counters run from the upstream's first
// request; an upstream evicted from the transport's table (more than 1024
// in use) starts again from zero.
type Stats struct {
	// Key names the upstream: "scheme://host[:port]", or the fingerprint
	// of the [WithKeyFunc] value ("key:" and 16 hex digits; the value itself
	// is never shown); with [WithKeyByModel], followed by "#" and the model
	// ("https://api.anthropic.com#claude-sonnet-4-5").
	Key string
	// At is when the snapshot was taken, on the transport's [Clock]: the
	// time to read HeldUntil and the resets in Limits against.
	At time.Time

	Requests    uint64 // requests (first attempts) admitted or refused
	Attempts    uint64 // attempts sent, retries included
	Retries     uint64 // retries scheduled
	RateLimited uint64 // 429 answers, and 403s that are rate limits (GitHub's)
	Failures    uint64 // upstream failures: 5xx, 529, attempt timeouts, connection errors

	// Breaker is the circuit breaker's state ([BreakerClosed] when disabled).
	Breaker BreakerState
	// Limit is the adaptive concurrency limit learned for the upstream
	// (see [AdaptiveConcurrency]): how many attempts may be in flight at
	// once; 0 while none is learned (or it is disabled).
	Limit int
	// InFlight is how many attempts are in flight now: sent, and their
	// response body not yet closed or read to EOF. Counted only while the
	// adaptive limit is on.
	InFlight int
	// Queued is how many requests are waiting to be admitted: for their
	// paced turn, the client-side limits, a hold, the breaker, or a slot
	// in the adaptive concurrency limit.
	Queued int
	// BudgetLeft is how many retries after upstream failures the retry
	// budget allows now (+Inf when it is disabled).
	BudgetLeft float64
	// Rate is the request rate (per second) requests are paced at, learned
	// from the rate-limit headers or from what the upstream accepts; 0 when
	// not paced.
	Rate float64
	// HeldUntil is when a hold (a 429's Retry-After, an exhausted quota)
	// ends; zero when none is in force.
	HeldUntil time.Time
	// Pacing says where the pace comes from: "off" (not paced), "stated"
	// (the headers state the rate), "measured" (the headers bound it and
	// the drain of the remaining count measures it) or "observed" (429s
	// and successes give it: no usable headers).
	Pacing string
	// Limits is the rate-limit state the last response that stated one
	// gave (see [ParseRateLimits]), read against the upstream's clock;
	// LimitsAt is when that response came (zero, with Limits, before any
	// did). Remaining counts are as of LimitsAt: once a quota's Reset has
	// passed, the quota is whole again.
	Limits   RateLimits
	LimitsAt time.Time
}

// counters are an upstream's running totals for Stats, updated without locks.
type counters struct {
	requests, attempts, retries, throttled, failures atomic.Uint64
	queued                                           atomic.Int64
	// quick counts the requests admitted at once whose first attempt was
	// sent (see admit): each is a request and an attempt, counted here
	// alone, so that the happy path makes one atomic add for both.
	quick atomic.Uint64
}

// admitted is the count of requests (first attempts admitted or refused).
func (s *counters) admitted() uint64 { return s.requests.Load() + s.quick.Load() }

// sent is the count of attempts sent.
func (s *counters) sent() uint64 { return s.attempts.Load() + s.quick.Load() }

// Stats returns a snapshot of every upstream the transport has state for,
// sorted by Key. It is safe to call at any time, from any goroutine: poll it
// for a dashboard or a metrics exporter.
func (t *RetryTransport) Stats() []Stats {
	t.ready()
	now := t.cfg.clock.Now()
	us := t.upstreams.all()
	out := make([]Stats, 0, len(us))
	for _, u := range us {
		out = append(out, u.snapshot(now))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func (u *upstream) snapshot(now time.Time) Stats {
	s := Stats{
		Key:         u.key.String(),
		At:          now,
		Requests:    u.stats.admitted(),
		Attempts:    u.stats.sent(),
		Retries:     u.stats.retries.Load(),
		RateLimited: u.stats.throttled.Load(),
		Failures:    u.stats.failures.Load(),
		Queued:      int(max(u.stats.queued.Load(), 0)),
		Breaker:     u.breaker.state(now),
		BudgetLeft:  u.budget.left(now),
	}
	s.Limit, s.InFlight = u.limit.snapshot()
	u.mu.Lock()
	if u.interval > 0 {
		s.Rate = float64(time.Second) / float64(u.interval)
	}
	if u.hold.held(now) {
		s.HeldUntil = u.hold.end
	}
	s.Pacing = u.pacer.String()
	s.Limits, s.LimitsAt = u.stated, u.statedAt
	u.mu.Unlock()
	return s
}
