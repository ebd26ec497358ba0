package retryhttp

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp/internal/fakeclock"
)

// giveAt gives each waiter a turn n milliseconds after now, and records
// the places it was asked for.
func giveAt(now time.Time, asked *[]int) func(n int) turn {
	return func(n int) turn {
		*asked = append(*asked, n)
		return turn{at: now.Add(time.Duration(n) * time.Millisecond)}
	}
}

func TestSlowStartPhases(t *testing.T) {
	var s slowStart
	now := testStart
	assert.Equal(t, "cold", s.phase.String(), "an upstream starts cold")
	s.open(giveAt(now, new([]int)))
	assert.Equal(t, "cold", s.phase.String(), "no probe out: nothing to open")

	s.probe(now)
	assert.Equal(t, "probing", s.phase.String())
	assert.False(t, s.overdue(now.Add(slowStartMax)), "the probe's answer is waited for up to slowStartMax")
	assert.True(t, s.overdue(now.Add(slowStartMax+time.Nanosecond)))

	s.open(giveAt(now, new([]int)))
	assert.Equal(t, "open", s.phase.String())
	assert.False(t, s.overdue(now.Add(time.Hour)), "open: no probe to wait for")

	s.cool()
	assert.Equal(t, "cold", s.phase.String(), "cold again, for a new probe")
	s.probe(now.Add(time.Second))
	s.cool()
	assert.Equal(t, "probing", s.phase.String(), "a probe out is not called off")
	assert.Equal(t, "unknown", phase(7).String())
}

func TestSlowStartRampWhileTheProbeIsOut(t *testing.T) {
	var s slowStart
	now := testStart
	s.probe(now)
	want := []time.Duration{1, 2, 2, 3, 3, 3, 3, 4} // in steps, for waiters 1..8
	for i, steps := range want {
		w := s.queue()
		require.Equal(t, i+1, w.n)
		assert.Equal(t, now.Add(steps*slowStartStep), w.at, "waiter %d", w.n)
		assert.Equal(t, w.at, s.rampAt(w.n))
	}
}

func TestSlowStartOpensTheQueueInArrivalOrder(t *testing.T) {
	var s slowStart
	now := testStart
	s.probe(now)
	ws := []*waiter{s.queue(), s.queue(), s.queue()}
	for _, w := range ws {
		assert.False(t, closed(w.released), "queued until the probe answers")
	}
	var asked []int
	s.open(giveAt(now, &asked))
	assert.Equal(t, []int{1, 2, 3}, asked)
	for i, w := range ws {
		assert.True(t, closed(w.released), "the probe's answer wakes the queue")
		assert.Equal(t, now.Add(time.Duration(i+1)*time.Millisecond), s.claim(w).at)
		assert.False(t, w.gone)
	}
	assert.Empty(t, s.waiters)
}

func TestSlowStartWaiterThatGivesUpLeavesTheQueue(t *testing.T) {
	var s slowStart
	now := testStart
	s.probe(now)
	first, quitter, last := s.queue(), s.queue(), s.queue()
	assert.True(t, s.claim(quitter).at.IsZero(), "no turn yet: it leaves the queue")
	assert.True(t, quitter.gone)
	var asked []int
	s.open(giveAt(now, &asked))
	assert.Equal(t, []int{1, 2}, asked, "the places after it move up")
	assert.Equal(t, now.Add(time.Millisecond), s.claim(first).at)
	assert.Equal(t, now.Add(2*time.Millisecond), s.claim(last).at)
	assert.True(t, quitter.turn.at.IsZero(), "nothing is given to a request that left")
}

func TestSlowStartRampAfterTheProbe(t *testing.T) {
	var s slowStart
	now := testStart
	s.probe(now)
	assert.Equal(t, 30*time.Millisecond, s.rampStep(now.Add(20*time.Millisecond)), "a step and a half of the probe's round trip")
	assert.Equal(t, rampStepMin, s.rampStep(now), "never shorter than rampStepMin")
	assert.Equal(t, slowStartStep, s.rampStep(now.Add(time.Second)), "never longer than slowStartStep")

	const step = 30 * time.Millisecond
	for n, steps := range map[int]time.Duration{1: 0, 2: 1, 3: 1, 4: 2, 7: 2, 8: 3} {
		assert.Equal(t, now.Add(steps*step), rampFrom(now, step, n, 2), "request %d", n)
	}
	// Quadrupling, after a doubling first step: the probe and 1 make 2,
	// 2 more make 4, 12 more 16, 48 more 64. (Quadrupled at once, three
	// went with the probe's answer at what may be a bucket of one.)
	for n, steps := range map[int]time.Duration{1: 0, 2: 1, 3: 1, 4: 2, 15: 2, 16: 3, 63: 3, 64: 4} {
		assert.Equal(t, now.Add(steps*step), rampFrom(now, step, n, 4), "request %d", n)
	}
	assert.False(t, s.slowProbe(now.Add(rampSlowRTT-time.Nanosecond)), "a fast probe: the ramp doubles")
	assert.True(t, s.slowProbe(now.Add(rampSlowRTT)))
}

