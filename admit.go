package retryhttp

import (
	"errors"
	"log/slog"
	"time"
)

// The admit stage: before each attempt, wait until the upstream may take it
// (past a hold, at the paced slot, within client-side limits), then take a
// concurrency slot. A request that could not be admitted in time fails at
// once with ErrRateLimited instead of waiting to fail. Waiting here does not
// use up retries: WithMaxRetries counts attempts sent.

// admission is an admitted attempt: what observe reports to, and what to
// release when the attempt is done.
type admission struct {
	pass    pass
	probe   uint64      // the breaker's probe id; 0 when not a probe
	limit   limitTicket // its slot in the upstream's adaptive limit
	hasSlot bool        // it holds a WithMaxConcurrency slot
	// quick: a first attempt admitted at once, not yet counted as a
	// request; send counts it as a request and an attempt at once.
	quick bool
}

// admit admits the next attempt into *a (the zero admission when it fails).
func (c *call) admit(a *admission) error {
	t := c.t
	u := t.upstreams.get(&c.key, t.newUpstream)
	c.u = u
	if a.pass.u == nil && c.attempts == 0 && u.free.Load() && t.cfg.quota == nil && t.slots == nil &&
		u.breaker.lets() && u.limit.takeFast(&a.limit) {
		// Most requests: the first attempt, to an upstream with nothing
		// to wait for (free, the breaker closed, no limit learned, no
		// cap on concurrency); what follows, in a few lines.
		a.pass.u, a.quick = u, true // counted as sent (counters.quick)
		if a.limit.sample {
			a.limit.sentAt = time.Now() // real time: see awaitLimit
		}
		return nil
	}
	return c.admitSlow(a, u)
}

// admitSlow is admit for any attempt that may have to wait.
func (c *call) admitSlow(a *admission, u *upstream) error {
	t := c.t
	if c.attempts > 0 {
		c.admitted = admitWait{} // zero before the first attempt
	}
	if a.pass.u != nil {
		*a = admission{} // an earlier attempt's; the first finds it zero
	}
	a.pass.u = u
	if c.attempts == 0 {
		u.stats.requests.Add(1) // the retry budget's deposit too (budget.countWith)
	}
	if !u.free.Load() || t.cfg.quota != nil { // a shared quota is asked on every attempt
		var err error
		if a.pass, err = c.schedule(u); err != nil {
			*a = admission{}
			return err
		}
	}
	if !u.breaker.lets() {
		var err error
		if a.probe, err = c.awaitBreaker(u); err != nil {
			a.pass.abandon(t.cfg.clock.Now())
			*a = admission{}
			return err
		}
	}
	if !u.limit.takeFast(&a.limit) { // most attempts: no limit learned, no wait
		limitStart := c.waitStart()
		var err error
		a.limit, err = c.awaitLimit(u)
		if !limitStart.IsZero() && c.t.cfg.clock.Now().After(limitStart) {
			c.waited(WaitConcurrency, limitStart) // only a wait that took time: most attempts pass at once
		}
		if err != nil {
			u.breaker.abandon(a.probe)
			a.pass.abandon(t.cfg.clock.Now())
			*a = admission{}
			return err
		}
	}
	if !t.slots.tryAcquire() {
		start := c.waitStart()
		err := t.slots.acquire(c.ctx)
		c.waited(WaitConcurrency, start)
		if err != nil {
			t.release(a)
			u.breaker.abandon(a.probe)
			a.pass.abandon(t.cfg.clock.Now())
			*a = admission{}
			return err
		}
	}
	a.hasSlot = t.slots != nil
	a.pass.leftAt(t.cfg.clock.Now())
	if a.limit.sample {
		a.limit.sentAt = time.Now() // real time: see awaitLimit
	}
	return nil
}

// awaitLimit takes a slot in the upstream's adaptive concurrency limit (see
// AdaptiveConcurrency): at once while the limit allows, else after the
// attempts queued before it, for as long as the request may wait (its
// deadline, WithMaxQueueWait). A request that cannot wait that long fails
// with ErrRateLimited, at once when the queue is known to drain too slowly.
//
// The limit runs on real time (time.Now), not the transport's Clock: what
// it measures and waits for, the attempts' latency and the slots they give
// back, happens in real time whatever a test's clock says.
func (c *call) awaitLimit(u *upstream) (limitTicket, error) {
	l := u.limit
	if t, ok := l.fast(); ok {
		return t, nil
	}
	t, w, wait := l.acquire()
	if w == nil {
		return t, nil
	}
	bound := c.queueBound()
	if wait > bound {
		if t, ok := l.claim(w); ok {
			return t, nil // granted meanwhile
		}
		return limitTicket{}, c.atCapacity(wait)
	}
	u.stats.queued.Add(1)
	err := c.awaitSlot(w.ready, bound)
	u.stats.queued.Add(-1)
	t, ok := l.claim(w)
	switch {
	case ok && err != nil:
		l.release(t.epoch)
		return limitTicket{}, err
	case ok:
		return t, nil
	case err != nil:
		return limitTicket{}, err
	}
	return limitTicket{}, c.atCapacity(l.estimate())
}

