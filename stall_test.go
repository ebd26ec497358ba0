package retryhttp

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp/internal/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// idleUpstream is an upstream paced at 10 a second with a bound of a
// second, whose one attempt was answered at testStart: nothing in flight.
func idleUpstream() *upstream {
	u := &upstream{start: slowStart{phase: open}, pacer: pacer{capacity: 1}}
	u.bound = time.Second
	u.setPace(testStart, 100*time.Millisecond)
	answerOne(u, testStart)
	return u
}

// answerOne sends one attempt at now and answers it at once, with nothing
// to learn.
func answerOne(u *upstream, now time.Time) {
	p := pass{u: u, at: now}
	u.dispatch(&p)
	p.observe(now, RateLimits{}, 0, false, true)
}

// stalledQueue is an upstream paced at 10 a second with a bound of a
// second, whose one attempt was answered at testStart, and whose pace clock
// a count read while attempts were out pushed 3 s ahead: slots nobody
// holds. Three requests then book behind them, at testStart.
func stalledQueue(t *testing.T) (u *upstream, turns []turn) {
	t.Helper()
	u = idleUpstream()
	now := testStart
	u.tatV = u.slotsAt(now) + 30
	for i := 0; i < 3; i++ {
		tn, w, _ := u.schedule(now, 0)
		require.Nil(t, w)
		turns = append(turns, tn)
	}
	require.Equal(t, testStart.Add(3*time.Second), turns[0].at)
	return u, turns
}

func TestAQueueBookedPastTheBoundGoesAtTheBound(t *testing.T) {
	u, turns := stalledQueue(t)
	now := testStart
	stall := now.Add(u.bound + u.interval)

	at, _, _ := u.recheck(now, &turns[0], 0)
	assert.Equal(t, stall, at, "the first in line wakes at the bound (and an interval) from the last answer, not at its slot 3 s away")
	at, quicker, _ := u.recheck(now, &turns[1], 0)
	assert.Equal(t, testStart.Add(3100*time.Millisecond), at, "the second sleeps until its slot: a stall is no reason to wake the whole queue")
	require.NotNil(t, quicker)

	now = stall
	at, _, _ = u.recheck(now, &turns[1], 0)
	assert.False(t, at.IsZero() || !at.After(now), "only the first in line goes at the stall")
	at, _, _ = u.recheck(now, &turns[0], 0)
	assert.True(t, at.IsZero(), "the first in line goes alone, and its answer decides")
	at, _, _ = u.recheck(now, &turns[1], 0)
	assert.True(t, at.After(now), "alone: the next, rechecking before the first is sent, waits")
	p := pass{u: u, at: now}
	u.dispatch(&p)

	select {
	case <-quicker:
	default:
		t.Fatal("the queue behind it is woken to read its new times")
	}
	at, _, _ = u.recheck(now, &turns[1], 0)
	assert.Equal(t, now.Add(2*u.interval), at, "the queue follows a pace interval behind")
	at, _, _ = u.recheck(now, &turns[2], 0)
	assert.Equal(t, now.Add(3*u.interval), at, "in order, an interval apart")
	next := u.turnAt(now)
	assert.Equal(t, now.Add(4*u.interval), next.at, "a new request books behind the queue, not in its slots")
}

func TestAQueueIsNotHurriedWhileAnAttemptIsOut(t *testing.T) {
	u, turns := stalledQueue(t)
	p := pass{u: u, at: testStart}
	u.dispatch(&p) // its answer will tell
	now := testStart.Add(2 * time.Second)
	at, quicker, _ := u.recheck(now, &turns[0], 0)
	assert.Equal(t, turns[0].at, at, "an attempt out: the first in line waits for its slot")

	now = now.Add(time.Second)
	p.observe(now.Add(-900*time.Millisecond), RateLimits{}, 0, false, true)
	select {
	case <-quicker:
		t.Fatal("its slot is within the bound of the answer: nobody is woken")
	default:
	}
}