// The ramp after a slow probe lets each step go once everything sent before
// it has answered, and no sooner: a 429 among those answers is seen first.
func TestSlowStartRampGoesOnAnswers(t *testing.T) {
	var r ramp
	now := testStart
	r.begin(now, []int{3, 12, 20}, 1, 0, now.Add(90*time.Millisecond)) // the probe was sent
	assert.True(t, r.due(0), "step 0 goes at once")
	assert.False(t, r.due(1))
	assert.True(t, r.active(now))
	woken := r.stepped.wait()

	r.answered(now, 2, 4) // the probe and one of step 0: 2 answers of the 4 sent
	r.answered(now, 3, 5) // another, and one more was sent meanwhile
	assert.False(t, r.due(1), "step 0 is still out")
	assert.False(t, closed(woken))
	r.answered(now, 4, 5)
	assert.True(t, r.due(1), "everything sent before step 1 has answered")
	assert.True(t, closed(woken), "its requests are woken")
	assert.False(t, r.due(2))

	// Step 2 waits for the 5 sent before step 1 went and step 1's 12.
	r.answered(now, 16, 19)
	assert.False(t, r.due(2))
	r.answered(now, 17, 19)
	assert.True(t, r.due(2))
	assert.True(t, r.active(now), "the last step has gone: its answers are waited for (callers that come late join the ramp)")
	r.answered(now, 38, 39)
	assert.True(t, r.active(now))
	r.answered(now, 39, 39)
	assert.False(t, r.active(now), "the last step has answered: the ramp is over")

	// The requests of a step that leave after others were sent raise
	// what the next step waits for: its answer, and those before it.
	r.begin(now, []int{3, 12, 48}, 1, 0, now.Add(90*time.Millisecond))
	assert.Equal(t, uint64(4), r.stepAt)
	r.leaving(now, 0, 2)
	r.leaving(now, 0, 3)
	r.leaving(now, 0, 6) // two callers sent their next request before it
	r.answered(now, 4, 6)
	assert.False(t, r.due(1), "the last of step 0 has not answered")
	r.answered(now, 6, 6)
	assert.True(t, r.due(1))
	r.leaving(now, 2, 30) // step 2 went at its time, before the answers let it
	assert.True(t, r.due(2))
	r.answered(now, 77, 77) // everything sent up to step 2 and its 48
	assert.False(t, r.active(now), "nothing left to go on answers")

	// A 429 halts the ramp: the steps left keep their times.
	r.begin(now, []int{3, 12, 48}, 1, 0, now.Add(90*time.Millisecond))
	r.halt()
	r.answered(now, 100, 100)
	assert.False(t, r.due(1))
	assert.False(t, r.active(now))

	r.begin(now, nil, 19, 0, now.Add(time.Second))
	assert.False(t, r.active(now), "a ramp without an answer to go on (the probe was overdue) goes on its times only")
	assert.True(t, r.due(0))
	assert.False(t, r.due(1))

	r.begin(now, []int{3, 12}, 1, 0, now.Add(30*time.Millisecond))
	assert.True(t, r.active(now))
	assert.False(t, r.active(now.Add(30*time.Millisecond)), "over once its last step's time has come, answered or not")
}

// gatedUpstream answers each attempt with a header-less 200 when the test
// opens its gate.
type gatedUpstream struct {
	calls atomic.Int32
	gates chan chan struct{}
}

func newGatedUpstream() *gatedUpstream { return &gatedUpstream{gates: make(chan chan struct{}, 64)} }

func (g *gatedUpstream) RoundTrip(*http.Request) (*http.Response, error) {
	g.calls.Add(1)
	gate := make(chan struct{})
	g.gates <- gate
	<-gate
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}, nil
}