// queueBound is how long, in real time, the request may wait for a slot in
// the adaptive limit: WithMaxQueueWait (by default WithMaxRetryAfter), and
// no later than its deadline.
func (c *call) queueBound() time.Duration {
	bound := c.policy.maxQueueWait
	if bound == 0 {
		bound = c.policy.maxRetryAfter
	}
	if deadline, ok := c.ctx.Deadline(); ok {
		bound = min(bound, time.Until(deadline))
	}
	return max(bound, 0)
}

// awaitSlot waits until ready is closed, for at most d of real time, or
// until the request's context ends (its error). Slots free up when other
// attempts end, in real time, whatever the transport's Clock: a fake one
// whose timers fire at once would end every wait for a slot before any
// could free up.
func (c *call) awaitSlot(ready <-chan struct{}, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ready:
	case <-timer.C:
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
	return nil
}

// atCapacity is the error of a request that could not wait for a slot in
// the upstream's concurrency limit: ErrRateLimited, retryable once a slot is
// likely to be free, in about wait (0: not known).
func (c *call) atCapacity(wait time.Duration) *Error {
	why := "the upstream is at capacity and the requests queued for it do not leave room before the request must go"
	var retryAt time.Time
	if wait > 0 {
		retryAt = c.t.cfg.clock.Now().Add(wait)
		why = "the upstream is at capacity and a slot frees up in about " + wait.Round(time.Millisecond).String() + ", later than the request can wait"
	}
	e := c.transportError(ErrRateLimited, why)
	e.Retryable, e.RetryAt = true, retryAt
	return e
}

// schedule waits for the attempt's turn on an upstream that is held, paced,
// limited or still probing.
//
// The longest it may wait (its deadline, WithMaxQueueWait) is counted from
// here, whatever happens on the way: a wait behind a probe, a new probe.
func (c *call) schedule(u *upstream) (_ pass, err error) {
	latest := c.latestStart(c.t.cfg.clock.Now())
	for {
		p, err := c.scheduleOnce(u, latest)
		if err != errScheduleAgain {
			return p, err
		}
	}
}

// errScheduleAgain is awaitTurn's word that the upstream went cold for a new
// probe while the request waited: it takes its place again.
var errScheduleAgain = errors.New("retryhttp: schedule again")

func (c *call) scheduleOnce(u *upstream, latest time.Time) (_ pass, err error) {
	now := c.t.cfg.clock.Now()
	t, w, p := u.schedule(now, c.policy.jitter)
	if p.probe {
		defer func() {
			if err != nil {
				p.abandon(c.t.cfg.clock.Now())
			}
		}()
	}
	if w != nil {
		// Queued behind the probe: its answer gives the turn. The
		// client-side limits are booked after it, so that slots passing
		// while the probe is out do not send the queue as one burst.
		var err error
		if t, p, err = c.awaitProbe(u, w); err != nil {
			return pass{}, err
		}
		now = c.t.cfg.clock.Now()
		// The turn the probe's answer gives is the decision a hold
		// ended in, not more queueing: it is waited for, within the
		// deadline.
		if d, ok := c.ctx.Deadline(); !ok || !t.at.After(d) {
			latest = later(latest, t.at)
		}
	}
	limitAt, booked, local := c.bookLimits(u, now, t.at) // when the client-side limits let this attempt go
	if start := later(t.firmAt(), limitAt); start.After(now) && start.After(latest) {
		booked.cancel(now)
		u.unbook(now, t)
		return pass{}, c.rateLimited(now, start)
	}
	if err := c.awaitTurn(u, &t, limitAt, booked, latest, w != nil); err != nil {
		now = c.t.cfg.clock.Now()
		booked.cancel(now)
		u.unbook(now, t) // the turn as the wait left it: a recheck may have booked it again
		return pass{}, err
	}
	p.at = c.t.cfg.clock.Now()
	u.dispatch(&p)
	p.settle = c.newSettlement(u, local)
	return p, nil
}

