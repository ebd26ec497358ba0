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

	// GCRA pacing learned from headers; interval 0 means not paced.
	interval time.Duration
	capacity float64
	tat      time.Time
	rate     float64 // the rate (per second) the headers imply (see learnLocked)
	ceiling  float64 // below the rate that last drew a 429; 0: none yet
	proven   float64 // the highest lower bound on the rate any reading gave
	seq      uint64  // admissions so far; orders responses against admissions

	heldUntil time.Time

	limits *clientLimits // nil without WithRateLimit
}

// waiter is a request queued behind the probe.
type waiter struct {
	n        int // its place in the queue, from 1
	released chan struct{}
	gone     bool      // went on its ramp, or gave up
	slot     time.Time // its start, assigned when the probe's answer came in
	seq      uint64
}

// pass is what an admitted attempt carries back to observe.
type pass struct {
	u     *upstream
	seq   uint64
	probe bool
}

// schedule returns when an attempt may start, given the time now; or, while
// the probe is out, a place in the queue behind it (w != nil), with the time
// its ramp lets it go if the probe has not answered by then.
func (u *upstream) schedule(now time.Time, jitter time.Duration) (start time.Time, w *waiter, p pass) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.phase == probing && now.Sub(u.probeStart) > slowStartMax {
		u.openLocked(now) // the probe is taking too long to tell us anything
	}
	switch u.phase {
	case cold:
		u.phase, u.probeStart = probing, now
		u.released = make(chan struct{})
		u.seq++
		return u.afterHold(now, jitter), nil, pass{u: u, seq: u.seq, probe: true}
	case probing:
		w = &waiter{n: len(u.waiters) + 1, released: u.released}
		u.waiters = append(u.waiters, w)
		return u.rampAt(w.n), w, pass{u: u}
	}
	start = u.afterHold(now, jitter)
	if u.interval > 0 {
		start = u.gcraLocked(start)
	}
	u.seq++
	u.free.Store(u.interval == 0 && u.limits == nil && !u.heldUntil.After(now))
	return start, nil, pass{u: u, seq: u.seq}
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
func (u *upstream) claim(w *waiter) (slot time.Time, seq uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !w.slot.IsZero() {
		return w.slot, w.seq
	}
	w.gone = true
	u.seq++
	w.seq = u.seq
	return time.Time{}, w.seq
}

// holdUntil returns when a request that already has its slot may go if the
// upstream is held now: a new slot after the hold, paced or spread with
// jitter; zero when it is not held.
func (u *upstream) holdUntil(now time.Time, jitter time.Duration) time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.heldUntil.After(now) {
		return time.Time{}
	}
	start := u.afterHold(now, jitter)
	if u.interval > 0 {
		start = u.gcraLocked(start) // a new paced slot after the hold, not a herd
	}
	return start
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

// gcraLocked assigns the next paced slot at or after start.
func (u *upstream) gcraLocked(start time.Time) time.Time {
	tau := time.Duration((u.capacity - 1) * float64(u.interval))
	if earliest := u.tat.Add(-tau); earliest.After(start) {
		start = earliest
	}
	if u.tat.Before(start) {
		u.tat = start
	}
	u.tat = u.tat.Add(u.interval)
	return start
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
		w.slot = u.afterHold(now, 0)
		if u.interval > 0 {
			w.slot = u.gcraLocked(w.slot)
		}
		u.seq++
		w.seq = u.seq
	}
	close(u.released)
	u.waiters = nil
}

// observe learns from one attempt's outcome: limits from its headers, a hold
// from a 429 or Retry-After. limits may be the zero value.
func (p pass) observe(now time.Time, limits RateLimits, hold time.Duration, gotResponse bool) {
	u := p.u
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.free.Store(false) // schedule decides again, on the clock
	if hold > 0 {
		if until := now.Add(hold); until.After(u.heldUntil) {
			u.heldUntil = until
		}
		u.throttled()
	}
	if limits.Known() {
		u.learnLocked(now, limits, p.seq)
	}
	if u.limits != nil && limits.Known() {
		u.limits.correct(now, limits)
	}
	if p.probe || (u.phase == probing && gotResponse) {
		u.openLocked(now)
	}
}

// learnLocked updates the pacing from a response's rate-limit state.
func (u *upstream) learnLocked(now time.Time, l RateLimits, seq uint64) {
	if until := exhaustedUntil(l); until.After(u.heldUntil) {
		u.heldUntil = until
	}
	q := l.Requests
	lo, hi := rateBounds(now, l)
	if hi > 0 {
		binding := u.tat.After(now) // requests are waiting on the pace
		u.rate = u.nextRate(lo, hi, q, float64(q.Limit-q.Remaining), q.Reset.Sub(now).Seconds(), binding)
		u.interval = time.Duration(float64(time.Second) / (u.rate * paceMargin))
		u.capacity = 1
		if q.HasLimit && q.Limit > headroom+1 {
			u.capacity = float64(q.Limit - headroom)
		}
	}
	if u.interval > 0 && q.HasRemaining {
		// Requests admitted after this one have not reached the server yet:
		// what it says remains is theirs too.
		unseen := float64(u.seq - seq)
		available := float64(q.Remaining-headroom) - unseen
		tau := time.Duration((u.capacity - 1) * float64(u.interval))
		need := now.Add(tau + time.Duration((1-available)*float64(u.interval)))
		if need.After(u.tat) {
			u.tat = need
		}
	}
}

// throttled reacts to a 429: the learned rate was too high. Drop it by
// rateBackoff (not below what readings proved), and never again rise above
// nine tenths of it.
func (u *upstream) throttled() {
	if u.rate == 0 {
		return
	}
	u.ceiling = u.rate * 0.9
	u.rate = max(u.rate*rateBackoff, u.proven)
	u.interval = time.Duration(float64(time.Second) / (u.rate * paceMargin))
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
