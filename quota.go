package retryhttp

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Shared quotas.
//
// Provider limits belong to an account, not to a process: ten replicas that
// each pace themselves at the account's limit send ten times too much. A
// QuotaBackend (for example the redisquota module's Redis backend) keeps, per
// upstream key, what the processes of a fleet must agree on:
//
//   - the client-side limits of WithRateLimit, as one shared bucket per
//     limit: every attempt books its request and tokens there, first come
//     first served, and waits for the start the backend gives it;
//   - holds learned from the server (a 429's Retry-After, a quota the
//     headers say is used up), so that one process's 429 pauses the fleet.
//
// Everything else (pacing learned from headers, the breaker, the retry
// budget, concurrency) stays per process.
//
// The backend is asked on every attempt with a short timeout
// (WithQuotaTimeout, DefaultQuotaTimeout by default), and a request never
// waits on it beyond that. When it errs or does not answer in time, the
// request is booked on local buckets holding the process's share of each
// limit (the localShare of WithQuotaBackend), never the whole limit, so a
// fleet that has lost its backend still stays under the account's limit.
// After quotaTripAfter failures in a row the backend is taken for down: the
// outage is logged once, at Warn, and until the backend answers again
// (logged once, at Info) only one request a second asks it
// (quotaRetryInterval), so a dead backend does not add its timeout to every
// request. A single slow answer does not start an outage: a process that
// fell back alone would add its share to what the others still book on the
// backend. No request fails because of the backend.
//
// A request that gives up while it waits for its start keeps its slot on the
// backend (a local booking is given back): it may have been booked among
// others' since. A request that could not start in time books nothing.

// DefaultQuotaTimeout is how long a request waits at most for the
// [QuotaBackend]'s answer before it falls back to local limits.
const DefaultQuotaTimeout = 50 * time.Millisecond

// quotaRetryInterval is how often a backend that is down is asked again.
const quotaRetryInterval = time.Second

// quotaTripAfter is how many calls in a row must fail for the backend to be
// taken for down.
const quotaTripAfter = 3

// The names of [QuotaTake], one per [Limits] field.
const (
	QuotaRequests     = "rpm"  // Limits.RequestsPerMinute, one unit per attempt
	QuotaTokens       = "tpm"  // Limits.TokensPerMinute, input and output tokens
	QuotaInputTokens  = "itpm" // Limits.InputTokensPerMinute
	QuotaOutputTokens = "otpm" // Limits.OutputTokensPerMinute
)

// quotaNames are the QuotaTake names, by Dimension.
var quotaNames = [len(dimensions)]string{
	Requests: QuotaRequests, Tokens: QuotaTokens, InputTokens: QuotaInputTokens, OutputTokens: QuotaOutputTokens,
}

// QuotaBackend keeps the quota state that processes share: client-side
// limits and holds learned from the server, per upstream key (see
// [WithKeyFunc]). Implementations must be safe for concurrent use and should
// honour ctx; the transport stops waiting for an answer at its timeout
// either way.
//
// Processes' clocks disagree, so what crosses the interface are durations:
// Take answers how long to wait, which the transport counts from the moment
// the answer came back, on its own clock. now is the caller's time (its
// [WithClock]) when it called, for a backend that keeps time on the callers'
// clock, as an in-memory one would; a backend with a clock of its own (a
// Redis server's) keeps time on that one.
type QuotaBackend interface {
	// Take books an attempt on key: N units of each limit in takes, first
	// come first served, like rate.Limiter.Reserve. It returns how long
	// the attempt must wait: until the latest of its bookings and of any
	// hold in force for the key (the bookings themselves start no earlier
	// than the hold). takes may be empty (no client-side limits): Take then
	// only reports the hold, or 0. All of a request's limits are booked in
	// one round trip, atomically.
	//
	// An attempt that would wait longer than maxWait (its deadline, or the
	// longest queue wait allowed) books nothing: Take returns the wait it
	// would have had, and the request fails with [ErrRateLimited] without
	// holding a slot nobody will use.
	Take(ctx context.Context, key string, takes []QuotaTake, now time.Time, maxWait time.Duration) (time.Duration, error)
	// Hold records that key is held until until (a 429's Retry-After, a
	// quota the headers say is used up), on the caller's clock whose time
	// is now; a later hold wins over an earlier one.
	Hold(ctx context.Context, key string, until, now time.Time) error
}

// QuotaSettler is implemented by a [QuotaBackend] that can settle a booking
// by the usage its response reported, as the local limits do (see
// [WithRateLimit]): tokens booked but not used go back, tokens used beyond
// the booking are charged. The transport checks for it with a type
// assertion; the bookings of a backend without it keep their estimate.
//
// Settle is called in the background, bounded by the [WithQuotaTimeout]
// timeout, once the usage is read (a stream may report its input and its
// output separately: one call each). Its errors are dropped, and it is not
// called while the backend is taken for down: a lost settlement only leaves
// the estimate booked. Requests already waiting on a backend booking, in
// any process, keep the start Take gave them; later bookings see the
// settlement.
type QuotaSettler interface {
	// Settle changes what was booked on key by N units of each limit in
	// deltas (Name, PerSecond and Burst as in Take): a negative N gives
	// -N units back at once, never beyond a full bucket; a positive N
	// charges them, as a booking that waits for nothing would. now is
	// the caller's time, as in Take.
	Settle(ctx context.Context, key string, deltas []QuotaTake, now time.Time) error
}