// bookLimits books the attempt on the client-side limits, shared or local,
// and returns when they let it go; zero without limits. local reports a
// booking on this process's buckets, which the response's usage settles.
func (c *call) bookLimits(u *upstream, now, turnAt time.Time) (at time.Time, r reservation, local bool) {
	if q := c.t.cfg.quota; q != nil {
		return c.takeShared(q, u, now, turnAt)
	}
	if u.limits == nil {
		return time.Time{}, nil, false
	}
	var in, out int
	if u.limits.countsTokens() {
		in, out = c.tokens() // only then: estimating reads the body
	}
	at, r = u.limits.reserve(now, in, out)
	return at, r, true
}

// awaitTurn waits until the turn comes and the client-side limits allow the
// attempt. The turn is looked at again whenever a wait ends: a 429 may have
// held the upstream meanwhile (every waiting request pauses, not only new
// ones), and a new reading may have changed the pace (a quicker pace wakes
// the waiters at once). behindProbe: the turn is the one the probe's
// answer gave (a slow-start ramp), for what OnAttempt reports it waited for.
// A refund on the local token limits (a response that used fewer tokens than
// it booked) brings booked's start forward and wakes the wait.
func (c *call) awaitTurn(u *upstream, t *turn, limitAt time.Time, booked reservation, latest time.Time, behindProbe bool) error {
	for {
		now := c.t.cfg.clock.Now()
		at, quicker, again := u.recheck(now, t, c.policy.jitter)
		if again {
			return errScheduleAgain
		}
		start := later(at, limitAt)
		if !start.After(now) {
			return nil
		}
		// A firm start past the limit fails at once; a projected one is
		// waited for up to the limit, in case the pace brings it forward.
		if firm := later(t.firmAt(), limitAt); firm.After(now) && firm.After(latest) {
			return c.rateLimited(now, firm)
		}
		wake := start
		if wake.After(latest) {
			if !now.Before(latest) {
				return c.rateLimited(now, start)
			}
			wake = latest
		}
		kind := WaitPace
		switch {
		case limitAt.After(at):
			kind = WaitLimit
		case t.probe || t.held.After(now):
			kind = WaitHold
		case behindProbe && !t.paced:
			kind = WaitProbe
		}
		if booked != nil && limitAt.After(at) {
			// The limits bind: only a refund brings the start forward.
			// Its channel is taken before the start is read again, so
			// that no refund goes unseen.
			quicker = booked.refunds()
			if s := booked.startAt(); s.Before(limitAt) {
				limitAt = s
				continue
			}
		}
		since := c.waitStart()
		u.stats.queued.Add(1)
		err := c.sleep(wake.Sub(now), quicker)
		u.stats.queued.Add(-1)
		c.waited(kind, since)
		if err != nil {
			return err
		}
		if booked != nil {
			limitAt = booked.startAt() // a refund may have brought it forward
		}
	}
}

// admitWait is what an attempt waited for before it was admitted, as
// OnAttempt reports it (and OnGiveUp, for a refusal). It is measured only
// when one of those hooks is set (see waitStart).
type admitWait struct {
	total   time.Duration // every wait, added up
	longest time.Duration // the longest one, which kind names
	kind    WaitKind
}

// waitStart returns the start of a wait to be admitted: the clock's time
// when a hook will read the wait, else the zero time, and waited ignores it.
func (c *call) waitStart() time.Time {
	if cfg := &c.t.cfg; cfg.hooks.OnAttempt != nil || cfg.hooks.OnGiveUp != nil {
		return cfg.clock.Now()
	}
	return time.Time{}
}