// reached waits until n attempts have arrived, failing the test (with
// msgAndArgs) if they do not within 5 s.
func (g *gatedUpstream) reached(t *testing.T, n int32, msgAndArgs ...any) {
	t.Helper()
	require.Eventually(t, func() bool { return g.calls.Load() == n }, 5*time.Second, time.Millisecond, msgAndArgs...)
}

// answer opens the gates of the next n attempts to arrive.
func (g *gatedUpstream) answer(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case gate := <-g.gates:
			close(gate)
		case <-time.After(5 * time.Second):
			t.Fatal("an attempt never came")
		}
	}
}

// burstBehindProbe sends one request, waits for it to reach the upstream,
// then sends n more, which queue behind it; it returns a wait for all.
func burstBehindProbe(t *testing.T, rt http.RoundTripper, up *gatedUpstream, clk *fakeclock.Clock, n int) func() {
	var wg sync.WaitGroup
	send := func() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := rt.RoundTrip(get(t, "https://api.test/x")); err == nil {
				resp.Body.Close()
			}
		}()
	}
	send()
	up.reached(t, 1)
	pending := clk.Pending()
	for range n {
		send()
	}
	require.True(t, clk.WaitForTimers(pending+n, 5*time.Second), "the burst waits behind the probe")
	return wg.Wait
}

// After a probe that took 20 ms, the queue goes on a ramp that doubles
// once, then quadruples: 1 at once, 2 as soon as it has answered, then 12
// as soon as those have, without waiting for the steps' times (30 ms).
func TestSlowStartRampAfterASlowProbeGoesOnAnswers(t *testing.T) {
	clk := fakeclock.New(testStart)
	up := newGatedUpstream()
	rt := New(up, WithClock(clk))
	wait := burstBehindProbe(t, rt, up, clk, 15)
	pending := clk.Pending()

	clk.Advance(20 * time.Millisecond)
	up.answer(t, 1) // the probe
	up.reached(t, 2, "the probe and 1")
	require.True(t, clk.WaitForTimers(pending-1, 5*time.Second), "the 14 others wait for their steps")
	assert.Equal(t, int32(2), up.calls.Load(), "not 3 at once: the server may have room for one")

	up.answer(t, 1) // the clock does not move
	up.reached(t, 4, "step 1 goes on the answer of step 0")
	up.answer(t, 2)
	up.reached(t, 16, "step 2 goes on the answers of step 1")
	up.answer(t, 12)
	wait()
}

// After a fast probe (2 ms), the ramp doubles too, each step on the
// answers before it, or at its time when they are slow (new connections, a
// server slowing under the burst): a header-less server that refuses past
// a small burst sees a few 429s, not a wave.
func TestSlowStartRampAfterAFastProbeGoesOnAnswers(t *testing.T) {
	clk := fakeclock.New(testStart)
	up := newGatedUpstream()
	rt := New(up, WithClock(clk))
	wait := burstBehindProbe(t, rt, up, clk, 7)
	pending := clk.Pending()

	clk.Advance(2 * time.Millisecond)
	up.answer(t, 1) // the probe
	up.reached(t, 2, "the probe and 1")
	require.True(t, clk.WaitForTimers(pending-1, 5*time.Second), "the 6 others wait for their steps")
	assert.Equal(t, int32(2), up.calls.Load())

	up.answer(t, 1) // the clock does not move
	up.reached(t, 4, "step 1 goes on the answer of step 0")
	require.True(t, clk.WaitForTimers(pending-3, 5*time.Second))
	assert.Equal(t, int32(4), up.calls.Load(), "step 2 waits for step 1's answers")
	clk.Advance(30 * time.Millisecond) // they are slow: step 2 goes at its time
	up.reached(t, 8)
	up.answer(t, 6)
	wait()
}