func TestTheLastAnswerWakesAQueueBookedPastTheBound(t *testing.T) {
	u, turns := stalledQueue(t)
	p := pass{u: u, at: testStart}
	u.dispatch(&p)
	at, quicker, _ := u.recheck(testStart, &turns[0], 0)
	assert.Equal(t, turns[0].at, at)

	now := testStart.Add(10 * time.Millisecond)
	p.observe(now, RateLimits{}, 0, false, true)
	select {
	case <-quicker:
	default:
		t.Fatal("nothing is in flight now, and the first slot is 3 s away: the queue is woken")
	}
	at, _, _ = u.recheck(now, &turns[0], 0)
	assert.Equal(t, now.Add(u.bound+u.interval), at)
}

func TestTheFirstInLineGivingUpWakesTheNext(t *testing.T) {
	u, turns := stalledQueue(t)
	u.recheck(testStart, &turns[0], 0)
	_, quicker, _ := u.recheck(testStart, &turns[1], 0)
	now := testStart.Add(500 * time.Millisecond)
	u.unbook(now, turns[0])
	select {
	case <-quicker:
	default:
		t.Fatal("the next in line must wake to take the first's place")
	}
	at, _, _ := u.recheck(now, &turns[1], 0)
	assert.Equal(t, testStart.Add(u.bound+u.interval), at, "it now wakes at the bound")
}

func TestAStallCountsFromTheEndOfAHold(t *testing.T) {
	u, turns := stalledQueue(t)
	end := testStart.Add(800 * time.Millisecond)
	u.holdUntil(testStart, end, false)
	at, _, _ := u.recheck(testStart, &turns[0], 0)
	assert.Equal(t, end.Add(u.bound+u.interval), at, "a hold is a wait of its own, bounded on its own")
}

func TestAPaceAtTheBoundKeepsItsOrder(t *testing.T) {
	// One slot a bound apart: the next in line comes due at the bound from
	// the last send, and the one behind it, woken then, does not take its
	// place.
	u := &upstream{start: slowStart{phase: open}, pacer: pacer{capacity: 1}}
	u.bound = time.Second
	now := testStart
	u.setPace(now, time.Second)
	first, _, _ := u.schedule(now, 0)
	at, _, _ := u.recheck(now, &first, 0)
	require.True(t, at.IsZero())
	p := pass{u: u, at: now}
	u.dispatch(&p)
	p.observe(now, RateLimits{}, 0, false, true)
	second, _, _ := u.schedule(now, 0)
	third, _, _ := u.schedule(now, 0)
	require.Equal(t, now.Add(time.Second), second.at)

	now = now.Add(time.Second)
	at, _, _ = u.recheck(now, &third, 0)
	assert.Equal(t, now.Add(time.Second), at, "the third waits for its slot")
	at, _, _ = u.recheck(now, &second, 0)
	assert.True(t, at.IsZero(), "the second goes on its slot")
}

func TestARequestThatGivesUpGivesBackTheSlotItWasLastBooked(t *testing.T) {
	// A hold booked the waiting request again, after it; when it then
	// gives up, the slot it gives back is the new one, so the requests
	// that come next are not pushed out behind it.
	clk := fakeclock.New(testStart)
	rt := New(sequence(step{status: 200}), WithClock(clk))
	u := &upstream{start: slowStart{phase: open}, pacer: pacer{capacity: 1}}
	u.setPace(clk.Now(), 100*time.Millisecond)
	u.tatV = u.slotsAt(clk.Now()) + 3
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.test/v1", nil)
	c := &call{t: rt, req: req, ctx: ctx, policy: &rt.cfg.policy}
	done := make(chan error, 1)
	go func() {
		_, err := c.scheduleOnce(u, clk.Now().Add(time.Minute))
		done <- err
	}()
	require.True(t, clk.WaitForTimers(1, 5*time.Second))

	u.mu.Lock()
	u.holdUntil(clk.Now(), clk.Now().Add(2*time.Second), false)
	u.quicker.fire() // it rechecks, and books again after the hold
	u.mu.Unlock()
	require.Eventually(t, func() bool {
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.tatV > 10
	}, 5*time.Second, time.Millisecond)
	require.True(t, clk.WaitForTimers(1, 5*time.Second))
	cancel()
	require.Error(t, <-done)

	u.mu.Lock()
	defer u.mu.Unlock()
	assert.Less(t, u.tatV, 21.0, "the slot after the hold is given back")
	assert.Empty(t, u.booked.v, "and no longer counted as held")
}