// waited notes a wait to be admitted, for kind, that began at start. A
// wait that took no time on the clock (behind a probe, on a fake clock)
// still names its kind if nothing longer does.
func (c *call) waited(kind WaitKind, start time.Time) {
	if start.IsZero() {
		return
	}
	d := c.t.cfg.clock.Now().Sub(start)
	c.admitted.total += d
	if d >= c.admitted.longest {
		c.admitted.longest, c.admitted.kind = d, kind
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// rateLimited is the error of a request that could not be admitted before
// it had to go: ErrRateLimited, retryable at start.
func (c *call) rateLimited(now, start time.Time) *Error {
	wait := start.Sub(now)
	e := c.transportError(ErrRateLimited, "the upstream's quota frees up in "+wait.Round(time.Millisecond).String()+", later than the request can wait")
	e.Retryable, e.RetryAt = true, start
	return e
}

// canWaitUntil reports whether the request may wait until start to be
// admitted: within its deadline and the longest queue wait allowed
// (WithMaxQueueWait, by default WithMaxRetryAfter).
func (c *call) canWaitUntil(now, start time.Time) bool {
	return !start.After(now) || !start.After(c.latestStart(now))
}

// latestStart is the latest start canWaitUntil allows a request that must
// wait.
func (c *call) latestStart(now time.Time) time.Time {
	limit := c.policy.maxQueueWait
	if limit == 0 {
		limit = c.policy.maxRetryAfter
	}
	latest := now.Add(limit)
	if deadline, ok := c.ctx.Deadline(); ok && deadline.Before(latest) {
		latest = deadline
	}
	return latest
}

// awaitProbe waits for the upstream's probe to answer, or for the waiter's
// ramp time, whichever comes first, and returns when to start.
func (c *call) awaitProbe(u *upstream, w *waiter) (turn, pass, error) {
	start := c.waitStart()
	u.stats.queued.Add(1)
	err := c.sleep(w.at.Sub(c.t.cfg.clock.Now()), w.released)
	u.stats.queued.Add(-1)
	c.waited(WaitProbe, start)
	t := u.claim(w)
	if err != nil {
		u.unbook(c.t.cfg.clock.Now(), t) // the paced slot the probe's answer gave it, if any
		return turn{}, pass{}, err
	}
	if t.at.IsZero() {
		t.at = c.t.cfg.clock.Now()
	}
	return t, pass{u: u}, nil
}

// tokens returns the request's token estimate, computed once per call.
func (c *call) tokens() (int, int) {
	if !c.estimated {
		c.inTokens, c.outTokens = c.t.cfg.estimateTokens(c.req)
		c.estimated = true
	}
	return c.inTokens, c.outTokens
}

// observe reports what an attempt's outcome says about the upstream: to its
// breaker, and its rate-limit headers and any 429 to its pacing and holds.
// A free upstream and a response with neither cost nothing more.
func (c *call) observe(a *admission, o *outcome) {
	u := a.pass.u
	if u == nil {
		return
	}
	c.report(a, o)
	if !o.throttled && !o.stated && !a.pass.probe && u.free.Load() {
		if a.pass.sent > 0 { // nothing to learn, but it is out no longer
			a.pass.answeredFree(c.t.cfg.clock.Now())
		}
		return
	}
	var hold time.Duration
	if o.throttled {
		hold = o.retryAfter
		a.pass.fineWait = o.fineWait
	}
	now := c.t.cfg.clock.Now()
	held, mode, late, spreads := a.pass.observe(now, o.limits, hold, o.throttled, o.resp != nil)
	if o.quotaRefusal() {
		if w, ok := u.retryWait(now); ok && (o.serverWait == 0 || w < o.serverWait && o.retryAfter == 0) {
			// A fixed window's learned end: the retry takes its turn
			// there, not at its stated reset, nor after a backoff
			// when the stated time has passed already (a reset cut
			// down). A Retry-After is the server's wait for this
			// request, a floor: it stays.
			o.serverWait = max(w, time.Millisecond)
		}
		if o.saidNow && spreads {
			// "Now", on an upstream whose pace spaces retries: the
			// retry takes its next turn there. A backoff (a second or
			// more) would leave it behind the burst it belongs to.
			o.serverWait = max(o.serverWait, time.Millisecond)
		}
		// The pace spreads the retry, if it spaces attempts by itself
		// and lives until the retry goes (the observed mode ends
		// observedFor after the last 429).
		o.spreadByPace = spreads && o.serverWait < observedFor
	}
	if !held.IsZero() && c.t.cfg.quota != nil {
		c.holdShared(c.t.cfg.quota, held, now)
	}
	if mode == paceObserved {
		c.logObservedPace(u, o.stated)
	}
	if late {
		c.logLateResets(u)
	}
}

// logLateResets says once per upstream, at info, that its resets were seen
// to run late (see pacer.lateResets): its quota read full more than 2 s
// before the reset it had stated, so its resets no longer bound the
// pace. A server clock ahead of its Date (a proxy's), or no Date at all.
func (c *call) logLateResets(u *upstream) {
	if l := c.t.cfg.logger; l != nil {
		l.LogAttrs(c.ctx, slog.LevelInfo, "retryhttp: the upstream's resets run late; pacing by what its quota does",
			slog.String("key", u.key.String()), slog.String("reason", "its quota was full again more than 2 s before the reset it stated"))
	}
}

// logObservedPace says once per upstream, at info, that it is paced by the
// rate it is seen to accept: its headers say nothing usable, or what they
// say was contradicted by its 429s.
func (c *call) logObservedPace(u *upstream, headers bool) {
	l := c.t.cfg.logger
	if l == nil || !u.loggedObserved.CompareAndSwap(false, true) {
		return
	}
	why := "it sends no rate-limit headers"
	if headers {
		why = "its rate-limit headers were contradicted by its 429s"
	}
	l.LogAttrs(c.ctx, slog.LevelInfo, "retryhttp: pacing by the rate the upstream accepts",
		slog.String("key", u.key.String()), slog.String("reason", why))
}