// Callers that start after the probe's answer, while its ramp is under
// way, join it (ramp.join) instead of going at once beside it: one goes
// while there is room in flight, the others take the ramp's next places.
func TestSlowStartLateCallersJoinTheRamp(t *testing.T) {
	clk := fakeclock.New(testStart)
	up := newGatedUpstream()
	rt := New(up, WithClock(clk))
	wait := burstBehindProbe(t, rt, up, clk, 1)
	clk.Advance(2 * time.Millisecond)
	up.answer(t, 1) // the probe: the one queued goes, as step 0
	up.reached(t, 2)

	var wg sync.WaitGroup
	late := func() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := rt.RoundTrip(get(t, "https://api.test/x")); err == nil {
				resp.Body.Close()
			}
		}()
	}
	late()
	require.Eventually(t, func() bool { return up.calls.Load() == 3 }, 5*time.Second, time.Millisecond,
		"room for two in flight (the probe's and step 0's): the first late caller goes")
	for i := range 5 { // one at a time, so each finds the room the last left
		pending := clk.Pending()
		late()
		require.True(t, clk.WaitForTimers(pending+1, 5*time.Second), "late caller %d waits on the ramp", i+2)
	}
	assert.Equal(t, int32(3), up.calls.Load(), "none of the 5 went beside it")
	up.answer(t, 2) // step 0's and the first late caller's
	up.reached(t, 5, "places 2 and 3: step 1")
	up.answer(t, 2)
	up.reached(t, 8, "places 4 to 6: step 2")
	up.answer(t, 3)
	wg.Wait()
	wait()
}

// An attempt sent outside the ramp as a step leaves (a caller whose answer
// let the step go sends its next request) is answered with that step: the
// next step waits for its answer too, so a 429 to it halts the ramp first.
// One sent later, past together, does not hold the ramp up.
func TestSlowStartRampWaitsForAttemptsSentWithAStep(t *testing.T) {
	var r ramp
	now := testStart
	together := 10 * time.Millisecond
	r.begin(now, []int{1, 2, 12, 48}, 1, together, now.Add(120*time.Millisecond)) // the probe was sent
	r.leaving(now, 0, 2)
	r.sending(now, 2)
	r.sending(now, 3) // a caller's next request, sent as step 0 left

	at := now.Add(20 * time.Millisecond)
	r.answered(at, 2, 3) // the probe and step 0's one: 200s
	assert.False(t, r.due(1), "the attempt sent with step 0 has not answered")
	r.answered(at, 3, 3)
	assert.True(t, r.due(1))

	// Step 1 leaves with two callers' next requests: the next step
	// waits for all four answers, and the 429s among them halt it.
	r.leaving(at, 1, 4)
	r.sending(at, 4)
	r.leaving(at, 1, 5)
	r.sending(at, 5)
	r.sending(at, 6)
	r.sending(at, 7)
	at = at.Add(20 * time.Millisecond)
	r.answered(at, 4, 7)
	r.answered(at, 5, 7) // two 200s: step 1's own
	assert.False(t, r.due(2), "two answers sent with step 1 are still out")
	r.halt() // a 429 to one of them
	r.answered(at, 7, 7)
	assert.False(t, r.due(2), "halted: the steps left keep their times")

	// An attempt sent well after its step left is not waited for.
	r.begin(now, []int{1, 2, 12, 48}, 1, together, now.Add(120*time.Millisecond))
	r.leaving(now, 0, 2)
	r.sending(now, 2)
	r.sending(now.Add(together), 3)
	r.answered(now.Add(20*time.Millisecond), 2, 3)
	assert.True(t, r.due(1), "the late attempt is not step 0's")
}

