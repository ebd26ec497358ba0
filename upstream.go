package retryhttp

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// upstream is the state of one upstream key: a short struct of components,
// each with its own type and file, taking the time as a parameter and tested
// alone. Its methods are the glue where a decision needs several of them:
// when an attempt may start (schedule, recheck) and what an outcome teaches
// (observe).
//
// Slots are assigned in arrival order, so waiting is first come, first served.
type upstream struct {
	// free is set while the upstream needs nothing of the admit stage:
	// open, not paced, not held, no client-side limits. Requests then pass
	// without the lock or the clock.
	free           atomic.Bool
	key            upstreamKey   // which upstream
	loggedObserved atomic.Bool   // the observed pace has been logged
	toldLate       bool          // lateResets has been reported (see observe); under mu
	touched        atomic.Uint64 // when last used (see upstreamTable)
	born           time.Time     // when first seen

	mu       sync.Mutex        // guards start, hold, pacer, clock and replies
	start    slowStart         // the probe, and the requests queued behind it (slowstart.go)
	hold     holds             // a 429's or a used-up quota's, within the bound (holds.go)
	pacer                      // spaces attempts at the rate the upstream allows (pacer.go)
	clock    serverClock       // the upstream's clock, from its Date headers (serverclock.go)
	rtts     rttFloor          // its shortest round trips of late, for holds (exhaustedUntilLocked)
	replies  uint64            // attempts answered (a response or an error), of pacer.sent
	busyAt   time.Time         // when an attempt was last sent or answered (see stalledAt)
	stated   RateLimits        // the last rate-limit state a response stated, for Stats
	statedAt time.Time         // when it came
	limits   *clientLimits     // the client-side limits (own locks); nil without WithRateLimit
	breaker  *breaker          // the circuit breaker (own lock); nil when disabled
	budget   *budget           // the retry budget (own lock); nil when disabled
	limit    *concurrencyLimit // the adaptive concurrency limit (own lock); nil when disabled
	stats    counters          // running totals for Stats, atomic
}

// newUpstream makes the state of an upstream seen for the first time.
func (t *RetryTransport) newUpstream() *upstream {
	u := &upstream{
		limits: newClientLimits(t.cfg.limits, t.cfg.limitBurst, t.cfg.quota.localShare()),
		budget: newBudget(t.cfg.retryBudget),
		limit:  newConcurrencyLimit(t.cfg.adaptive),
		born:   t.cfg.clock.Now(),
	}
	u.bound = t.cfg.policy.maxRetryAfter
	u.budget.countWith(&u.stats.requests, &u.stats.quick) // a request's count is its deposit
	u.breaker = newBreaker(t.cfg.breaker, func(from, to BreakerState) { t.breakerChanged(u, from, to) })
	now := t.cfg.clock.Now()
	u.breaker.start(now)
	u.budget.start(now)
	return u
}

// turn is when an admitted attempt may start: a paced slot on the pace
// clock, or a plain time (a hold, or no pacing).
type turn struct {
	at    time.Time
	v     float64 // the slot, when paced
	paced bool
	// firm is set when at is what the server or the pace it stated
	// imposes, so a request that cannot wait until then may be refused at
	// once. A pace still being learned (a coarse bucket's first guess, a
	// fixed window's remaining spread over the time left) only projects a
	// time: the request waits instead, as long as it may, and the pace may
	// yet bring its turn forward.
	firm bool
	// held is the end of the hold the turn waits out, a statement of the
	// server's and so firm even when the pace after it is not.
	held time.Time
	// probe marks the turn of a probe: it goes at its time, never on the
	// pace, whose state the probe is there to check.
	probe bool
	// clockID is the pace clock its slot is on (pacer.clockID).
	clockID uint32
	// reprobes is the upstream's count of new probes when the turn was
	// given: a turn from before the upstream went cold again is void.
	reprobes uint32
	// step, on the ramp after the probe, is its step from 1 (0: not on
	// the ramp): it may go before at once the ramp lets it (see ramp).
	step int
	// listed is set while its slot is in the pacer's booked set (see
	// bookedSlots): from its booking until it goes, books again or
	// gives up.
	listed bool
}

