package retryhttp

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// The overload stage: protect an upstream that is failing, and serve its
// callers again the moment it recovers. Every upstream key has a circuit
// breaker (breaker.go) and a retry budget (budget.go).
//
//   - admit asks the breaker before each attempt. While it is open, a caller
//     that can wait (its deadline and WithMaxQueueWait allow it) waits for the
//     half-open probe's answer instead of failing or hammering; one that
//     cannot gets ErrCircuitOpen at once. When the probe succeeds, the
//     waiters go spread over CircuitBreaker.Spread, not as a herd.
//   - report tells the breaker what each attempt said about the upstream:
//     5xx (529 included), attempt timeouts and connection errors are its
//     failures; any other answer, a 429 included, shows it is up.
//   - plan draws on the budget before a retry that follows an upstream
//     failure; a request's first attempt deposits into it and is never held
//     back. A 429 the server paces spends nothing.

// ErrCircuitOpen reports that the upstream is failing and the caller could not
// wait for it to recover: its circuit breaker is open and the request's
// deadline (or [WithMaxQueueWait]) ends before the breaker next lets an attempt
// through. It comes wrapped in a retryable [*Error] whose RetryAt is that time.
var ErrCircuitOpen = errors.New("retryhttp: circuit open")

// awaitBreaker waits until the upstream's breaker lets an attempt go, and
// returns the probe id to report its outcome with (0 unless it is a probe).
// While it waits the breaker probes every ProbeInterval; when a probe
// succeeds, the callers that waited go in the order they came, spread over
// CircuitBreaker.Spread.
func (c *call) awaitBreaker(u *upstream) (uint64, error) {
	b := u.breaker
	var seat uint64 // its place among the waiters, once it waits
	defer func() {
		if seat != 0 {
			b.leave()
		}
	}()
	for {
		now := c.t.cfg.clock.Now()
		ok, probe, retryAt, changed := b.allow(now)
		if ok {
			if seat != 0 && probe == 0 {
				start := c.waitStart()
				err := c.sleep(b.releaseAt(now, b.place(seat)).Sub(now), nil)
				c.waited(WaitBreaker, start)
				if err != nil {
					return 0, err
				}
			}
			return probe, nil
		}
		if seat == 0 {
			if next := b.next(now); !next.IsZero() {
				if err := c.breakerAdmissible(now, next); err != nil {
					return 0, err
				}
				retryAt = next // it waits: the open period ends sooner
			}
			seat = b.enter()
		}
		start := c.waitStart()
		u.stats.queued.Add(1)
		err := c.sleep(retryAt.Sub(now), changed)
		u.stats.queued.Add(-1)
		c.waited(WaitBreaker, start)
		if err != nil {
			return 0, err
		}
	}
}

// breakerAdmissible fails the request at once, with ErrCircuitOpen, when it
// cannot wait until the open breaker next lets an attempt through.
func (c *call) breakerAdmissible(now, retryAt time.Time) error {
	if c.canWaitUntil(now, retryAt) {
		return nil
	}
	e := c.transportError(ErrCircuitOpen, "the upstream is failing and its circuit breaker stays open until after the request can wait")
	e.Retryable, e.RetryAt = true, retryAt
	return e
}

// report tells the breaker what the attempt said about the upstream.
func (c *call) report(a *admission, o *outcome) {
	u := a.pass.u
	if u == nil {
		return
	}
	if o.health == serving && !o.throttled {
		c.served(u, a)
		return
	}
	o.atCapacity = c.t.learnLimit(u, &a.limit, o.limitSignal())
	switch o.health {
	case serving: // throttled: refused for rate, but up
		u.stats.throttled.Add(1)
		if !u.breaker.countSuccess(a.probe) {
			u.breaker.success(c.t.cfg.clock.Now(), a.probe)
		}
	case failing:
		u.stats.failures.Add(1)
		if o.atCapacity {
			// The limiter's: the upstream is full, not failing.
			u.breaker.abandon(a.probe)
			break
		}
		u.breaker.failure(c.t.cfg.clock.Now(), a.probe, min(o.retryAfter, c.policy.maxRetryAfter))
	default:
		u.breaker.abandon(a.probe)
	}
}

// served reports an answer the upstream meant, not a refusal (most
// attempts): the adaptive limit takes it as accepted, which is never "at
// capacity", and learns nothing from it unless it was sampled or a limit is
// learned; the breaker counts it without its lock.
func (c *call) served(u *upstream, a *admission) { c.t.served(u, &a.limit, a.probe) }