// Callers that come while the ramp is under way join it: each takes the
// next place, after every place given before, and goes with the step it
// falls in (at once if that step was let go with room to spare), in a step
// of its own once the planned ones are full, waiting for the answers
// before it. Without it, callers that started after a fast probe's answer
// went at once, beside the ramp (on loopback, 80 callers starting
// together: 50 sent before the ramp's first answer, all refused by a
// bucket of 4, about 1 run in 10).
func TestSlowStartRampTakesLateCallers(t *testing.T) {
	var r ramp
	now := testStart
	step := 15 * time.Millisecond
	r.begin(now, []int{1, 1}, 1, step/3, now.Add(2*step)) // the probe was sent; 2 queued behind it
	r.joinable(2, step)
	r.leaving(now, 0, 2) // step 0's one goes

	k, at := r.join(now, 2, 2)
	assert.Equal(t, 2, k, "place 3 is step 1's (from 0), planned with one place of its two")
	assert.Equal(t, now.Add(step), at, "it goes on the answers before it, or a step's time if they are slow")
	k, at = r.join(now, 2, 2)
	assert.Equal(t, 3, k, "places 4 to 7 are step 2's, a step of its own")
	assert.Equal(t, now.Add(2*step), at)
	for range 3 {
		r.join(now, 2, 2)
	}
	k, _ = r.join(now, 2, 2)
	assert.Equal(t, 4, k, "place 8 is step 3's")
	assert.Equal(t, []int{1, 2, 4, 1}, r.sizes)

	woken := r.stepped.wait()
	r.answered(now, 2, 2) // the probe and step 0's one
	assert.True(t, r.due(1))
	assert.True(t, closed(woken))
	r.leaving(now, 1, 3)
	r.leaving(now, 1, 4)
	r.answered(now, 4, 4)
	assert.True(t, r.due(2), "the joined step goes on the answers before it")
	r.leaving(now, 2, 5)
	woken = r.stepped.wait()
	r.leaving(now.Add(3*step), 3, 6) // step 3 goes at its time, before step 2 has answered
	assert.True(t, r.due(3))
	assert.True(t, closed(woken), "its other requests are woken to go with it")
	assert.True(t, r.active(now), "the last step's answers are waited for")
	for seq := uint64(7); seq <= 9; seq++ {
		r.leaving(now, 2, seq) // the rest of step 2, let go with step 3
	}
	r.answered(now, 9, 9)
	assert.False(t, r.active(now), "over: later callers go as they come")

	// A place in a step already let go (the last planned one, with fewer
	// than it holds) goes at once, and the ramp waits for its answer too.
	r.begin(now, []int{1, 2, 1}, 1, step/3, now.Add(3*step)) // 4 queued
	r.joinable(2, step)
	r.leaving(now, 0, 2)
	r.answered(now, 2, 2)
	r.leaving(now, 1, 3)
	r.leaving(now, 1, 4)
	r.answered(now, 4, 4)
	assert.True(t, r.due(2))
	k, at = r.join(now, 5, 5) // no room: five out (stragglers of callers)
	assert.Equal(t, 0, k, "place 5 is step 2's (places 4 to 7), let go with one")
	assert.Equal(t, now, at)
	r.answered(now, 5, 5)
	assert.True(t, r.active(now), "the late place's answer is waited for")
	r.answered(now, 6, 6)
	assert.False(t, r.active(now))

	// Room in flight: a caller whose answer came sends its next request
	// at once.
	r.begin(now, []int{1, 2}, 1, step/3, now.Add(2*step)) // 3 queued
	r.joinable(2, step)
	r.leaving(now, 0, 2)
	r.answered(now, 2, 2)
	r.leaving(now, 1, 3)
	r.leaving(now, 1, 4)
	k, _ = r.join(now, 4, 4)
	assert.NotZero(t, k, "four out, the room of the probe and steps 0 and 1: no room")
	r.begin(now, []int{1, 2}, 1, step/3, now.Add(2*step))
	r.joinable(2, step)
	r.leaving(now, 0, 2)
	r.answered(now, 2, 2)
	r.leaving(now, 1, 3)
	r.leaving(now, 1, 4)
	r.answered(now, 3, 4) // step 0's answer and one of step 1's: room
	k, _ = r.join(now, 1, 4)
	assert.Zero(t, k, "room: it goes now")

	// A ramp that was not made joinable (the probe never answered) lets
	// late callers go.
	r.begin(now, []int{1, 2}, 1, step/3, now.Add(2*step))
	k, _ = r.join(now, 10, 10)
	assert.Equal(t, 0, k)
}

// goNow rechecks a turn that must go now and dispatches its attempt.
func goNow(t *testing.T, u *upstream, now time.Time, tn *turn, p *pass) {
	t.Helper()
	at, _, again := u.recheck(now, tn, 0)
	require.False(t, again)
	require.True(t, at.IsZero(), "goes now (told to wait until %v)", at)
	p.at = now
	u.dispatch(p)
}

// probeAndQueue starts slow start: a probe goes, n queue behind it.
func probeAndQueue(t *testing.T, u *upstream, now time.Time, n int) (pass, []*waiter) {
	t.Helper()
	pt, w, pp := u.schedule(now, 0)
	require.Nil(t, w)
	require.True(t, pp.probe)
	goNow(t, u, now, &pt, &pp)
	var ws []*waiter
	for range n {
		_, w, _ := u.schedule(now, 0)
		require.NotNil(t, w)
		ws = append(ws, w)
	}
	return pp, ws
}