// pass is what an admitted attempt carries back to observe.
type pass struct {
	u     *upstream
	sent  uint64    // its place among the attempts sent to the upstream
	at    time.Time // when it was sent (zero if not numbered)
	probe bool
	// fineWait is set when the wait a 429 named came in milliseconds
	// (see outcome.fineWait).
	fineWait bool
	// settle is the attempt's booking on the local token limits, which
	// the usage its response reports settles (usage.go); nil when it
	// booked no tokens here.
	settle *settlement
}

// schedule returns when an attempt may start, given the time now; or, while
// the probe is out, a place in the queue behind it (w != nil), with the time
// its ramp lets it go if the probe has not answered by then.
func (u *upstream) schedule(now time.Time, jitter time.Duration) (t turn, w *waiter, p pass) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.reprobeIfDue(now)
	if u.start.overdue(now) {
		u.openLocked(now, false) // the probe is taking too long to tell us anything
	}
	switch u.start.phase {
	case cold:
		u.start.probe(now)
		return turn{at: u.afterHold(now, jitter), firm: true, probe: true, reprobes: u.hold.reprobes}, nil, pass{u: u, probe: true}
	case probing:
		w = u.start.queue()
		return turn{at: w.at, reprobes: u.hold.reprobes}, w, pass{u: u}
	}
	u.grow(now)
	if u.start.ramp.active(now) && u.interval == 0 && !u.hold.held(now) {
		if k, at := u.start.ramp.join(now, u.sent-u.replies, u.sent); k > 0 {
			// Not firm: the ramp's time is no word of the server's,
			// and the step goes on answers, sooner.
			return turn{at: u.withinBound(now, at), step: k, reprobes: u.hold.reprobes}, nil, pass{u: u}
		}
	}
	t = u.turnAt(u.afterHold(now, jitter))
	// (Not free while a ramp waits for answers: their outcomes must be
	// observed to count.)
	u.free.Store(u.interval == 0 && u.limits == nil && u.hold.free(now) && !u.start.ramp.active(now))
	return t, nil, pass{u: u}
}

// reprobeIfDue starts slow start again when a hold cut to the bound ends:
// the next request is a probe, and its answer decides.
func (u *upstream) reprobeIfDue(now time.Time) {
	if u.start.phase != open || !u.hold.reprobeDue(now) {
		return
	}
	u.hold.reprobe()
	u.start.cool()
	if u.poisoned() {
		u.forget(now) // the probe's answer teaches the pace again
		return
	}
	u.newQueue(now) // the turns booked are void: their requests book again
}

// poisoned reports a pace at the bound: one attempt per WithMaxRetryAfter
// is what an absurd statement leaves, not a rate any server means.
func (u *upstream) poisoned() bool {
	return u.bound > 0 && u.interval >= u.bound
}

// claim settles a waiter whose ramp time came, or who gave up (see
// slowStart.claim).
func (u *upstream) claim(w *waiter) turn {
	u.mu.Lock()
	defer u.mu.Unlock()
	t := u.start.claim(w)
	if t.at.IsZero() { // no turn given: it goes now, in this epoch
		t.reprobes = u.hold.reprobes
	}
	return t
}

// turnAt books a turn at or after start on the pace.
func (u *upstream) turnAt(start time.Time) turn {
	t := u.book(start)
	t.reprobes = u.hold.reprobes
	if !start.Before(u.hold.end) {
		t.held = u.hold.end
	}
	return t
}

// dispatch numbers an attempt that is being sent, so its response can be
// placed among the others: a reading covers the attempts sent before it.
func (u *upstream) dispatch(p *pass) {
	u.mu.Lock()
	u.sentOne()
	p.sent = u.sent
	if p.probe {
		u.probeSent(p.at)
	}
	u.busyAt = later(u.busyAt, p.at)
	u.start.ramp.sending(p.at, u.sent)
	u.mu.Unlock()
}

