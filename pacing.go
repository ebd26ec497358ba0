package retryhttp

import (
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Pacing by what the server says.
//
// Each upstream starts cold. Its first request goes alone as a probe; the
// requests that arrive while it is out wait for its answer, and are let go on
// a doubling ramp (1, then 2, 4, 8, ... every slowStartStep) in case the answer
// is slow. The probe's headers decide what follows:
//
//   - no rate-limit headers: the upstream is open and requests go at once,
//     as if this stage did not exist;
//   - rate-limit headers: requests are paced by GCRA (a virtual-time token
//     bucket) at the rate the headers imply, with the bucket kept in step
//     with what the server says remains.
//
// The pace keeps its own clock, counted in slots (one per interval) rather
// than in time. A request waiting for its turn holds a slot number, so when a
// later reading changes the rate every queued request moves with it: a queue
// booked at a cautious first guess speeds up as soon as the rate is known.
//
// Whatever the phase, an exhausted quota (remaining 0) or a 429 / Retry-After
// holds every new request on the upstream until the server's time, so one
// 429 pauses the key instead of every request finding the limit by itself.
// Slots are assigned in arrival order, so waiting is first come, first served.
const (
	slowStartStep = 200 * time.Millisecond
	slowStartMax  = 2 * time.Second
	// paceMargin is the share of the learned rate used, so that timing noise
	// between here and the server does not turn into 429s.
	paceMargin = 0.95
	// headroom is how many units of the server's remaining quota are left
	// unused, so a response never reports exactly zero while paced.
	headroom = 1
	// rateCreep is how much the learned rate may rise per reading that does
	// not contradict it; rateRecover, when more than half the quota remains.
	rateCreep   = 1.02
	rateRecover = 1.1
	// rateBackoff is what a 429 leaves of the learned rate.
	rateBackoff = 0.7
	// drainSpan and drainCount are the least time and admissions a drain
	// measurement spans (see measureLocked); drainSpanMax the most, so the
	// measure follows a rate that changes.
	drainSpan    = 100 * time.Millisecond
	drainCount   = 4
	drainSpanMax = time.Second
)

type phase int

const (
	cold phase = iota
	probing
	open
)

// upstream is the pacing, hold and limit state of one upstream key.
type upstream struct {
	// free is set while the upstream needs nothing of this stage: open, not
	// paced, not held, no client-side limits. Requests then pass without
	// the lock or the clock.
	free    atomic.Bool
	key     upstreamKey
	touched atomic.Uint64 // see upstreamTable

	mu sync.Mutex

	phase      phase
	probeStart time.Time
	waiters    []*waiter     // requests queued behind the probe, in arrival order
	released   chan struct{} // closed when the probe's answer is in

	// GCRA pacing learned from headers; interval 0 means not paced. Slots
	// are counted on the pace clock, which read anchorV at anchorAt and
	// advances one slot per interval.
	interval time.Duration
	capacity float64
	anchorAt time.Time
	anchorV  float64
	tatV     float64       // the theoretical arrival time, in slots
	quicker  chan struct{} // closed when the pace quickens; nil until asked for
	quickOf  time.Duration // the interval quicker was made at
	rate     float64       // the rate (per second) the headers imply (see learnLocked)
	ceiling  float64       // below the rate that last drew a 429; 0: none yet
	proven   float64       // the highest lower bound on the rate any reading gave
	sent     uint64        // attempts sent so far; orders responses against sends
	rejected uint64        // 429s seen so far: sends the server did not count
	mark     reading       // where the current drain measurement starts
	latest   reading       // the reading that covers the most attempts sent
	limit    int64         // the quota's size, as the latest reading gave it
	coarse   bool          // the quota is a coarse bucket (see coarseBucket)
	firm     bool          // the pace is what the server stated (see turn.firm)
	measured bool          // a drain measurement has stated the rate

	heldUntil time.Time

	limits *clientLimits // nil without WithRateLimit

	breaker *breaker // nil when disabled
	budget  *budget  // nil when disabled
	stats   counters
}

// waiter is a request queued behind the probe.
type waiter struct {
	n        int // its place in the queue, from 1
	released chan struct{}
	gone     bool // went on its ramp, or gave up
	turn     turn // its start, assigned when the probe's answer came in
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
}

// pass is what an admitted attempt carries back to observe.
type pass struct {
	u     *upstream
	sent  uint64 // its place among the attempts sent to the upstream
	probe bool
}

// schedule returns when an attempt may start, given the time now; or, while
// the probe is out, a place in the queue behind it (w != nil), with the time
// its ramp lets it go if the probe has not answered by then.
func (u *upstream) schedule(now time.Time, jitter time.Duration) (t turn, w *waiter, p pass) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.phase == probing && now.Sub(u.probeStart) > slowStartMax {
		u.openLocked(now) // the probe is taking too long to tell us anything
	}
	switch u.phase {
	case cold:
		u.phase, u.probeStart = probing, now
		u.released = make(chan struct{})
		return turn{at: u.afterHold(now, jitter), firm: true}, nil, pass{u: u, probe: true}
	case probing:
		w = &waiter{n: len(u.waiters) + 1, released: u.released}
		u.waiters = append(u.waiters, w)
		return turn{at: u.rampAt(w.n)}, w, pass{u: u}
	}
	t = u.turnLocked(u.afterHold(now, jitter))
	u.free.Store(u.interval == 0 && u.limits == nil && !u.heldUntil.After(now))
	return t, nil, pass{u: u}
}

