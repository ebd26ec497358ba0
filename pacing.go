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
	// not contradict it.
	rateCreep = 1.02
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
	if rate := impliedRate(now, l); rate > 0 {
		// Each reading is an upper bound (see impliedRate), tight when the
		// bucket was full before the request. Keep the lowest, but let it
		// creep up so a raised limit is found again.
		if u.rate == 0 || rate < u.rate*rateCreep {
			u.rate = rate
		} else {
			u.rate *= rateCreep
		}
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

// impliedRate is the request rate (per second) the headers allow: the policy
// quota over its window when stated (IETF), the refill rate of a token
// bucket (OpenAI, Anthropic: reset is when the bucket is full again), or,
// for a fixed window running low, what remains spread over the time left.
func impliedRate(now time.Time, l RateLimits) float64 {
	q := l.Requests
	if l.Window > 0 && q.HasLimit && q.Limit > 0 {
		return float64(q.Limit) / l.Window.Seconds()
	}
	left := q.Reset.Sub(now).Seconds()
	if left <= 0 || !q.HasRemaining {
		return 0
	}
	if l.Replenishing && q.HasLimit && q.Limit > q.Remaining {
		// Remaining is rounded down, so at most Limit-Remaining units are
		// missing: this is an upper bound on the refill rate, exact when the
		// bucket was full before the request.
		return float64(q.Limit-q.Remaining) / left
	}
	if !l.Replenishing && q.HasLimit && q.Remaining*4 < q.Limit && q.Remaining > 0 {
		return float64(q.Remaining) / left
	}
	return 0
}