// QuotaTake is one limit's part of a booking: a bucket refilled at
// PerSecond that holds at most Burst, from which the attempt takes N units.
// Name is [QuotaRequests], [QuotaTokens], [QuotaInputTokens] or [QuotaOutputTokens];
// a backend keeps one bucket per key and name.
type QuotaTake struct {
	Name      string
	PerSecond float64
	Burst     float64
	N         float64
}

// WithQuotaBackend shares the [WithRateLimit] limits, and the holds learned
// from servers, with every process that uses the same backend (see
// [QuotaBackend] and the redisquota module). localShare is the part of each
// limit this process may use on its own while the backend cannot be
// reached: 0.25 for one of four replicas. It must be in (0, 1]:
// WithQuotaBackend panics otherwise, since a share of 0 would stop every
// request during an outage and one above 1 would let a fleet in fallback
// overrun the account, mistakes better found at startup than during an
// outage.
//
// With a backend, every attempt asks it (one round trip, bounded by
// [WithQuotaTimeout]), even on an upstream without client-side limits, so
// that it learns the fleet's holds. A nil backend keeps every quota in
// memory, as without this option. It shapes the transport as a whole and
// has no per-request counterpart (see [RequestOption]).
func WithQuotaBackend(b QuotaBackend, localShare float64) Option {
	if b != nil && !(localShare > 0 && localShare <= 1) {
		panic("retryhttp: WithQuotaBackend: localShare must be in (0, 1], got " + strconv.FormatFloat(localShare, 'g', -1, 64))
	}
	return Option{func(c *config) {
		c.quota = nil
		if b != nil {
			c.quota = &sharedQuota{backend: b, share: localShare}
		}
	}}
}

// WithQuotaTimeout bounds each call to the [WithQuotaBackend] backend: past
// it, the request goes on under local limits. The default is
// [DefaultQuotaTimeout]; 0 or less restores it.
func WithQuotaTimeout(d time.Duration) Option {
	return Option{func(c *config) { c.quotaTimeout = maxDuration(d, 0) }}
}

// sharedQuota is a transport's link to its QuotaBackend, and whether the
// backend is answering.
type sharedQuota struct {
	backend QuotaBackend
	share   float64

	down     atomic.Bool  // read on every request; written under mu
	failures atomic.Int32 // calls failed in a row while up
	mu       sync.Mutex
	since    time.Time // when the outage began
	retryAt  time.Time // while down: when one request may ask the backend again
}

// localShare is the share of each limit the local buckets hold: all of it
// without a backend.
func (q *sharedQuota) localShare() float64 {
	if q == nil {
		return 1
	}
	return q.share
}