// served is call.served for an attempt holding ticket tk in the upstream's
// adaptive limit, probe its breaker probe id (0: none): the quick path has
// no call.
func (t *RetryTransport) served(u *upstream, tk *limitTicket, probe uint64) {
	if tk.held && !u.limit.servedQuietly(tk) {
		t.learnLimit(u, tk, limitAccepted)
	}
	if !u.breaker.countSuccess(probe) {
		t.success(u, probe)
	}
}

// success tells the breaker of a success under its lock, dated now (a
// probe's, or one while it is not closed).
func (t *RetryTransport) success(u *upstream, probe uint64) {
	u.breaker.success(t.cfg.clock.Now(), probe)
}

// learnLimit tells the upstream's adaptive limit what the attempt's outcome
// says of its capacity (s), and reports whether a refusal was taken as "at
// capacity" (then the breaker is not told of it).
func (t *RetryTransport) learnLimit(u *upstream, tk *limitTicket, s limitSignal) bool {
	if !tk.held {
		return false
	}
	var now time.Time
	if s == limitAccepted && tk.sample {
		now = time.Now() // real time: see awaitLimit
	}
	atCapacity, change, changed := u.limit.observe(*tk, s, now)
	if changed {
		t.limitChanged(u, change)
	}
	return atCapacity
}

// limitSignal is what the outcome says of the upstream's capacity: an
// answer it meant is accepted (a 429 is the pacer's, not the limiter's); a
// 503, 529 or 504, or an attempt that timed out, is refused; anything else
// (another 5xx, a connection error) says nothing of it.
func (o *outcome) limitSignal() limitSignal {
	switch o.health {
	case serving:
		if o.throttled {
			return limitNeutral
		}
		return limitAccepted
	case failing:
		if o.resp != nil {
			switch o.resp.StatusCode {
			case http.StatusServiceUnavailable, StatusOverloaded, http.StatusGatewayTimeout:
				return limitRefused
			}
			return limitNeutral
		}
		var ne net.Error
		if errors.Is(o.err, errAttemptTimeout) || errors.As(o.err, &ne) && ne.Timeout() {
			return limitRefused
		}
	}
	return limitNeutral
}

// limitChanged reports a large change of an upstream's adaptive limit to
// OnLimit and, at Info, to the log.
func (t *RetryTransport) limitChanged(u *upstream, ch limitChange) {
	if t.cfg.hooks.OnLimit != nil {
		t.cfg.hooks.OnLimit(LimitEvent{Key: u.key.String(), From: ch.from, To: ch.to, Reason: ch.why})
	}
	if l := t.cfg.logger; l != nil {
		l.LogAttrs(context.Background(), slog.LevelInfo, "retryhttp: concurrency limit changed",
			slog.String("upstream", u.key.String()), slog.Int("from", ch.from), slog.Int("to", ch.to),
			slog.String("reason", ch.why))
	}
}

// spendRetry draws on the upstream's retry budget before a retry that follows
// an upstream failure; it reports false when the budget is spent.
func (c *call) spendRetry(now time.Time, o *outcome) bool {
	if o.health != failing || o.atCapacity || c.u == nil {
		return true // the adaptive limit's queue paces retries at capacity
	}
	return c.u.budget.withdraw(now)
}

// breakerChanged logs a breaker's change of state: at Warn when it opens,
// Info when it closes, Debug for half-open.
func (t *RetryTransport) breakerChanged(u *upstream, from, to BreakerState) {
	if t.cfg.hooks.OnBreaker != nil {
		t.cfg.hooks.OnBreaker(BreakerEvent{Key: u.key.String(), From: from, To: to})
	}
	if to == BreakerOpen {
		if ch, changed := u.limit.failing(); changed {
			t.limitChanged(u, ch)
		}
	}
	l := t.cfg.logger
	if l == nil {
		return
	}
	level := slog.LevelDebug
	switch to {
	case BreakerOpen:
		level = slog.LevelWarn
	case BreakerClosed:
		level = slog.LevelInfo
	}
	l.LogAttrs(context.Background(), level, "retryhttp: circuit breaker "+to.String(),
		slog.String("upstream", u.key.String()), slog.String("from", from.String()))
}