// leftAt tells a probe's upstream when the probe left: later than
// dispatch numbered it when it waited for the breaker, the adaptive limit
// or a concurrency slot after that. The queue behind it books an interval
// after it (see pacer.probeSent). Other attempts keep the slots they had.
func (p *pass) leftAt(now time.Time) {
	if !p.probe || p.u == nil || !now.After(p.at) {
		return
	}
	p.u.mu.Lock()
	p.u.probeSent(now)
	p.u.mu.Unlock()
}

// firmAt is the turn's time if it is firm (see turn.firm), else the end of
// the hold it waits out (zero if none).
func (t turn) firmAt() time.Time {
	if t.firm {
		return t.at
	}
	return t.held
}

// recheck returns when a request that already has its turn may go, given
// the time now: later if the upstream is held (a new turn after the hold,
// paced or spread with jitter), earlier or later if the pace changed since
// the turn was booked, on the pace if the upstream became paced; zero when
// it may go now. quicker, when not nil, is closed if the pace quickens
// before then, or, for a fixed window found used up, at the next answer
// (see pacer.countedFor). again reports that the upstream went cold for a
// new probe since the turn was booked: the request must be scheduled again.
func (u *upstream) recheck(now time.Time, t *turn, jitter time.Duration) (at time.Time, quicker <-chan struct{}, again bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.reprobeIfDue(now); t.reprobes != u.hold.reprobes {
		return time.Time{}, nil, true
	}
	step := t.step // on the ramp, from 1
	if step > 0 && u.start.ramp.due(step-1) {
		// The steps of the ramp before its own have answered: it
		// goes now (or takes a paced slot, if a 429 came meanwhile).
		if t.step = 0; t.at.After(now) {
			t.at = now
		}
	}
	if t.paced && (u.interval <= 0 || t.clockID != u.clockID) {
		// Its slot was on a pace since stopped: it is due now, and
		// takes a slot if a new pace has started.
		t.paced, t.at = false, now
	}
	at = t.at
	switch {
	case t.paced && t.v >= u.tatV && !u.timeOf(t.v).Before(now):
		// The server's count set the pace clock back behind this slot:
		// it books again, at the front.
		u.rebook(t, now)
		at = t.at
	case t.paced:
		at, t.firm = u.timeOf(t.v), u.firm
	case !t.probe && u.interval > 0 && !at.After(now):
		u.rebook(t, now) // paced since it was booked: take a slot
		at = t.at
	}
	if u.hold.held(now) && at.Before(u.hold.end) {
		if u.hold.byQuota && t.paced && t.clockID == u.clockID && u.hold.end.Before(u.timeOf(t.v+1)) {
			// The hold ends before the next slot: the turn keeps its
			// slot and goes when the hold ends, alone, as no one else's
			// slot is that early. A new slot would cost a whole
			// interval, every turn: a quota read empty as its answer came
			// back holds until a reset one round trip past the slot when
			// the round trip is long (a bucket of one paced at 2x its
			// time with a 20 ms round trip).
			at = u.hold.end
		} else {
			u.rebook(t, u.afterHold(now, jitter)) // a new turn after the hold, not a herd
			at = t.at
		}
	}
	stalled := u.stalledAt()
	if t.paced && !stalled.IsZero() && at.After(stalled) && u.first(*t) {
		if stalled.After(now) {
			at = stalled // wake then, to go if the upstream is still idle
		} else {
			u.catchUp(now, t.v) // it goes alone, and the queue follows
			at = now
		}
	}
	if at.After(now) {
		if r := u.hold.reprobeAt; !r.IsZero() && at.After(r) {
			at = r // wake for the new probe, and take a place again
		}
		if t.step > 0 {
			return at, u.start.ramp.stepped.wait(), false // woken when its step may go
		}
		return at, u.quickerFor(*t), false
	}
	if t.probe {
		return time.Time{}, nil, false
	}
	if !stalled.IsZero() && !now.Before(stalled) {
		// Idle for the bound: it goes, whatever the model of the
		// server's count says, and alone: as good as sent, so that no
		// other request goes for the same stall, and spending a unit of
		// the model's count, so that none goes on the unit it may hold.
		u.busyAt = now
		u.clearOne(now)
		u.wentAt = now // and the observed mode's spacing
	} else if short := u.shortfall(now, u.sent-u.replies); short > 0 {
		if wake := now.Add(short); !stalled.IsZero() && wake.After(stalled) {
			return stalled, nil, false // the model's wait is bounded too
		}
		return now.Add(short), u.countedFor(u.sent - u.replies), false
	}
	if step > 0 {
		u.start.ramp.leaving(now, step-1, u.sent+1) // it is the next sent
	}
	u.unlist(t)
	return time.Time{}, nil, false
}