func TestALateWakerKeepsItsPlaceAtAStall(t *testing.T) {
	// The first in line's slot came just before the stall, and it has not
	// taken the lock yet (its timer fired late on a loaded machine); the
	// second, woken at the stall (by an answer or a give-up), must not go
	// ahead of it, as it did when only slots still ahead of now counted as
	// the queue (the fuzzer found it with a slot a float's rounding below
	// now).
	u := idleUpstream()
	now := testStart
	u.tatV = u.slotsAt(now) + 10.5
	first, _, _ := u.schedule(now, 0)
	second, _, _ := u.schedule(now, 0)
	stall := now.Add(u.bound + u.interval)
	require.Equal(t, now.Add(1050*time.Millisecond), first.at)

	now = stall
	at, _, _ := u.recheck(now, &second, 0)
	assert.Equal(t, testStart.Add(1150*time.Millisecond), at, "the first in line is due, not gone: the second waits for its own slot")
	at, _, _ = u.recheck(now, &first, 0)
	assert.True(t, at.IsZero(), "the first, waking late, goes")
}

func TestARequestGoingAtAStallSpendsTheModelsUnit(t *testing.T) {
	// Two requests due, rechecking at the stall (late), with the model of
	// a coarse count holding one unit then: the first goes by the stall
	// rule, and must spend that unit, or the second takes it too and two
	// go where the rule sends one.
	u := idleUpstream()
	now := testStart
	first, _, _ := u.schedule(now, 0)
	second, _, _ := u.schedule(now, 0)
	u.coarse, u.proven, u.pacer.limit = true, 1, 10
	u.latest = reading{at: now, remaining: 1, sent: u.sent}

	onlyTheFirstGoesAtTheStall(t, u, now.Add(u.bound+u.interval), &first, &second,
		"the second, before the first is sent, finds the model's one unit spent")
}

// onlyTheFirstGoesAtTheStall checks that the upstream stalls at now, that
// first goes then, and that second, rechecking before first is sent, waits.
func onlyTheFirstGoesAtTheStall(t *testing.T, u *upstream, now time.Time, first, second *turn, why string) {
	t.Helper()
	require.Equal(t, now, u.stalledAt())
	at, _, _ := u.recheck(now, first, 0)
	require.True(t, at.IsZero(), "the first goes at the stall")
	at, _, _ = u.recheck(now, second, 0)
	assert.True(t, at.After(now), why)
}

func TestAnAttemptThatNeverWentWakesAQueueBookedPastTheBound(t *testing.T) {
	// An attempt let go, then given up before it was sent (it waited for
	// a concurrency slot, say): it was the last one out, and no answer
	// will come to wake the queue. The stall counts from when it was let
	// go, the last time the upstream sent anything as far as it knows.
	u, turns := stalledQueue(t)
	sent := testStart.Add(100 * time.Millisecond)
	p := pass{u: u, at: sent}
	u.dispatch(&p)
	at, quicker, _ := u.recheck(sent, &turns[0], 0)
	require.Equal(t, turns[0].at, at, "an attempt out: the first in line waits for its slot")

	now := sent.Add(100 * time.Millisecond)
	p.abandon(now)
	select {
	case <-quicker:
	default:
		t.Fatal("nothing is out now, and the first slot lies past the bound: the queue is woken")
	}
	at, _, _ = u.recheck(now, &turns[0], 0)
	assert.Equal(t, sent.Add(u.bound+u.interval), at, "the first in line wakes at the bound from the attempt let go")
}

func TestAnAnswerOnAFreeUpstreamWakesAQueueBookedPastTheBound(t *testing.T) {
	// The last attempt out came back when the upstream was free (nothing
	// to learn from it): it is still the last answer, and the queue must
	// not sleep past the bound from it.
	u, turns := stalledQueue(t)
	p := pass{u: u, at: testStart}
	u.dispatch(&p)
	at, quicker, _ := u.recheck(testStart, &turns[0], 0)
	require.Equal(t, turns[0].at, at)

	now := testStart.Add(300 * time.Millisecond)
	p.answeredFree(now)
	select {
	case <-quicker:
	default:
		t.Fatal("nothing is out now, and the first slot lies past the bound: the queue is woken")
	}
	at, _, _ = u.recheck(now, &turns[0], 0)
	assert.Equal(t, now.Add(u.bound+u.interval), at, "the first in line wakes at the bound from that answer")
}