// turnLocked books a start at or after start: a paced slot when the upstream
// is paced, else start itself.
func (u *upstream) turnLocked(start time.Time) turn {
	if u.interval <= 0 {
		return turn{at: start, firm: true}
	}
	v, moved := u.gcraLocked(u.slotsAt(start))
	if moved {
		start = u.timeOf(v)
	}
	return turn{at: start, v: v, paced: true, firm: u.firm}
}

// rampAt is when the n-th request queued behind the probe goes if the probe
// has not answered: 1 after one step, 2 more after two, 4 after three...
func (u *upstream) rampAt(n int) time.Time {
	steps := 1 + math.Floor(math.Log2(float64(n)))
	return u.probeStart.Add(time.Duration(steps) * slowStartStep)
}

// claim settles a waiter whose ramp time came, or who gave up: it returns
// the slot the probe's answer assigned meanwhile, or leaves the queue and
// returns a zero time.
func (u *upstream) claim(w *waiter) turn {
	u.mu.Lock()
	defer u.mu.Unlock()
	if w.turn.at.IsZero() {
		w.gone = true
	}
	return w.turn
}

// dispatch numbers an attempt that is being sent, so its response can be
// placed among the others: a reading covers the attempts sent before it.
func (u *upstream) dispatch(p *pass) {
	u.mu.Lock()
	u.sent++
	p.sent = u.sent
	u.mu.Unlock()
}

// firmAt is the turn's time if it is firm (see turn.firm), else zero.
func (t turn) firmAt() time.Time {
	if t.firm {
		return t.at
	}
	return time.Time{}
}

// recheck returns when a request that already has its turn may go, given
// the time now: later if the upstream is held (a new turn after the hold,
// paced or spread with jitter), earlier or later if the pace changed since
// the turn was booked; zero when it may go now. quicker, when not nil, is
// closed if the pace quickens before then.
func (u *upstream) recheck(now time.Time, t *turn, jitter time.Duration) (at time.Time, quicker <-chan struct{}) {
	u.mu.Lock()
	defer u.mu.Unlock()
	at = t.at
	if t.paced && u.interval > 0 {
		at, t.firm = u.timeOf(t.v), u.firm
	}
	if u.heldUntil.After(now) && at.Before(u.heldUntil) {
		*t = u.turnLocked(u.afterHold(now, jitter)) // a new turn after the hold, not a herd
		at = t.at
	}
	if at.After(now) {
		return at, u.quickerLocked(*t)
	}
	if short := u.shortfallLocked(now); short > 0 {
		return now.Add(short), nil
	}
	return time.Time{}, nil
}

// shortfallLocked is how long until a coarse bucket surely holds a unit
// beyond the headroom for one more attempt, by the latest reading, the
// attempts sent since and the refill rate proven so far; 0 when it does now.
// It is the last check before a paced attempt goes: a pace that probes above
// the true rate drains the headroom, never the bucket.
func (u *upstream) shortfallLocked(now time.Time) time.Duration {
	l := u.latest
	if !u.coarse || u.proven <= 0 || l.at.IsZero() {
		return 0
	}
	refilled := u.proven * now.Sub(l.at).Seconds()
	have := min(float64(l.remaining)+refilled, float64(u.limit)) - float64(u.sent-l.sent)
	short := float64(headroom+1) - have
	if short <= 0 {
		return 0
	}
	return time.Duration(short / u.proven * float64(time.Second))
}