// rebook gives t a new turn at or after start, in place of the slot it
// held.
func (u *upstream) rebook(t *turn, start time.Time) {
	u.unlist(t)
	*t = u.turnAt(start)
}

// stalledAt is when the upstream will have been idle for the bound (and an
// interval) with requests waiting on it, if nothing is sent or answered
// before: nothing in flight, and nothing sent or answered since busyAt, or
// since the end of a hold (a hold is a statement of its own, with its own
// bound). Zero when something is in flight, or there is no bound. (The
// interval is there for a pace at the bound itself: its next slot comes a
// bound after the last send, and goes as the next in line, not raced by a
// request behind it that the stall would let go.)
//
// Bounded trust, for the pace: counts read while attempts were out, and
// answers that came back out of order, can book the queue behind slots
// nobody holds, past the bound, with nothing in flight to correct them (a
// request alone in the queue was told to wait 2.2 s behind a bound of
// 0.5 s). At stalledAt the first in line goes, alone, whatever its slot or
// the model of the server's count (shortfall) say, and its answer decides;
// the pace clock moves on so the queue follows it (see pacer.catchUp). A
// healthy pace never comes to this: its slots are an interval apart, and
// the interval is within the bound.
func (u *upstream) stalledAt() time.Time {
	if u.bound <= 0 || u.sent != u.replies || u.busyAt.IsZero() {
		return time.Time{}
	}
	return later(u.busyAt, u.hold.end).Add(u.bound + u.interval)
}

// wakeIfStalling wakes the requests waiting on the pace when the first of
// them would sleep past stalledAt: its slot lies further out than the bound
// from the last attempt, and it must wake at stalledAt to go then (see
// recheck). It is called when the last attempt out is answered, and when a
// request gives up (it may have been first in line). A healthy pace never
// wakes anyone here: its next slot is within an interval.
func (u *upstream) wakeIfStalling() {
	stalled := u.stalledAt()
	if stalled.IsZero() || u.interval <= 0 {
		return
	}
	if front, ok := u.booked.front(u.clockID); ok && u.timeOf(front).After(stalled) {
		u.quicker.fire()
	}
}

// unbook gives back the paced slot of a turn that will not be used (its
// request was refused, or gave up), when no later one was booked since, so
// refused requests do not push the queue out.
func (u *upstream) unbook(now time.Time, t turn) {
	if !t.paced && !t.listed {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	first := t.listed && u.first(t)
	u.unlist(&t)
	if t.paced && u.interval > 0 && t.clockID == u.clockID && u.tatV == t.v+1 {
		u.tatV = t.v
	}
	if first {
		u.wakeIfStalling() // the next in line may have to wake for a stall; others need not
	}
}

// nextTurn is when a request booking a turn at now would go, past any
// hold and on the pace, without booking it.
func (u *upstream) nextTurn(now time.Time) time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.nextSlot(u.afterHold(now, 0))
}

// afterHold delays start past a hold, spreading the held requests with
// jitter when no pacing rate does it for them.
func (u *upstream) afterHold(now time.Time, jitter time.Duration) time.Time {
	return u.hold.after(now, jitter, u.paced())
}

// holdUntil holds new requests until at, within the bound (see
// holds.until); byQuota tells a reading's hold from a 429's. It reports
// whether the hold moved later. The pacer is told where the hold ends: a
// pace that slows before then changes at that time (see pacer.holdEnd).
func (u *upstream) holdUntil(now, at time.Time, byQuota bool) bool {
	if !u.hold.until(now, at, u.bound) {
		return false
	}
	u.hold.byQuota = byQuota
	u.holdEnd = u.hold.end
	return true
}