// ask reports whether a request should ask the backend now: always while it
// answers; while it is down, one request every quotaRetryInterval, the
// probe, whose answer alone ends the outage.
func (q *sharedQuota) ask(now time.Time) (ok, probe bool) {
	if !q.down.Load() {
		return true, false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.down.Load() {
		return true, false
	}
	if now.Before(q.retryAt) {
		return false, false
	}
	q.retryAt = now.Add(quotaRetryInterval)
	return true, true
}

// settle records how a call to the backend went, logging when an outage
// starts or ends. A call that was already out when the outage began does
// not end it: only a probe does.
func (q *sharedQuota) settle(c *call, probe bool, err error) {
	if err == nil && !q.down.Load() {
		if q.failures.Load() != 0 {
			q.failures.Store(0)
		}
		return
	}
	now := c.t.cfg.clock.Now()
	q.mu.Lock()
	down := q.down.Load()
	switch {
	case err != nil && !down:
		if q.failures.Add(1) >= quotaTripAfter {
			q.down.Store(true)
			q.since, q.retryAt = now, now.Add(quotaRetryInterval)
		}
	case err != nil && probe:
		q.retryAt = now.Add(quotaRetryInterval)
	case err == nil && down && probe:
		q.down.Store(false)
		q.failures.Store(0)
	}
	since, changed := q.since, q.down.Load() != down
	q.mu.Unlock()
	if !changed {
		return
	}
	if l := c.t.cfg.logger; l != nil {
		if err != nil {
			l.LogAttrs(c.ctx, slog.LevelWarn, "retryhttp: quota backend unavailable, using local limits",
				slog.String("error", c.creds().text(err.Error())), slog.Float64("local_share", q.share))
		} else {
			l.LogAttrs(c.ctx, slog.LevelInfo, "retryhttp: quota backend available again",
				slog.Duration("outage", now.Sub(since)))
		}
	}
}

// call runs f with the transport's quota timeout, returning when f does or
// when the time is up, whichever comes first: a backend that does not honour
// its context (a client whose reads wait for their own timeout) must not hold
// the request.
func (q *sharedQuota) call(ctx context.Context, timeout time.Duration, f func(context.Context) (time.Duration, error)) (time.Duration, error) {
	if timeout <= 0 {
		timeout = DefaultQuotaTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		wait time.Duration
		err  error
	}
	done := make(chan result, 1)
	go func() {
		wait, err := f(ctx)
		done <- result{wait, err}
	}()
	select {
	case r := <-done:
		return r.wait, r.err
	case <-ctx.Done():
		if ctx.Err() == context.DeadlineExceeded {
			return 0, fmt.Errorf("no answer within %v", timeout)
		}
		return 0, ctx.Err()
	}
}

// takeShared books the attempt on the backend and returns when it may start;
// when the backend cannot answer, it books the local share of the limits
// instead (local is then set). turn is when the upstream's own schedule
// lets the attempt go: an attempt that must fail anyway books nothing.
func (c *call) takeShared(q *sharedQuota, u *upstream, now, turn time.Time) (at time.Time, r reservation, local bool) {
	var in, out int
	if u.limits != nil && u.limits.countsTokens() {
		in, out = c.tokens() // only then: estimating reads the body
	}
	if !c.canWaitUntil(now, turn) {
		return time.Time{}, nil, false
	}
	if ok, probe := q.ask(now); ok {
		takes := c.t.cfg.quotaTakes(in, out)
		key, asked, latest := c.key.String(), now, c.latestStart(now)
		maxWait := maxDuration(latest.Sub(now), 0)
		wait, err := q.call(c.ctx, c.t.cfg.quotaTimeout, func(ctx context.Context) (time.Duration, error) {
			return q.backend.Take(ctx, key, takes, asked, maxWait) // may outlive the timeout: no shared variables
		})
		if err == nil || c.ctx.Err() == nil { // a request that ended says nothing of the backend
			q.settle(c, probe, err)
		}
		now = c.t.cfg.clock.Now()
		if err == nil {
			// The wait counts from the backend's answer, which came
			// back by now: the attempt leaves no earlier than its slot.
			at := now.Add(wait)
			if wait <= maxWait && at.After(latest) {
				at = latest // booked in time by the backend's count
			}
			if len(takes) == 0 && wait > 0 && c.policy.jitter > 0 {
				// A hold with no limits to space the requests it held:
				// spread them, as a local hold does (within the
				// request's time).
				if spread := at.Add(time.Duration(rand.Int64N(int64(c.policy.jitter)))); !spread.After(latest) {
					at = spread
				}
			}
			return at, nil, false
		}
	}
	if u.limits == nil {
		return time.Time{}, nil, false
	}
	at, r = u.limits.reserve(now, in, out)
	return at, r, true
}

// holdShared tells the backend of a hold this process learned, so the
// fleet's other processes pause too. The request's own end does not cancel
// the call: the hold matters to everyone else.
func (c *call) holdShared(q *sharedQuota, until, now time.Time) {
	ok, probe := q.ask(now)
	if !ok {
		return
	}
	key := c.key.String()
	_, err := q.call(context.WithoutCancel(c.ctx), c.t.cfg.quotaTimeout, func(ctx context.Context) (time.Duration, error) {
		return 0, q.backend.Hold(ctx, key, until, now)
	})
	q.settle(c, probe, err)
}

// quotaDeltas is what settling a booking on the backend by dIn input and
// dOut output tokens changes: one QuotaTake per token limit, N negative
// for tokens given back; nil when nothing changes.
func (cfg *config) quotaDeltas(dIn, dOut int) []QuotaTake {
	var deltas []QuotaTake
	for _, d := range dimensions {
		perMinute, n := cfg.limits.PerMinute(d), d.units(dIn, dOut)
		if d == Requests || perMinute <= 0 || n == 0 {
			continue
		}
		perSecond, burst := limitRate(perMinute, cfg.limitBurst, 1)
		deltas = append(deltas, QuotaTake{Name: quotaNames[d], PerSecond: perSecond, Burst: float64(burst), N: float64(n)})
	}
	return deltas
}

// quotaTakes is what an attempt of in input and out output tokens books on
// the backend: one QuotaTake per limit it draws on, nil when none.
func (cfg *config) quotaTakes(in, out int) []QuotaTake {
	var takes []QuotaTake
	add := func(name string, perMinute, n int) {
		if perMinute <= 0 || n <= 0 {
			return
		}
		perSecond, burst := limitRate(perMinute, cfg.limitBurst, 1)
		takes = append(takes, QuotaTake{Name: name, PerSecond: perSecond, Burst: float64(burst), N: float64(n)})
	}
	for _, d := range dimensions {
		add(quotaNames[d], cfg.limits.PerMinute(d), d.units(in, out))
	}
	return takes
}