func TestANewProbeStartsTheQueueAfresh(t *testing.T) {
	// A hold cut to the bound ends in a new probe, and the turns booked
	// before it are void: their requests book again behind the probe.
	// They must not book behind the slots they held on the old pace
	// clock, which nobody holds now (with a bound of a second and a pace
	// of 2 a second, 19 requests were booked 10 s out and waited for the
	// stall rule).
	u := &upstream{start: slowStart{phase: open}, pacer: pacer{capacity: 1}}
	u.bound = time.Second
	now := testStart
	u.setPace(now, 500*time.Millisecond)
	var void []turn
	for range 10 {
		tn, _, _ := u.schedule(now, 0)
		void = append(void, tn)
	}
	u.holdUntil(now, now.Add(time.Hour), false)
	now = now.Add(u.bound)
	sent := now
	pp, ws := probeAndQueue(t, u, now, 3)
	for i := range void {
		_, _, again := u.recheck(now, &void[i], 0)
		require.True(t, again, "a turn booked before the new probe is void")
		u.unbook(now, void[i])
	}

	now = now.Add(20 * time.Millisecond)
	pp.observe(now, RateLimits{}, 0, false, true)
	for i, w := range ws {
		tn := u.claim(w)
		assert.Equal(t, sent.Add(time.Duration(i+1)*u.interval), tn.at,
			"waiter %d: the queue books behind the probe, an interval apart", i)
	}
}

func TestARequestGoingAtAStallSpendsTheObservedSpacing(t *testing.T) {
	// As TestARequestGoingAtAStallSpendsTheModelsUnit, on a header-less
	// upstream paced by what it accepts: the one that goes at the stall
	// starts the spacing, so the second waits an interval, as it does
	// with no stall rule (a pair at a bucket of one draws a 429).
	u := &upstream{start: slowStart{phase: open}, pacer: pacer{capacity: 1}}
	u.bound = time.Second
	now := testStart
	u.pacer.observe(now)
	require.Equal(t, paceObserved, u.mode)
	u.wentAt = now
	answerOne(u, now)
	first, _, _ := u.schedule(now, 0)
	second, _, _ := u.schedule(now, 0)
	require.True(t, first.paced && second.paced)

	// Both woke late, at the stall.
	onlyTheFirstGoesAtTheStall(t, u, now.Add(u.bound+u.interval), &first, &second,
		"the second, before the first is sent, waits an interval")
}

// Extra wakes cost every sleeper a recheck under the lock: an answer on a
// healthy queue, or a give-up behind the first in line, must not wake it.
func TestAHealthyQueueIsNotWokenByAnAnswerOrAGiveUpBehindTheFirst(t *testing.T) {
	u := &upstream{start: slowStart{phase: open}, pacer: pacer{capacity: 1}}
	u.bound = time.Second
	now := testStart
	u.setPace(now, 100*time.Millisecond)
	p := pass{u: u, at: now}
	u.dispatch(&p)
	var turns []turn
	for i := 0; i < 3; i++ {
		tn, _, _ := u.schedule(now, 0)
		turns = append(turns, tn)
	}
	_, quicker, _ := u.recheck(now, &turns[2], 0)
	require.NotNil(t, quicker)

	p.observe(now.Add(10*time.Millisecond), RateLimits{}, 0, false, true)
	assertNotFired(t, quicker, "an answer woke a queue whose front is on time")
	u.unbook(now.Add(20*time.Millisecond), turns[1])
	assertNotFired(t, quicker, "a give-up behind the first woke a queue whose front is on time")
}

func TestAGiveUpBehindTheFirstDoesNotWakeAStalledQueue(t *testing.T) {
	u, turns := stalledQueue(t)
	_, quicker, _ := u.recheck(testStart, &turns[2], 0)
	require.NotNil(t, quicker)
	u.unbook(testStart.Add(10*time.Millisecond), turns[1])
	assertNotFired(t, quicker, "a give-up behind the first woke the whole queue: only the first goes at a stall")
}

func assertNotFired(t *testing.T, c <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-c:
		t.Fatal(msg)
	default:
	}
}