// openLocked ends slow start, if a probe is out: queued requests get their
// turns in arrival order: paced slots, or, on an upstream that is neither
// paced nor held, a ramp that doubles the attempts in flight per step
// (quadruples them after a slow probe's answer: see
// slowStart.rampFactor), each step going once the steps before it have
// answered, and at the latest one and a half round trips of the probe
// after the one before (see slowStart.rampStep and rampFrom). answered: the
// probe's answer is in (not: it took too long, or was called off), so its
// round trip is known.
func (u *upstream) openLocked(now time.Time, answered bool) {
	if u.start.phase != probing {
		return // open already: a ramp under way goes on
	}
	ramp := u.interval == 0 && !u.hold.held(now) // nothing else spaces the queue
	step, factor := u.start.rampStep(now), 2
	switch { // an answered probe's ramp goes on answers
	case answered && u.start.slowProbe(now):
		factor = 4
	case answered:
		// A fast probe's ramp doubles, each step as soon as the one
		// before has answered, or a slow probe's step after it:
		// answers can come slower than the probe's (new connections,
		// a server that slows under the burst).
		step = max(step, rampSlowRTT*3/2)
	}
	var sizes []int // of the ramp's steps
	u.start.open(func(n int) turn {
		if ramp {
			at := rampFrom(now, step, n, factor)
			k := rampSteps(n, factor)
			if k == len(sizes) {
				sizes = append(sizes, 0)
			}
			sizes[k]++
			t := turn{at: u.withinBound(now, at), firm: true, reprobes: u.hold.reprobes}
			if answered {
				t.step = k + 1
			}
			return t
		}
		return u.turnAt(u.afterHold(now, 0))
	})
	if !answered {
		sizes = nil
	}
	u.start.ramp.begin(now, sizes, u.sent, step/3, now.Add(step*time.Duration(len(sizes))))
	u.start.ramp.joinable(factor, step)
}

// withinBound holds a time on the ramp to the bound. Bounded trust: the
// requests ahead may give up, and nothing then goes before it.
func (u *upstream) withinBound(now, at time.Time) time.Time {
	if u.bound > 0 && at.After(now.Add(u.bound)) {
		return now.Add(u.bound)
	}
	return at
}

// abandon ends slow start when the probe will not be sent after all (its
// caller gave up, or could not be admitted): the requests queued behind it
// get their turns now, as when the probe takes too long, instead of waiting
// for an answer that will never come.
func (p pass) abandon(now time.Time) {
	if p.u == nil || !p.probe && p.sent == 0 {
		return
	}
	p.u.mu.Lock()
	defer p.u.mu.Unlock()
	if p.sent > 0 {
		// Counted as sent when its turn came, it never went: it is no
		// longer out (the pacer's one-probe rule and its shortfall
		// read what is out), and the server never saw it.
		p.u.replies++
		p.u.lost(p.sent)
		p.u.start.ramp.answered(now, p.u.replies, p.u.sent)
		p.u.wakeIfStalling()
	}
	if p.probe {
		p.u.openLocked(now, false)
	}
}

// answeredFree counts the answer to an attempt that the upstream's
// schedule let go (and counted as out) but that came back when the
// upstream was free, with nothing to learn: it is out no longer. The
// pacer's one-probe rule for a quota found empty reads what is out, and an
// attempt never counted back would hold it there. A free pass that was
// never counted (the quick path) costs nothing.
func (p pass) answeredFree(now time.Time) {
	if p.sent == 0 || p.u == nil {
		return
	}
	p.u.mu.Lock()
	p.u.replies++
	p.u.busyAt = later(p.u.busyAt, now)
	p.u.start.ramp.answered(now, p.u.replies, p.u.sent)
	p.u.wakeIfStalling()
	p.u.mu.Unlock()
}

