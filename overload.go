package retryhttp

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
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
// deadline (or WithMaxQueueWait) ends before the breaker next lets an attempt
// through. It comes wrapped in a retryable *Error whose RetryAt is that time.
var ErrCircuitOpen = errors.New("retryhttp: circuit open")

// awaitBreaker waits until the upstream's breaker lets an attempt go, and
// returns the probe id to report its outcome with (0 unless it is a probe).
func (c *call) awaitBreaker(u *upstream) (uint64, error) {
	b := u.breaker
	waited := false
	for {
		now := c.t.cfg.clock.Now()
		ok, probe, retryAt, changed := b.allow(now)
		if ok {
			if waited && probe == 0 {
				start := c.waitStart()
				err := c.sleep(b.releaseAt(now, rand.Float64()).Sub(now), nil)
				c.waited(WaitBreaker, start)
				if err != nil {
					return 0, err
				}
			}
			return probe, nil
		}
		if b.state(now) == BreakerOpen {
			if err := c.breakerAdmissible(now, retryAt); err != nil {
				return 0, err
			}
		}
		waited = true
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
func (c *call) report(a admission, o outcome) {
	u := a.pass.u
	if u == nil {
		return
	}
	switch o.health {
	case serving:
		if o.throttled {
			u.stats.throttled.Add(1)
		}
		if !u.breaker.countSuccess(a.probe) {
			u.breaker.success(c.t.cfg.clock.Now(), a.probe)
		}
	case failing:
		u.stats.failures.Add(1)
		u.breaker.failure(c.t.cfg.clock.Now(), a.probe, min(o.retryAfter, c.policy.maxRetryAfter))
	default:
		u.breaker.abandon(a.probe)
	}
}

// spendRetry draws on the upstream's retry budget before a retry that follows
// an upstream failure; it reports false when the budget is spent.
func (c *call) spendRetry(now time.Time, o outcome) bool {
	if o.health != failing || c.u == nil {
		return true
	}
	return c.u.budget.withdraw(now)
}

// breakerChanged logs a breaker's change of state: at Warn when it opens,
// Info when it closes, Debug for half-open.
func (t *RetryTransport) breakerChanged(u *upstream, from, to BreakerState) {
	if t.cfg.hooks.OnBreaker != nil {
		t.cfg.hooks.OnBreaker(BreakerEvent{Key: u.key.String(), From: from, To: to})
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
