package retryhttp

import (
	"math"
	"time"
)

// Slow start: the admit stage's first per-upstream state, before the holds
// (holds.go) and the pacer (pacer.go).
//
// Each upstream starts cold. Its first request goes alone as a probe; the
// requests that arrive while it is out wait for its answer, and are let go on
// a doubling ramp (1, then 2, 4, 8, ... every slowStartStep) in case the answer
// is slow. The probe's answer decides what follows:
//
//   - no rate-limit headers: the upstream is open; the requests queued
//     behind the probe go on a ramp growing fourfold per round trip of the
//     probe (3, then 12, 48, 192, ...), so a server that is at its limit
//     answers the first few with a 429 or a 503 before the rest are sent;
//     later requests go at once, as if this stage did not exist (the
//     adaptive concurrency limit, adaptive.go, takes over from there);
//   - rate-limit headers: requests are paced (see pacer).
//
// A probe that takes longer than slowStartMax tells nothing in time: slow
// start opens without its answer. A hold cut to the bound (see holds) makes
// an open upstream cold again, for a new probe.
const (
	// slowStartStep is the step of the ramp while the probe is out.
	slowStartStep = 200 * time.Millisecond
	// slowStartMax is the longest slow start waits for the probe's answer.
	slowStartMax = 2 * time.Second
	// rampStepMin is the shortest step of the ramp after a probe that
	// brought no rate-limit headers.
	rampStepMin = time.Millisecond
)

// phase is the slow start's state.
type phase int

const (
	cold phase = iota
	probing
	open
)

func (p phase) String() string {
	switch p {
	case cold:
		return "cold"
	case probing:
		return "probing"
	case open:
		return "open"
	}
	return "unknown"
}

// slowStart is the slow start of one upstream: its phase, and while the
// probe is out, the requests queued behind it. Time is passed in, so it runs
// in simulated time in tests. It is not safe for concurrent use: the
// upstream's lock guards it.
type slowStart struct {
	phase      phase
	probeStart time.Time // when the probe was let go
	waiters    []*waiter // requests queued behind the probe, in arrival order
	released   broadcast // fired when the probe's answer is in
}

// waiter is a request queued behind the probe.
type waiter struct {
	n        int       // its place in the queue, from 1
	at       time.Time // when its ramp lets it go if the probe has not answered
	released <-chan struct{}
	gone     bool // went on its ramp, or gave up
	turn     turn // its start, assigned when the probe's answer came in
}

// probe lets the probe go at now: the request that found the upstream cold
// goes alone, and the ones after it queue.
func (s *slowStart) probe(now time.Time) {
	s.phase, s.probeStart = probing, now
}

// queue puts a request behind the probe, with the time its ramp lets it go
// if the probe has not answered by then.
func (s *slowStart) queue() *waiter {
	w := &waiter{n: len(s.waiters) + 1, released: s.released.wait()}
	w.at = s.rampAt(w.n)
	s.waiters = append(s.waiters, w)
	return w
}

// rampAt is when the n-th request queued behind the probe goes if the probe
// has not answered: 1 after one step, 2 more after two, 4 after three...
func (s *slowStart) rampAt(n int) time.Time {
	return s.probeStart.Add(time.Duration(1+doublings(n)) * slowStartStep)
}

// overdue reports that the probe has been out too long at now to wait for
// its answer: slow start opens without it.
func (s *slowStart) overdue(now time.Time) bool {
	return s.phase == probing && now.Sub(s.probeStart) > slowStartMax
}

// claim settles a waiter whose ramp time came, or who gave up: it returns
// the turn the probe's answer assigned meanwhile, or leaves the queue and
// returns a zero turn.
func (s *slowStart) claim(w *waiter) turn {
	if w.turn.at.IsZero() {
		w.gone = true
	}
	return w.turn
}

// rampStep is the step of the ramp the queue goes on when the probe's
// answer, in at now, neither paces nor holds the upstream: the probe's
// round trip, so a step's answers come in as the next goes.
func (s *slowStart) rampStep(now time.Time) time.Duration {
	return min(max(now.Sub(s.probeStart), rampStepMin), slowStartStep)
}

// open ends slow start, if a probe is out: each request still in the queue,
// in arrival order, is given the turn give returns for its place n (from 1,
// among those still queued), and all are woken.
func (s *slowStart) open(give func(n int) turn) {
	if s.phase != probing {
		return
	}
	s.phase = open
	n := 0
	for _, w := range s.waiters {
		if w.gone {
			continue
		}
		n++
		w.turn = give(n)
	}
	s.released.fire()
	s.waiters = nil
}

// cool makes an open upstream cold again: the next request is a new probe.
func (s *slowStart) cool() {
	if s.phase == open {
		s.phase = cold
	}
}

// rampFrom is when the n-th request goes on the ramp after the probe's
// answer, step apart: the first 3 at once, 12 more after one step, 48 after
// two, ... (the requests let go grow fourfold per step, with the ones whose
// answers are in going again). A capacity of C is reached in about
// log4(C) round trips instead of log2(C), and each step's answers are in
// as the next goes: the adaptive concurrency limit learns from the
// refusals of one step before the next is sent.
func rampFrom(now time.Time, step time.Duration, n int) time.Time {
	return now.Add(step * time.Duration(quadruplings(n)))
}

// quadruplings is how many times the ramp after the probe grew fourfold
// before the n-th request's turn: 0 for the first three, 1 for the next 12,
// 2 for the 48 after...
func quadruplings(n int) int {
	d := 0
	for n >= 4 {
		n /= 4
		d++
	}
	return d
}

// doublings is how many times the ramp doubled before the n-th request's
// turn: 0 for the first, 1 for the next two, 2 for the four after...
func doublings(n int) int {
	return int(math.Floor(math.Log2(float64(n))))
}