// observe learns from one attempt's outcome: limits from its headers, a hold
// from a 429 or Retry-After. limits may be the zero value. held is the hold
// it put in force or moved later (zero if none), for a QuotaBackend to share.
//
// entered is the pacer's mode when this outcome moved it to another one,
// else paceOff. late reports, once per upstream, that its resets were
// found to run late (see pacer.spotLateResets). spreads reports that
// the outcome was a refusal and the upstream now spreads the retries it
// draws by itself (see spreadsRetries).
func (p pass) observe(now time.Time, limits RateLimits, hold time.Duration, throttled, gotResponse bool) (held time.Time, entered paceMode, late, spreads bool) {
	u := p.u
	if u == nil {
		return time.Time{}, paceOff, false, false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	was := u.mode
	defer func() {
		if u.mode != was {
			entered = u.mode
		}
	}()
	moved := false
	u.free.Store(false) // schedule decides again, on the clock
	u.busyAt = later(u.busyAt, now)
	if p.sent > 0 {
		u.replies++
		if throttled {
			u.start.ramp.halt()
		} else {
			u.start.ramp.answered(now, u.replies, u.sent)
		}
	}
	if gotResponse {
		if !throttled {
			u.servedSent(p.sent, p.at) // first: the climb grows on it (see grow)
		}
		u.answered(now, throttled)
	} else if p.sent > 0 {
		u.lost(p.sent)
	}
	if throttled {
		var knew time.Duration // the next unit, if the server was seen to accept lately
		if u.accepts.perSecond(now) > 0 {
			knew = u.unitAfter()
		}
		if u.rate == 0 && !limits.Known() {
			u.seedAccepts(now)
		}
		u.pacer.throttled(now, limits.Known(), hold, p.fineWait, p.sent, p.at)
		if knew == 0 && was == paceOff && u.mode == paceObserved && hold <= time.Second {
			// A header-less upstream's first 429, naming a whole
			// second at most (the least a bucket's refusal says in
			// seconds): the rate it was seen to serve, where the
			// observed pace starts, beats that too. A longer wait
			// is a statement of one (a penalty, a slow rate).
			knew = u.unitAfter()
		}
		if knew > 0 {
			hold = min(hold, knew) // the pace knows better than a coarse wait
		}
		if w, ok := u.windowWait(now); ok {
			hold = min(hold, w) // so does a window's learned end
		}
	}
	if hold > 0 && u.holdUntil(now, now.Add(hold), false) {
		moved = true
	}
	if limits.Known() {
		u.stated, u.statedAt = limits, now
		moved = u.learnLocked(now, limits, p.sent, p.at, throttled) || moved
	}
	if u.limits != nil && limits.Known() {
		u.limits.correct(now, limits)
	}
	if p.probe || (u.start.phase == probing && gotResponse) {
		u.openLocked(now, gotResponse)
	}
	if moved {
		held = u.hold.end
	}
	if u.lateResets && !u.toldLate {
		u.toldLate, late = true, true
	}
	u.counted.fire() // a window's count, or one fewer out (see countedFor)
	u.wakeIfStalling()
	return held, paceOff, late, throttled && u.spreadsRetries()
}

// spreadsRetries reports whether the upstream's pace spreads retries told
// to come back at the same time, so that they need no jitter of their own:
// it lets one attempt go per interval of a millisecond or more (capacity 1:
// a header-less upstream's observed pace, a quota of one or two, or one
// with no limit stated), or it is a fixed window, whose quota comes back
// all at once at its end, where the requests held for it go together
// whatever their jitter. A bucket's pace with room for a burst would let
// them go as a herd. It is guarded by the upstream's lock.
func (u *upstream) spreadsRetries() bool {
	// An interval under a millisecond spaces nothing (a window's pace
	// spreads its quota over lumpSpread, but its end holds the retries).
	return u.paced() && (u.capacity <= 1 && u.interval >= time.Millisecond || u.lumpy)
}

// serverNow is the upstream's clock at local time now, by what h's Date and
// the Dates before it say (see serverClock).
func (u *upstream) serverNow(h http.Header, now time.Time) time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.clock.serverNow(h, now)
}

// seedAccepts gives the accept counter what the upstream's counters say
// when they say more (a free upstream counts nothing in the pacer): the
// successes so far, if the upstream is under a second old.
func (u *upstream) seedAccepts(now time.Time) {
	if now.Sub(u.born) >= time.Second {
		return
	}
	ok := int(u.stats.sent()) - int(u.stats.throttled.Load()) - int(u.stats.failures.Load())
	if have := u.accepts.perSecond(now); float64(ok) > have {
		u.accepts.counts[u.accepts.head] += ok - int(have)
	}
}