// A probe can go later than the reprobe that started its clock: it waits
// out a shorter hold taken meanwhile, or a concurrency slot. The queue
// behind it books an interval after the probe was sent, not after the
// reprobe (a bucket of one refuses the pair).
func TestTheQueueBehindALateProbeBooksAnIntervalAfterIt(t *testing.T) {
	t.Run("a hold taken meanwhile", func(t *testing.T) {
		u := cutToTheBound(t)
		// An attempt out before the cut is refused, Retry-After 0.9 s.
		u.holdUntil(testStart.Add(500*time.Millisecond), testStart.Add(1400*time.Millisecond), false)
		pt, pp, w1 := probeAndOneBehind(t, u, u.hold.reprobeAt)
		require.Equal(t, testStart.Add(1400*time.Millisecond), pt.at, "the probe waits out the 429's hold")

		now := pt.at
		goNow(t, u, now, &pt, &pp)
		theNextGoesAnIntervalAfter(t, u, &pp, w1, now)
	})
	t.Run("a client-side limit waited for after its turn", func(t *testing.T) {
		u := cutToTheBound(t)
		now := u.hold.reprobeAt
		pt, pp, w1 := probeAndOneBehind(t, u, now)
		at, _, _ := u.recheck(now, &pt, 0)
		require.True(t, at.IsZero())

		now = now.Add(400 * time.Millisecond)
		pp.at = now
		u.dispatch(&pp)
		theNextGoesAnIntervalAfter(t, u, &pp, w1, now)
	})
	t.Run("a concurrency slot waited for after it was numbered", func(t *testing.T) {
		// admitSlow numbers the attempt (dispatch), then waits for the
		// breaker, the adaptive limit and WithMaxConcurrency.
		u := cutToTheBound(t)
		now := u.hold.reprobeAt
		pt, pp, w1 := probeAndOneBehind(t, u, now)
		goNow(t, u, now, &pt, &pp)

		now = now.Add(400 * time.Millisecond)
		pp.leftAt(now)
		theNextGoesAnIntervalAfter(t, u, &pp, w1, now)
	})
}

// theNextGoesAnIntervalAfter answers the probe pp, sent at sent, and checks
// that the request queued behind it, w, books an interval after it.
func theNextGoesAnIntervalAfter(t *testing.T, u *upstream, pp *pass, w *waiter, sent time.Time) {
	t.Helper()
	pp.observe(sent.Add(20*time.Millisecond), RateLimits{}, 0, false, true)
	assert.Equal(t, sent.Add(u.interval), u.claim(w).at)
}

// cutToTheBound is an upstream paced at 2 a second with a bound of a
// second, whose hold of an hour was cut to the bound at testStart: a
// probe is due a second later.
func cutToTheBound(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{start: slowStart{phase: open}, pacer: pacer{capacity: 1}}
	u.bound = time.Second
	u.setPace(testStart, 500*time.Millisecond)
	u.holdUntil(testStart, testStart.Add(time.Hour), false)
	require.Equal(t, testStart.Add(time.Second), u.hold.reprobeAt)
	return u
}

// probeAndOneBehind schedules the probe at now and one request that
// queues behind it.
func probeAndOneBehind(t *testing.T, u *upstream, now time.Time) (turn, pass, *waiter) {
	t.Helper()
	pt, w, pp := u.schedule(now, 0)
	require.Nil(t, w)
	require.True(t, pp.probe)
	_, w1, _ := u.schedule(now, 0)
	require.NotNil(t, w1)
	return pt, pp, w1
}

func TestOnlyAProbeBooksASlotAtItsSend(t *testing.T) {
	// A paced turn that goes after its slot (it waited out a hold that
	// ends before its next slot, so it keeps its slot) does not push the
	// pace clock: the next request books on the slot after, not an
	// interval after the late send (each turn would drift the pace).
	u := idleUpstream()
	now := testStart
	tn, w, p := u.schedule(now, 0)
	require.Nil(t, w)
	v := tn.v
	u.holdUntil(now, now.Add(tn.at.Sub(now)+60*time.Millisecond), true) // ends before v+1
	at, _, _ := u.recheck(now, &tn, 0)
	require.Equal(t, u.hold.end, at)
	now = at
	goNow(t, u, now, &tn, &p)
	p.leftAt(now.Add(10 * time.Millisecond))
	assert.Equal(t, v+1, u.book(now).v)
}