// quickerLocked returns the channel closed when the pace quickens, for a
// request waiting on a paced turn; nil for any other.
func (u *upstream) quickerLocked(t turn) <-chan struct{} {
	if !t.paced {
		return nil
	}
	if u.quicker == nil {
		u.quicker, u.quickOf = make(chan struct{}), u.interval
	}
	return u.quicker
}

// slotsAt reads the pace clock at t.
func (u *upstream) slotsAt(t time.Time) float64 {
	return u.anchorV + float64(t.Sub(u.anchorAt))/float64(u.interval)
}

// timeOf is when the pace clock reads v, at the current pace.
func (u *upstream) timeOf(v float64) time.Time {
	return u.anchorAt.Add(time.Duration(math.Ceil((v - u.anchorV) * float64(u.interval))))
}

// setPaceLocked sets the pace to one slot per interval from now on. Booked
// slots keep their numbers, so they move with the pace; requests waiting on
// them are told when it quickens by a tenth or more.
func (u *upstream) setPaceLocked(now time.Time, interval time.Duration) {
	if interval == u.interval {
		return
	}
	if u.interval > 0 {
		u.anchorV = u.slotsAt(now)
	} else {
		u.anchorV, u.tatV = 0, 0
	}
	u.anchorAt, u.interval = now, interval
	if u.quicker != nil && interval*10 <= u.quickOf*9 {
		close(u.quicker)
		u.quicker = nil
	}
}

// afterHold delays start past a hold, spreading the held requests with
// jitter when no pacing rate does it for them.
func (u *upstream) afterHold(now time.Time, jitter time.Duration) time.Time {
	if !u.heldUntil.After(now) {
		return now
	}
	if u.interval > 0 || jitter <= 0 {
		return u.heldUntil
	}
	return u.heldUntil.Add(time.Duration(rand.Int64N(int64(jitter))))
}

// gcraLocked books the next paced slot at or after slot v; moved reports
// that it is later than v.
func (u *upstream) gcraLocked(v float64) (slot float64, moved bool) {
	if earliest := u.tatV - (u.capacity - 1); earliest > v {
		v, moved = earliest, true
	}
	u.tatV = max(u.tatV, v) + 1
	return v, moved
}

// openLocked ends slow start: queued requests get slots in arrival order.
func (u *upstream) openLocked(now time.Time) {
	if u.phase != probing {
		return
	}
	u.phase = open
	for _, w := range u.waiters {
		if w.gone {
			continue
		}
		w.turn = u.turnLocked(u.afterHold(now, 0))
	}
	close(u.released)
	u.waiters = nil
}

// abandon ends slow start when the probe will not be sent after all (its
// caller gave up, or could not be admitted): the requests queued behind it
// get their turns now, as when the probe takes too long, instead of waiting
// for an answer that will never come.
func (p pass) abandon(now time.Time) {
	if !p.probe || p.u == nil {
		return
	}
	p.u.mu.Lock()
	p.u.openLocked(now)
	p.u.mu.Unlock()
}