// learnLocked updates the pacing from a response's rate-limit state, and
// holds the upstream while a quota is exhausted. It reports whether the
// hold moved later.
//
// A quota hold is lifted by a newer reading that says quota remains: the
// server's count beats its earlier statement (a 429's hold stays).
func (u *upstream) learnLocked(now time.Time, l RateLimits, sent uint64, sentAt time.Time, throttled bool) bool {
	if coarseBucket(l) {
		u.edge.see(sentAt, now, l.Requests.Remaining, l.Requests.Limit)
	}
	if q := l.Requests; !throttled && sent == u.sent && q.HasRemaining && q.Remaining > headroom {
		// (holdEnd stays: turns booked at the hold's end keep that time.)
		u.hold.lift()
	}
	moved := u.holdUntil(now, u.exhaustedUntilLocked(now, l, sentAt), true)
	u.answerSentAt = sentAt
	u.learn(now, l, sent)
	if u.poisoned() {
		// A pace of one attempt per bound is a hold of the bound in
		// disguise: hold for the bound, then probe.
		u.forget(now)
		moved = u.holdUntil(now, now.Add(2*u.bound), true) || moved
	}
	return moved
}

// windowWait is how long a request refused by a fixed window whose end was
// learned from its answers (see windowEdge) need wait before it tries
// again: until that end, or the next probe of it; ok is false for any other
// upstream. The window's own wait (its reset, a whole-second Retry-After)
// is only a statement: the pacer lets the next attempt go on time.
func (u *upstream) windowWait(now time.Time) (time.Duration, bool) {
	if !u.lumpy {
		return 0, false
	}
	at, _, ok := u.edge.next(u.statedEnd())
	if !ok {
		return 0, false
	}
	return max(at.Sub(now), 0), true
}

// exhaustedUntilLocked is when a reading with nothing left lets requests go
// again: the reset, except that a request quota that refills at a known
// rate (a bucket, a stated policy, a measured drain, the observed rate)
// has its next unit back sooner than it is full again. sentAt is when the
// attempt the reading answers was sent (zero if unknown).
//
// A bucket's fine reset (OpenAI's durations) is read from the answer's
// arrival, but the server counted the attempt somewhere in its round trip,
// and the next attempt reaches the server a leg of its own round trip
// after it goes: held from the arrival, each attempt of an empty bucket
// would cost its interval and a whole round trip (1.1-1.2x the ideal for
// a bucket of one with a 20 ms round trip, and the pace then fell behind
// the holds until two went at once and drew a 429). The hold ends half a
// round trip sooner: the next attempt still arrives after the reset as
// long as the two legs between (this answer's way back, the next one's way
// out) take at least half a round trip, and a round trip is trusted for
// no more than a tenth of the interval the reset states. Round trips vary:
// the half taken is of the shortest of late (see rttFloor), not of this
// one. Half of a 35 ms round trip whose way back took 2 ms let the next
// attempt, out in 2 ms, reach a bucket of one 13 ms before its unit: a
// 429 every second or so with answers of 5 to 35 ms, and the pace cut to
// 85% for the rest of the run (1.4-1.7x the ideal).
func (u *upstream) exhaustedUntilLocked(now time.Time, l RateLimits, sentAt time.Time) time.Time {
	var until time.Time
	var rtt time.Duration // the shortest round trip of late, with this one's
	if !sentAt.IsZero() && sentAt.Before(now) {
		rtt = u.rtts.add(now, now.Sub(sentAt))
		u.edge.trip = rtt
	}
	for _, d := range dimensions {
		q := l.Quota(d)
		if !q.Exhausted() || d == Requests && tinyCoarseBucket(*q) {
			continue // always "exhausted": its pace holds it
		}
		at := q.Reset
		if l.Replenishing && !q.Coarse && rtt > 0 && at.After(now) {
			half := min(rtt/2, at.Sub(now)/10)
			at = at.Add(-half)
		}
		if d == Requests && (l.Replenishing || l.Window > 0 || u.coarse || u.mode == paceObserved) {
			unit := u.unitAfter()
			if unit == 0 && l.Window > 0 && q.HasLimit && q.Limit > 0 {
				// A policy states the rate before the pacer has
				// learnt it (this is its first reading): the next
				// unit is a window's share away, not its reset (a
				// whole second, for a bucket of one at 5 a second).
				unit = l.Window / time.Duration(q.Limit)
			}
			if unit > 0 && now.Add(unit).Before(at) {
				at = now.Add(unit)
			}
			if unit > 0 && !at.After(now) && u.coarse && u.dry > 1 {
				// Its reset has passed and it is still empty, found
				// so again and again: the next probe waits a unit,
				// doubled with each (a window that ends later than
				// its reset said, cut down, is not probed every unit).
				at = now.Add(unit)
			}
			if w, ok := u.windowWait(now); ok && now.Add(w).Before(at) {
				at = now.Add(w) // the window's learned end beats its stated one
			}
			if end, ok := u.cutDownEnd(now, *q); ok {
				at = later(at, end)
			}
		}
		until = later(until, at)
	}
	return until
}

