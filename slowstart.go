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
//     behind the probe go on a ramp, so that a server at its limit answers
//     the first few with a 429 (or a 503) before the rest are sent: after
//     a fast probe, doubling (1, 2, 4, 8, ...); after a slow one (see
//     slowProbe), doubling once then quadrupling (1, 2, 12, 48, ...);
//     each step as soon as what was sent before it has answered (see
//     ramp), or at its time. Requests that come while the ramp is under
//     way join it (see ramp.join); later ones go at once, as if this
//     stage did not exist;
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
	// rampSlowRTT is the probe's round trip from which the ramp after it
	// quadruples the attempts in flight per step, and goes on answers (see
	// slowProbe).
	rampSlowRTT = 10 * time.Millisecond
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
	ramp       ramp      // the ramp after the probe's answer, on answers
}

// ramp is the ramp the queue goes on after a probe's answer that neither
// paces nor holds the upstream. Each step goes once
// as many answers are in as attempts were sent up to the last request of
// the step before it, so that a 429 among them is seen first, or at its
// time (see rampFrom), whichever comes first. A 429 halts it: the steps
// still to go keep their times, and the pace or hold the 429 set.
//
// Attempts sent outside the ramp while a step leaves (a caller whose
// answer let the step go sends its next request) go with that step: the
// next step waits for their answers too. Counted by their number alone,
// two 200s among a step's answers let the next step go before the 429s
// that came back at the same moment were read (a header-less bucket of 4
// answering in 20 ms: 8 more sent into its refusals, 15-19 of 240 requests
// seeing a 429 now and then under -race).
type ramp struct {
	sizes    []int         // requests in each step, from 0
	placed   int           // requests given a place on it (not the probe)
	factor   int           // how it grows per step (see rampSteps)
	step     time.Duration // how long a step waits for answers at most
	gone     int           // the last step let go
	stepAt   uint64        // the count of answers (upstream.replies) that lets the next step go; 0: none to come
	wentAt   time.Time     // when the last step was let go
	together time.Duration // attempts sent within this of wentAt go with the step
	end      time.Time     // the time of the last step: the ramp is over by then
	stepped  broadcast     // fired when a step is let go
}

// begin starts a ramp of steps of the given sizes (none: no ramp on
// answers) at now, when sent attempts have been sent so far: step 0 goes at
// once, attempts sent within together of a step's start go with it, and the
// ramp is over by end.
func (r *ramp) begin(now time.Time, sizes []int, sent uint64, together time.Duration, end time.Time) {
	r.sizes, r.gone, r.stepAt, r.together, r.end = sizes, 0, 0, together, end
	r.factor, r.step, r.placed = 0, 0, 0
	for _, n := range sizes {
		r.placed += n
	}
	r.next(now, sent)
}

// joinable lets requests that arrive while the ramp is under way join it
// (see join), on steps growing by factor, each waiting for the answers at
// most step after the one before.
func (r *ramp) joinable(factor int, step time.Duration) {
	r.factor, r.step = factor, step
}

// next sets the count of answers the step after the last one, let go at
// now, waits for: what was sent so far and that step's requests, at least
// (see leaving and sending). After the last step it is the count that
// ends the ramp (see answered), unless a request joins meanwhile.
func (r *ramp) next(now time.Time, sent uint64) {
	r.stepAt, r.wentAt = 0, now
	if r.gone < len(r.sizes) { // a turn of a ramp before this one may name a step it does not have
		r.stepAt = sent + uint64(r.sizes[r.gone])
	}
}

// join gives a request that arrives at now while the ramp is under way (a
// caller that started late, or one whose answer came and sends its next
// request) its turn on the ramp, with inFlight attempts out and sent sent
// so far: it returns the step (from 1) it waits for and when that goes at
// the latest, or step 0 to go now.
//
// It goes now when the steps let go so far have room in flight (fewer are
// out than their places), as an acknowledgement lets TCP's slow start
// send: a caller's next request goes as its answer came. Else it takes the
// next place, after every place given before, and goes with the step that
// place falls in: at once if that step was let go with places to spare
// (the last one planned), else when it is let go, in a step of its own
// once the planned ones are full.
//
// Attempts count as out once sent, so callers that come at the same
// moment may all find the same room. Counting those let go as out until
// sent made it worse: more callers took places, the steps to come swelled
// with them and went as bursts (callers that think 100 us over a bucket of
// 4: 18 of 240 saw a 429, 7 otherwise). A caller let go for room may also
// go before one placed earlier in a step still to come: for the few round
// trips the ramp lasts, filling the room beats the order of arrival; held
// to it, the steps to come swelled the same way (6.5 to 8% of attempts
// refused by a capacity of 50).
//
// Without it, callers that started after the probe's answer went at once,
// beside the ramp: on loopback, 80 callers starting together over a few
// milliseconds, a fast probe answered in 0.5 ms, and 50 of them were sent
// before the first answer of the ramp came back, 10 ms later, every one
// refused by a bucket of 4 (about 1 run in 10).
func (r *ramp) join(now time.Time, inFlight, sent uint64) (step int, at time.Time) {
	if r.factor == 0 || inFlight < uint64(r.room()) {
		return 0, now // not joinable, or room in flight
	}
	r.placed++
	k := rampSteps(r.placed, r.factor)
	if k <= r.gone {
		r.stepAt = max(r.stepAt, sent+1) // the step waits for it too
		return 0, now
	}
	for len(r.sizes) <= k {
		r.sizes = append(r.sizes, 0)
	}
	r.sizes[k]++
	at = r.wentAt.Add(r.step * time.Duration(k-r.gone))
	r.end = later(r.end, at)
	return k + 1, at
}