// A waiter given its turn by one ramp and claimed after the upstream went
// cold again and opened a new ramp carries a turn of the old ramp:
// upstream.claim stamps it with the current reprobes, so recheck does not
// void it, and its step, long past its time, lets the new ramp's steps go
// at once (before a guard in ramp.next: index out of range, found by
// FuzzPacerProgress). claim stamps only the turn it makes itself.
func TestSlowStartATurnOfAnEarlierRampIsVoid(t *testing.T) {
	u := &upstream{}
	u.bound = time.Second
	now := testStart
	pp, old := probeAndQueue(t, u, now, 5)
	now = now.Add(20 * time.Millisecond) // a slow probe: a quadrupling ramp, sizes [1 2 2]
	pp.observe(now, RateLimits{}, 0, false, true)
	require.Equal(t, []int{1, 2, 2}, u.start.ramp.sizes)
	require.Equal(t, 3, old[4].turn.step, "the fifth waiter is on step 2 (from 0)")

	// A hold cut to the bound (a 429 naming an hour), and its end: a new probe.
	u.holdUntil(now, now.Add(time.Hour), false)
	now = now.Add(u.bound + time.Millisecond)
	pp, fresh := probeAndQueue(t, u, now, 3)
	require.EqualValues(t, 1, u.hold.reprobes)
	now = now.Add(20 * time.Millisecond)
	pp.observe(now, RateLimits{}, 0, false, true)
	require.Equal(t, []int{1, 2}, u.start.ramp.sizes, "the new ramp")
	require.False(t, u.start.ramp.due(1), "step 1 waits for step 0's answer")

	// The old waiter, slow to wake, claims now.
	stale := u.claim(old[4])
	_, _, again := u.recheck(now, &stale, 0)
	assert.True(t, again, "a turn given before the upstream went cold again is void")
	assert.False(t, u.start.ramp.due(1), "the new ramp's step 1 still waits for step 0's answer")
	_ = fresh
}

// An attempt counted as sent (dispatched) and then abandoned (the adaptive
// limit or a slot wait refused it) is counted back as answered, and the
// ramp is told: the step waiting for it goes, not at its time.
func TestSlowStartAnAbandonedAttemptAnswersForTheRamp(t *testing.T) {
	u := &upstream{}
	u.bound = time.Minute
	now := testStart
	pp, ws := probeAndQueue(t, u, now, 2)
	now = now.Add(20 * time.Millisecond)
	pp.observe(now, RateLimits{}, 0, false, true)
	require.Equal(t, []int{1, 1}, u.start.ramp.sizes)
	t1 := u.claim(ws[0])
	p1 := pass{u: u}
	goNow(t, u, now, &t1, &p1)
	p1.abandon(now) // never reached the server
	assert.Equal(t, u.sent, u.replies, "nothing out")
	assert.True(t, u.start.ramp.due(1), "everything sent before step 1 is accounted for: it goes")
}

// A late caller placed on a step far ahead gets a fallback time held to the
// bound, as the planned places are (openLocked).
func TestSlowStartAJoinedTurnWaitsNoLongerThanTheBound(t *testing.T) {
	u := &upstream{}
	u.bound = 500 * time.Millisecond
	now := testStart
	pp, ws := probeAndQueue(t, u, now, 1)
	now = now.Add(150 * time.Millisecond) // slow: step 200 ms, factor 4
	pp.observe(now, RateLimits{}, 0, false, true)
	t1 := u.claim(ws[0])
	p1 := pass{u: u}
	goNow(t, u, now, &t1, &p1)
	tj, _, pj := u.schedule(now, 0) // room for 2 out: goes
	require.Zero(t, tj.step)
	goNow(t, u, now, &tj, &pj)
	var worst time.Duration
	for range 30 {
		tn, w, _ := u.schedule(now, 0)
		require.Nil(t, w)
		worst = max(worst, tn.at.Sub(now))
	}
	assert.LessOrEqual(t, worst, u.bound, "a joined turn waits no longer than the bound")
}

// The same turn claimed while the new probe is still out does not go
// beside it.
func TestSlowStartATurnOfAnEarlierRampDoesNotGoBesideTheProbe(t *testing.T) {
	u := &upstream{}
	u.bound = time.Second
	now := testStart
	pp, old := probeAndQueue(t, u, now, 5)
	now = now.Add(20 * time.Millisecond)
	pp.observe(now, RateLimits{}, 0, false, true)
	u.holdUntil(now, now.Add(time.Hour), false)
	now = now.Add(u.bound + time.Millisecond)
	probeAndQueue(t, u, now, 3) // the new probe is out
	require.Equal(t, probing, u.start.phase)
	stale := u.claim(old[4])
	at, _, again := u.recheck(now, &stale, 0)
	assert.True(t, again || !at.IsZero(), "it does not go while the new probe is out")
}