// cutDownEnd is when a coarse quota read empty after its stated reset has
// passed comes back, by what its answers show: the late bound of the end
// windowEdge has learned, when that is known and at most a second away. A
// reset cut down to the second (GitHub's epoch seconds, rounded down)
// passes up to a second before a fixed window ends, and the window's units
// come back at its end, not one by one: a request sent at the proven rate
// meanwhile is refused. A window too small to be told from a bucket by its
// lumps (five a second) fell into step with that: its sixth request went
// two units after the drain, just before the window's end, and the probe
// after the 429 as long after, so the next window started as late, window
// after window (4-7 of 60 requests refused where the issue allows 3).
// The bound keeps a bucket mistaken for a window from being held longer
// than its reset could be late. A bucket's count rises as it refills, and
// windowEdge takes a rise for a new window: idle, or shared with another
// client, a bucket of 5 at 10 a second taught it edges 87 to 979 ms wide,
// and held until them, a burst ran up to 1.47x where it had run 1.37x. So
// the end must be known within cutDownWidest (the width of a window's, in
// the matrix's GitHub 5/s cells: 54 ms at the median, 273 ms at most), and
// have held over cutDownAgreed windows' ends in a row. That halves what
// such buckets lose, not all of it: one drained in waves about a second
// apart shows a window's readings, and is still held now and then (see
// design.md, Known limits). A window told by its lumps has windowWait.
func (u *upstream) cutDownEnd(now time.Time, q Quota) (time.Time, bool) {
	if u.lumpy || !u.coarse || q.Reset.After(now) {
		return time.Time{}, false
	}
	lo, hi, ok := u.edge.end()
	if !ok || !hi.After(now) || hi.Sub(now) > time.Second {
		return time.Time{}, false
	}
	if hi.Sub(lo) > cutDownWidest || u.edge.agreed < cutDownAgreed {
		return time.Time{}, false // known too roughly, or too briefly: a bucket's rises teach such edges
	}
	return hi, true
}

// retryWait is windowWait for a request's own retry, under the lock.
func (u *upstream) retryWait(now time.Time) (time.Duration, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.windowWait(now)
}

// rttFloor is the shortest round trip of the last rttWindow to two (two
// windows, as serverClock keeps its samples), so a path that slows for
// good is followed within two windows. It is guarded by the upstream's
// lock.
type rttFloor struct {
	start     time.Time // of the current window
	cur, prev time.Duration
}

// rttWindow is the span of rttFloor's windows.
const rttWindow = 10 * time.Second

// add takes a round trip measured at now and returns the shortest of late.
func (f *rttFloor) add(now time.Time, rtt time.Duration) time.Duration {
	if f.cur == 0 || now.Sub(f.start) >= rttWindow {
		f.prev = f.cur
		if now.Sub(f.start) >= 2*rttWindow {
			f.prev = 0
		}
		f.start, f.cur = now, rtt
	}
	f.cur = min(f.cur, rtt)
	if f.prev > 0 {
		return min(f.cur, f.prev)
	}
	return f.cur
}