// observe learns from one attempt's outcome: limits from its headers, a hold
// from a 429 or Retry-After. limits may be the zero value. held is the hold
// it put in force or moved later (zero if none), for a QuotaBackend to share.
func (p pass) observe(now time.Time, limits RateLimits, hold time.Duration, throttled, gotResponse bool) (held time.Time) {
	u := p.u
	if u == nil {
		return time.Time{}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	before := u.heldUntil
	u.free.Store(false) // schedule decides again, on the clock
	if throttled {
		u.rejected++
	}
	if hold > 0 {
		if until := now.Add(hold); until.After(u.heldUntil) {
			u.heldUntil = until
		}
	}
	if throttled {
		u.throttled(now) // with or without a Retry-After: the pace was too fast
	}
	if limits.Known() {
		u.learnLocked(now, limits, p.sent)
	}
	if u.limits != nil && limits.Known() {
		u.limits.correct(now, limits)
	}
	if p.probe || (u.phase == probing && gotResponse) {
		u.openLocked(now)
	}
	if u.heldUntil.After(before) {
		held = u.heldUntil
	}
	return held
}

// learnLocked updates the pacing from a response's rate-limit state.
func (u *upstream) learnLocked(now time.Time, l RateLimits, sent uint64) {
	q := l.Requests
	coarse := coarseBucket(l)
	if coarse {
		u.coarse, u.limit = true, q.Limit
		if sent >= u.latest.sent {
			u.latest = reading{at: now, remaining: q.Remaining, sent: sent}
		}
	}
	if until := u.exhaustedUntilLocked(now, l); until.After(u.heldUntil) {
		u.heldUntil = until
	}
	lo, hi := rateBounds(now, l)
	if hi > 0 || coarse {
		binding := u.interval > 0 && u.tatV > u.slotsAt(now) // requests are waiting on the pace
		if coarse && u.rate > 0 {
			u.measureLocked(now, q, sent, lo, hi, binding)
			u.rate = max(u.rate, u.proven)
		} else {
			u.rate = u.nextRate(lo, hi, q, float64(q.Limit-q.Remaining), q.Reset.Sub(now).Seconds(), binding)
		}
		u.setPaceLocked(now, u.paceOf(u.rate))
		u.firm = l.Window > 0 || (l.Replenishing && !coarse)
		u.capacity = 1
		if q.HasLimit && q.Limit > headroom+1 {
			u.capacity = float64(q.Limit - headroom)
		}
	}
	if u.interval > 0 && q.HasRemaining {
		// Requests sent after this one had not reached the server when it
		// answered: what it says remains is theirs too.
		unseen := float64(u.sent - sent)
		available := float64(q.Remaining-headroom) - unseen
		u.tatV = max(u.tatV, u.slotsAt(now)+(u.capacity-1)+(1-available))
	}
}

// exhaustedUntilLocked is when a reading with nothing left lets requests go
// again: the reset, except that a replenishing request quota whose refill
// rate is proven has its next unit back sooner than it is full again.
func (u *upstream) exhaustedUntilLocked(now time.Time, l RateLimits) time.Time {
	var until time.Time
	for _, d := range dimensions {
		q := l.Quota(d)
		if !q.Exhausted() {
			continue
		}
		at := q.Reset
		if d == Requests && l.Replenishing && u.proven > 0 {
			if unit := now.Add(time.Duration(float64(time.Second) / u.proven)); unit.Before(at) {
				at = unit
			}
		}
		until = later(until, at)
	}
	return until
}

// coarseBucket reports a replenishing quota whose reset, in whole seconds,
// is too coarse to state the refill rate (Anthropic's RFC 3339 resets): a
// bucket that refills in 100 ms says "full by the next second".
func coarseBucket(l RateLimits) bool {
	q := l.Requests
	return l.Replenishing && l.Window == 0 && q.HasLimit && q.HasRemaining &&
		q.Limit > headroom+1 && !q.Reset.IsZero() && q.Reset.Nanosecond() == 0
}

// reading is one response's word on a coarse bucket, the start of a drain
// measurement.
type reading struct {
	at        time.Time
	remaining int64
	sent      uint64 // the attempt the reading answers
	rejected  uint64 // 429s seen by then
	full      bool   // the bucket was (nearly) full: refill may be lost to the cap
}

// measureLocked learns a coarse bucket's refill rate from two readings:
// what remains now, less what remained at the mark, plus what the server
// took in between (admissions, less those it refused), over the time between.
// Remaining is rounded down, so the measure is within one unit; it is exact
// only while the bucket stayed below full, since a full bucket throws refill
// away. Hence:
//
//   - both readings below full: the measure states the rate;
//   - otherwise it is only a lower bound. While the pace holds requests back
//     and the bucket stays full, the rate is probed upward: before the first
//     measure by as much as half the quota could absorb over the span (a
//     bucket of 10 read every 100 ms allows +50/s a step), after it by
//     rateCreep, so the pace settles just under the truth.
func (u *upstream) measureLocked(now time.Time, q Quota, sent uint64, lo, hi float64, binding bool) {
	r := reading{at: now, remaining: q.Remaining, sent: sent, rejected: u.rejected, full: q.Remaining >= q.Limit-1}
	u.proven = max(u.proven, lo)
	m := u.mark
	span := now.Sub(m.at)
	n := float64(sent-m.sent) - float64(r.rejected-m.rejected)
	switch {
	case m.at.IsZero() || sent <= m.sent || span > drainSpanMax:
		u.mark = r
		return
	case span < drainSpan:
		if m.full && !r.full {
			u.mark = r // measure from the first reading below full
		}
		return
	}
	taken := float64(r.remaining-m.remaining) + n // refill over the span, ±1
	u.proven = max(u.proven, (taken-1)/span.Seconds())
	switch {
	case !m.full && !r.full && n >= drainCount:
		u.rate = taken / span.Seconds()
		u.measured = true
		return // keep the mark: a longer span measures finer
	case !m.full && !r.full:
		return // too few attempts yet to tell the rate
	case r.full && binding:
		// A measure can come out low (a reading delayed on its way
		// here stretches its span), and a full bucket says so: probe
		// up again. The shortfall check keeps the probing from
		// emptying the bucket.
		u.rate *= 2
	}
	if u.ceiling > 0 {
		u.rate = min(u.rate, u.ceiling)
	}
	u.mark = r
	if hi > 0 && !math.IsInf(hi, 1) {
		u.rate = min(u.rate, hi)
	}
	u.rate = max(u.rate, u.proven)
}

// throttled reacts to a 429: the learned rate was too high. Drop it by
// rateBackoff (not below what readings proved), and never again rise above
// nine tenths of it.
func (u *upstream) throttled(now time.Time) {
	if u.rate == 0 {
		return
	}
	u.ceiling = u.rate * 0.9
	u.rate = max(u.rate*rateBackoff, u.proven)
	u.setPaceLocked(now, u.paceOf(u.rate))
}

// paceOf is the interval between paced slots for a rate learned from the
// headers, kept paceMargin under it.
func (u *upstream) paceOf(rate float64) time.Duration {
	if u.coarse {
		// The shortfall check guards the bucket itself: pace at the
		// measured rate and let it hold back what the bucket lacks.
		return time.Duration(float64(time.Second) / rate)
	}
	return time.Duration(float64(time.Second) / (rate * paceMargin))
}

// nextRate folds one reading's bounds on the refill rate into the learned
// rate. The highest lower bound ever read is kept (proven); while the pace
// is what holds requests back, the rate rises from there (by rateCreep a
// reading, faster when more than half the quota remains, so an estimate that
// started low recovers), and it never leaves the bounds: hi, and the ceiling
// a 429 set.
func (u *upstream) nextRate(lo, hi float64, q Quota, missing, left float64, binding bool) float64 {
	u.proven = max(u.proven, lo)
	rate := u.rate
	switch {
	case rate == 0 && !math.IsInf(hi, 1):
		rate = hi
	case rate == 0:
		rate = max(missing/left, 1) // a guess, below the truth: the reset may be late
	case !binding:
		// The pace holds nobody back: a higher rate would prove nothing.
	case q.HasLimit && q.HasRemaining && q.Remaining*2 > q.Limit:
		rate *= rateRecover
	default:
		rate *= rateCreep
	}
	if u.ceiling > 0 {
		hi = min(hi, u.ceiling)
	}
	return max(min(rate, hi), u.proven)
}

// rateBounds returns what the headers prove about the request rate (per
// second) the upstream allows, as bounds lo <= rate <= hi; hi is +Inf when
// nothing caps it and 0 when the headers imply no rate at all.
//
//   - A policy quota over its window (IETF) states the rate.
//   - A token bucket (OpenAI, Anthropic: Reset is when it is full again)
//     misses between Limit-Remaining-1 and Limit-Remaining units (Remaining
//     is rounded down), refilled in the time to Reset. A reset given in whole
//     seconds (Anthropic) may be up to a second late, which loosens hi.
//   - A fixed window running low (under a quarter left) is spread over the
//     time left: Remaining over the time to Reset.
func rateBounds(now time.Time, l RateLimits) (lo, hi float64) {
	q := l.Requests
	if l.Window > 0 && q.HasLimit && q.Limit > 0 {
		r := float64(q.Limit) / l.Window.Seconds()
		return r, r
	}
	left := q.Reset.Sub(now).Seconds()
	if left <= 0 || !q.HasRemaining || !q.HasLimit {
		return 0, 0
	}
	if !l.Replenishing {
		if q.Remaining*4 < q.Limit && q.Remaining > 0 {
			r := float64(q.Remaining) / left
			return r, r
		}
		return 0, 0
	}
	if q.Limit <= q.Remaining {
		return 0, 0
	}
	missing := float64(q.Limit - q.Remaining)
	lo = max(missing-1, 0) / left
	hi = missing / left
	if q.Reset.Nanosecond() == 0 { // whole seconds: the true wait may be a second shorter
		hi = math.Inf(1)
		if left > 1 {
			hi = missing / (left - 1)
		}
	}
	return lo, hi
}