// room is how many attempts the steps let go so far may have out at once:
// the probe and their places. (Without the probe, a step's room is taken
// by what it sent itself until its answers come: the callers' next
// requests took places in the steps to come instead, which then went as
// bursts, 18 of 240 requests seeing a 429 from a bucket of 4 where 4 did.)
func (r *ramp) room() int {
	n := 1
	for k := 0; k <= r.gone && k < len(r.sizes); k++ {
		n += r.sizes[k]
	}
	return n
}

// leaving is told that a request of step k goes at now, to be the seq-th
// attempt sent: the next step waits for its answer and for those of every
// attempt sent before it. A step that goes at its time, before the answers
// let it, is let go as if they had.
func (r *ramp) leaving(now time.Time, k int, seq uint64) {
	switch {
	case r.stepAt == 0:
	case k == r.gone:
		r.stepAt = max(r.stepAt, seq)
	case k > r.gone:
		r.gone = k
		r.next(now, seq-1)
		r.stepped.fire() // the rest of the step, and any before it, go too
	}
}

// sending is told that an attempt, on the ramp or not, goes at now as the
// seq-th sent: one that leaves with the last step (within together of it)
// is answered with it, and the next step waits for its answer too.
func (r *ramp) sending(now time.Time, seq uint64) {
	if r.stepAt > 0 && now.Sub(r.wentAt) < r.together {
		r.stepAt = max(r.stepAt, seq)
	}
}

// halt stops the ramp from going on answers: a 429 came, and the steps
// still to go keep their times (and the pace or hold the 429 set).
func (r *ramp) halt() { r.stepAt = 0 }

// due reports whether step k (from 0) may go.
func (r *ramp) due(k int) bool { return k <= r.gone }

// active reports whether the ramp still has a step to go at now: it waits
// for answers, which must be counted (see upstream.schedule).
func (r *ramp) active(now time.Time) bool {
	return r.stepAt > 0 && now.Before(r.end.Add(r.step))
}

// answered is told, at now, the upstream's count of answers and of
// attempts sent: when the answers reach the next step's count, that step
// goes (its requests are woken), and the one after it waits for the answers
// to what has been sent until then and to it.
func (r *ramp) answered(now time.Time, replies, sent uint64) {
	if r.stepAt == 0 || replies < r.stepAt {
		return
	}
	if r.gone+1 >= len(r.sizes) {
		r.stepAt = 0 // the last step has answered: the ramp is over
		return
	}
	r.gone++
	r.next(now, sent)
	r.stepped.fire()
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
// answer, in at now, neither paces nor holds the upstream: a step and a
// half of the probe's round trip, so a step's answers are in before the
// next goes (the ramp after a fast probe waits for them longer, see
// upstream.openLocked).
func (s *slowStart) rampStep(now time.Time) time.Duration {
	return min(max(now.Sub(s.probeStart)*3/2, rampStepMin), slowStartStep)
}

// slowProbe reports whether the probe, answered at now, took rampSlowRTT
// or longer: the ramp after it then quadruples the attempts in flight per
// step instead of doubling them. The care of a doubling ramp is free on a
// fast upstream (its steps take a few milliseconds) and costly on a slow
// one: 50 slots of 20 ms behind 150 callers were idle for a quarter of a
// 0.6 s run while a doubling ramp reached them. The price is a larger last
// step: an upstream as slow that refuses with 429 past a burst of b may
// see up to 3b of them at once instead of b (but one for a bucket of one:
// the first step only doubles, see rampSteps).
func (s *slowStart) slowProbe(now time.Time) bool {
	return now.Sub(s.probeStart) >= rampSlowRTT
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

// rampFrom is when the n-th request goes at the latest on a ramp of step
// from now growing by factor: with 2, 1 at once, 2 more after one step, 4
// after two...; with 4, 1 at once, 2 more after one step, 12 after two, 48
// after three...
func rampFrom(now time.Time, step time.Duration, n, factor int) time.Time {
	return now.Add(step * time.Duration(rampSteps(n, factor)))
}

// rampSteps is the step (from 0) of the n-th request (from 1) on a ramp
// growing by factor: the probe and the requests before step k number
// factor^k, except that a ramp growing faster than doubling doubles first:
// the probe and one, then factor, factor^2...
//
// The probe's answer named no limit, and a server that answered one request
// may have room for no more than one (a bucket of one that states nothing
// until it refuses). Quadrupled at once, three went together at such a
// bucket and all were refused (a header-less bucket of one answering in 20
// ms: 5-8 of its 60 requests saw a 429); doubled first, one is, and the
// ramp halts on it. The steps after it are the quadrupling ramp's, so a
// larger upstream's step overshoots no more than before (merging the first
// two steps sent 14 at once at a bucket of 4, and 15-20 of its 240 requests
// saw a 429); it pays one more round trip to fill.
func rampSteps(n, factor int) int {
	k := 0
	if factor > 2 && n >= 2 {
		k++ // the doubling first step
	}
	for m := factor; m <= n; m *= factor {
		k++
	}
	return k
}

// doublings is how many times the ramp doubled before the n-th request's
// turn: 0 for the first, 1 for the next two, 2 for the four after...
func doublings(n int) int {
	return int(math.Floor(math.Log2(float64(n))))
}
