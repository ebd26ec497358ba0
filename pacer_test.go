package retryhttp

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAnswersToSendsBeforeThePaceDoNotCutIt(t *testing.T) {
	// Slow start sent five before the first reading set the pace; the
	// bucket those five emptied says nothing of the pace that follows.
	coarse := func(remaining int64, at time.Time) RateLimits {
		return RateLimits{Replenishing: true, Requests: Quota{Limit: 10, Remaining: remaining, HasLimit: true, HasRemaining: true,
			Reset: at.Add(time.Second).Truncate(time.Second), Coarse: true}}
	}
	p := &pacer{sent: 5}
	now := testStart
	p.learn(now, coarse(6, now), 1)
	require.Equal(t, paceMeasured, p.mode)
	rate := p.rate
	p.learn(now.Add(5*time.Millisecond), coarse(0, now), 5)
	assert.Zero(t, p.ceiling, "no cut: the burst before the pace emptied the bucket")
	assert.GreaterOrEqual(t, p.rate, rate)

	p.sent = 8 // three sent on the pace
	p.learn(now.Add(10*time.Millisecond), coarse(0, now), 8)
	assert.Positive(t, p.ceiling, "the pace's own sends emptying it: cut")
}

// windowReading is GitHub-style X-RateLimit-* state over a fixed window of
// a second (limit a second), reset at the next whole second.
func windowReading(limit, remaining int64, now time.Time) RateLimits {
	return RateLimits{Requests: Quota{Limit: limit, Remaining: remaining, HasLimit: true, HasRemaining: true,
		Reset: now.Truncate(time.Second).Add(time.Second), Coarse: true}}
}

// drainWindow answers a window of 40 counting down to empty, one attempt
// every step from now, and returns the time after the last.
func drainWindow(p *pacer, now time.Time, step time.Duration) time.Time {
	for left := int64(39); left >= 0; left-- {
		answer(p, now, false, windowReading(40, left, now))
		now = now.Add(step)
	}
	return now
}

// dryWindow drains a window of 40 in a burst (an attempt every 5 ms from
// now), then three probes a unit or more apart find it still empty; it
// returns the time of the last.
func dryWindow(p *pacer, now time.Time) time.Time {
	now = drainWindow(p, now, 5*time.Millisecond)
	for i := 0; i < 3; i++ {
		now = now.Add(max(p.unitAfter(), 10*time.Millisecond))
		answer(p, now, true, windowReading(40, 0, now))
	}
	return now
}

// answer tells p of one more attempt sent and answered at now, as the
// upstream does (learnLocked: a coarse reading feeds the window's edge
// first).
func answer(p *pacer, now time.Time, refused bool, l RateLimits) {
	p.sent++
	p.answered(now, refused)
	if coarseBucket(l) {
		p.edge.see(now, now, l.Requests.Remaining, l.Requests.Limit)
	}
	p.learn(now, l, p.sent)
}

func TestAFixedWindowIsToldByItsLumpAndWaitedOutToItsEnd(t *testing.T) {
	p := &pacer{}
	now := testStart.Add(10 * time.Millisecond)
	now = dryWindow(p, now)
	require.False(t, p.lumpy, "no lump seen yet")
	held := p.unitAfter()
	assert.Greater(t, held, 10*time.Millisecond, "each refusal in a row doubles the wait for a unit")

	now = testStart.Add(time.Second + 5*time.Millisecond) // the window turned: all of it at once
	answer(p, now, false, windowReading(40, 39, now))
	require.True(t, p.lumpy, "a quota that stayed dry, then came back whole, is a window")
	assert.Zero(t, p.unitAfter(), "no unit comes back before a window's end")

	for left := int64(38); left >= 0; left-- {
		now = now.Add(time.Millisecond)
		answer(p, now, false, windowReading(40, left, now))
	}
	end := testStart.Add(2 * time.Second)
	wait := p.shortfall(now, 0)
	assert.Positive(t, wait, "used up: the next waits")
	assert.LessOrEqual(t, wait, end.Sub(now), "for the window's end, or a probe of it before (see windowEdge)")
	p.sent++ // one more went before the count came back
	after := end.Add(time.Millisecond)
	assert.Zero(t, p.shortfall(after, 1), "past its end the window is full again")
}

func TestABucketBehindTheSameHeadersIsNotTakenForAWindow(t *testing.T) {
	// A bucket of 40 refilling at 100 a second: empty, refused once, then
	// its count comes back a few units at a time.
	p := &pacer{}
	now := testStart.Add(10 * time.Millisecond)
	now = drainWindow(p, now, time.Millisecond)
	answer(p, now, true, windowReading(40, 0, now))
	for i := 0; i < 30; i++ {
		now = now.Add(20 * time.Millisecond) // two units refilled, one taken
		answer(p, now, false, windowReading(40, int64(i+1), now))
	}
	assert.False(t, p.lumpy)
	assert.Positive(t, p.unitAfter(), "a bucket's next unit comes at its rate")
}

func TestACeilingLeftByOne429LiftsWhileQuotaGoesUnused(t *testing.T) {
	// A burst overran the quota once; since then the pace holds requests
	// back with the count never below half: the ceiling that one 429 left
	// rises, by rateRecover a second.
	p := &pacer{}
	now := testStart.Add(10 * time.Millisecond)
	answer(p, now, false, windowReading(100, 99, now))
	answer(p, now, true, windowReading(100, 0, now))
	require.Positive(t, p.ceiling)
	first := p.ceiling
	for i := 0; i < 40; i++ {
		now = now.Add(100 * time.Millisecond)
		for j := 0; j < 5; j++ {
			p.book(now) // requests wait on the pace
		}
		answer(p, now, false, windowReading(100, 60, now))
	}
	assert.Greater(t, p.ceiling, 1.3*first, "four seconds without a 429 and quota to spare")
	assert.Greater(t, p.rate, first)
}

func TestAWindowsLastUnitIsLetGoOnceBeforeItIsSent(t *testing.T) {
	// Two requests checked in the same instant, before either is sent,
	// must not both take the window's last unit.
	p := &pacer{}
	now := testStart.Add(10 * time.Millisecond)
	now = dryWindow(p, now)
	now = testStart.Add(time.Second + 5*time.Millisecond)
	for left := int64(39); left >= 1; left-- { // the new window, all but one used
		answer(p, now, false, windowReading(40, left, now))
		now = now.Add(time.Millisecond)
	}
	require.True(t, p.lumpy)

	assert.Zero(t, p.shortfall(now, 0), "the last unit goes")
	assert.Positive(t, p.shortfall(now, 0), "and only once, though it is not sent yet")
	p.sentOne()
	assert.Positive(t, p.shortfall(now, 1), "sent, it still counts")
}

// refuse tells p of an attempt sent (numbered: sent on the pace) and
// refused at now, with no rate-limit headers.
func refuse(p *pacer, now time.Time) {
	p.sent++
	p.answered(now, true)
	p.throttled(now, false, 0, false, p.sent, time.Time{})
}

// serve tells p of an attempt sent on the pace and served at now, as
// upstream.observe does.
func serve(p *pacer, now time.Time) {
	p.sent++
	p.servedSent(p.sent, now)
	p.answered(now, false)
}

// climbing returns an observed pace begun at testStart, at rate, with
// twenty requests waiting on it (so it may climb), and the time.
func climbing(rate float64) (*pacer, time.Time) {
	p := &pacer{}
	p.observe(testStart)
	p.rate = rate
	p.setPace(testStart, p.paceOf(rate))
	p.tatV = p.slotsAt(testStart) + 20
	return p, testStart
}

func TestTheFirstClimbThatOvershootsGoesBackAStep(t *testing.T) {
	// No headers: observing from 2 a second, the climb doubles while
	// requests wait (4, then 8); 8 draws a 429. A bucket of one at 5 a
	// second refuses anything above it, so a cut to 70% (5.6) drew a
	// second 429 at once: the step before, 4, held without one.
	p, now := climbing(2)
	for p.rate < 8 {
		now = now.Add(growEvery)
		serve(p, now)
	}
	require.Equal(t, 8.0, p.rate)
	now = now.Add(10 * time.Millisecond)
	refuse(p, now)
	assert.Equal(t, 4.0, p.rate, "back to the step that held")
}

func TestTheFirstClimbGoesBackAStepFromTheRateThe429WasSentAt(t *testing.T) {
	// The climb doubles to 8, an attempt goes on 8, and the climb doubles
	// to 16 while it is out; its 429 comes back at 16. 8 drew it, so the
	// pace goes back to 4, the step that held, not to 8 (a bucket of one
	// at 5 a second: two more 429s, at 8 and at 5.6, before the cuts
	// brought it under 5).
	p, now := climbing(2)
	for p.rate < 8 {
		now = now.Add(growEvery)
		serve(p, now)
	}
	p.sent++ // sent on 8
	out := p.sent
	now = now.Add(growEvery)
	serve(p, now) // a success lets the climb double while it is out
	require.Equal(t, 16.0, p.rate)
	now = now.Add(10 * time.Millisecond)
	p.answered(now, true)
	p.throttled(now, false, 0, false, out, time.Time{})
	assert.Equal(t, 4.0, p.rate, "back to the step before the one it was sent on")

	// Sent before the climb's first step remembered: never below where
	// the climb began.
	p = &pacer{}
	p.observe(now)
	p.rate, p.since0 = 2, 2
	p.setPace(now, p.paceOf(2))
	p.tatV = p.slotsAt(now) + 20
	early := p.sent + 1
	p.sent++
	for p.rate < 8 {
		now = now.Add(growEvery)
		serve(p, now)
	}
	now = now.Add(10 * time.Millisecond)
	p.answered(now, true)
	p.throttled(now, false, 0, false, early, time.Time{})
	assert.Equal(t, 2.0, p.rate, "sent at the start: back to the start, no lower")
}

func TestTheFirstClimbDoublesOnceItsStepHasBeenTried(t *testing.T) {
	// At 8 a second since an attempt went on 4, 105 ms ago: the next goes
	// in 20 ms, the first on 8. Doubled now, on time alone, 16 would be
	// in force when 8's answer came (a 429 from a bucket of one at 5 a
	// second), so the climb waits for that answer.
	p, now := climbing(4)
	now = now.Add(growEvery)
	p.wentAt = now
	serve(p, now)
	require.Equal(t, 8.0, p.rate, "4 was tried and served")
	now = now.Add(growEvery + 5*time.Millisecond)
	p.grow(now)
	assert.Equal(t, 8.0, p.rate, "8 not tried yet, its first attempt due in 20 ms")
	p.sent++ // the first attempt on 8
	now = now.Add(growEvery)
	p.grow(now)
	assert.Equal(t, 8.0, p.rate, "tried, not answered")
	p.servedSent(p.sent, now)
	p.answered(now, false)
	assert.Equal(t, 16.0, p.rate, "served: 8 held")

	// A pace that has sent nothing (poisoned: its slots are seconds
	// away) climbs by time, or it would never be tried.
	q := &pacer{}
	q.observe(testStart)
	q.rate = 0.05
	q.setPace(testStart, q.paceOf(0.05))
	q.tatV = q.slotsAt(testStart) + 5
	q.grow(testStart.Add(growEvery))
	assert.Equal(t, 0.1, q.rate)
}

func TestAStepsOwnServedAnswerLetsTheClimbDouble(t *testing.T) {
	// The answer that proves the step (an attempt sent on it, served) is
	// counted before the climb looks: the same answer doubles it.
	u := &upstream{start: slowStart{phase: open}}
	now := testStart
	u.pacer.observe(now)
	u.rate = 16
	u.setPace(now, u.paceOf(16))
	u.tatV = u.slotsAt(now) + 20 // twenty wait on the pace
	now = now.Add(growEvery)
	u.wentAt = now // its next attempt 62.5 ms away: it climbs on answers, not by time
	p := pass{u: u, at: now}
	u.dispatch(&p)
	now = now.Add(10 * time.Millisecond)
	p.observe(now, RateLimits{}, 0, false, true)
	assert.Equal(t, 32.0, u.rate, "served on the step: it held")
}

func TestAStepTooSlowToBeTriedInTimeClimbsByTime(t *testing.T) {
	// At 2 a second, an attempt went 100 ms ago: the next is 400 ms away,
	// more than a growEvery, so the step cannot be tried before it would
	// double, and it doubles by time.
	p, now := climbing(2)
	p.wentAt = now
	p.grow(now.Add(growEvery))
	assert.Equal(t, 4.0, p.rate)
}

func TestClimbStepsTellTheRateAnAttemptWentOn(t *testing.T) {
	c := climbSteps{base: 2}
	c.add(5, 8) // attempts after the 5th went on 8
	assert.Equal(t, 4.0, c.rateOf(5, 4), "the 5th went before the step: on the start")
	assert.Equal(t, 8.0, c.rateOf(6, 4))
	assert.Equal(t, uint64(5), c.newest())
	for k := 0; k < 10; k++ { // 16, 32, ... 8192, from the 10th on; the ring keeps the last 8, from 64 on
		c.add(uint64(10+k), float64(int(16)<<k))
	}
	assert.Equal(t, 8192.0, c.rateOf(20, 4))
	assert.Equal(t, 64.0, c.rateOf(13, 4), "the oldest step remembered")
	assert.Equal(t, 32.0, c.rateOf(6, 4), "older than any remembered: half the oldest, the most it went at")
}

func TestAnswersSentWhileFreeDoNotCutTheObservedPace(t *testing.T) {
	// Slow start's herd went while the upstream was free (unnumbered: 0);
	// its 429s come back after the first one started the observed mode.
	p := &pacer{}
	now := testStart
	p.sent++
	p.answered(now, true)
	p.throttled(now, false, 0, false, p.sent, time.Time{})
	rate := p.rate
	for i := 0; i < 5; i++ {
		p.answered(now, true)
		p.throttled(now, false, 0, false, 0, time.Time{})
	}
	assert.Equal(t, rate, p.rate, "the herd's refusals say nothing of the pace")
	assert.Zero(t, p.cuts)
}

func TestARunOf429sMeasuresTheRate(t *testing.T) {
	// Paced above a bucket that refills 40 a second: a 429, then 40 a
	// second served for half a second, then another 429 at 50 a second.
	// The bucket was empty at both: the successes between are its
	// refill, and the pace goes just under it, not to 70% of 50 (35).
	p := &pacer{}
	now := testStart
	p.observe(now)
	p.rate = 60
	p.setPace(now, p.paceOf(60))
	p.since = now.Add(-2 * time.Second) // past the first second
	p.ceiling = 45                      // past the first climb too
	p.cutSent = 0
	refuse(p, now)
	p.rate = 50 // as if the pace had climbed back
	for i := 0; i < 20; i++ {
		now = now.Add(25 * time.Millisecond)
		serve(p, now)
	}
	refuse(p, now.Add(time.Millisecond))
	assert.InDelta(t, runShare*40, p.rate, 1, "paced just under the measured rate")
}

func TestTheObservedPaceStartsAUnitAfterThe429(t *testing.T) {
	// A 429 with no hold (no Retry-After, or a date already past): the
	// server's bucket is empty, so the first slot is a unit away.
	p := &pacer{}
	now := testStart
	p.sent++
	p.answered(now, true)
	p.throttled(now, false, 0, false, p.sent, time.Time{})
	require.Equal(t, paceObserved, p.mode)
	first := p.book(now)
	assert.Equal(t, now.Add(p.interval), first.at, "not now: a slot now is a 429 for sure")
}

func TestTheObservedPaceSpacesAttemptsAnIntervalApart(t *testing.T) {
	// A request whose slot passed (its waiter woke late) goes at once;
	// the next, on its own slot just after, waits out the interval from
	// it: a bucket of one refuses anything sooner.
	p := &pacer{}
	now := testStart
	p.observe(now)
	p.rate = 5
	p.setPace(now, p.paceOf(5))
	assert.Zero(t, p.shortfall(now, 0), "the first goes")
	later := now.Add(150 * time.Millisecond)
	assert.Equal(t, 50*time.Millisecond, p.shortfall(later, 1), "the next waits until an interval after it")
	assert.Zero(t, p.shortfall(now.Add(200*time.Millisecond), 1))
}

func TestAWaitInMillisecondsCapsTheObservedClimb(t *testing.T) {
	// retry-after-ms: 200 is the time to the server's next unit, so its
	// rate is at most 5 a second: the pace starts a margin under it and
	// does not double past it. A whole-second or date wait of under a
	// second names no unit's time: no cap.
	for _, fine := range []bool{true, false} {
		p := &pacer{}
		now := testStart
		p.sent++
		p.answered(now, true)
		p.throttled(now, false, 200*time.Millisecond, fine, p.sent, time.Time{})
		assert.InDelta(t, 5*paceMargin, p.rate, 1e-9)
		p.tatV = p.slotsAt(now) + 20 // twenty wait on the pace
		for i := 0; i < 3; i++ {
			now = now.Add(growEvery + time.Millisecond)
			serve(p, now)
		}
		if fine {
			assert.Less(t, p.rate, 5.0, "capped under the rate the wait implies")
		} else {
			assert.Greater(t, p.rate, 10.0, "a coarse wait does not cap the climb")
		}
	}
}

func TestAWaitInMillisecondsAfterASuccessBoundsTheRate(t *testing.T) {
	// A bucket of one at 5 a second that states nothing: the probe, sent
	// at 0, is served; the next attempt, sent 20 ms later, is refused with
	// retry-after-ms: 180 (the next unit comes 200 ms after the probe's).
	// The wait alone says at most 5.6 a second, and a pace a margin under
	// that (5.3) probed above the bucket at every other attempt: 5 of 60
	// requests saw a 429. With the success, the bound is 5: the pace goes
	// a margin under it, and stays there while requests wait and are
	// served (no creep past it).
	p := &pacer{}
	now := testStart
	p.sent++
	p.answered(now.Add(20*time.Millisecond), false)
	p.servedSent(p.sent, now)
	p.sent++
	now = now.Add(40 * time.Millisecond)
	p.answered(now, true)
	p.throttled(now, false, 180*time.Millisecond, true, p.sent, testStart.Add(20*time.Millisecond))
	require.Equal(t, paceObserved, p.mode)
	assert.InDelta(t, 5*paceMargin, p.rate, 1e-9, "a margin under the 5 a second the success and the wait bound")
	for i := 0; i < 100; i++ { // 20 s of successes, requests waiting
		p.tatV = p.slotsAt(now) + 20
		now = now.Add(p.interval)
		serve(p, now)
	}
	assert.LessOrEqual(t, p.rate, 5*paceMargin+1e-9, "no creep past the bound")

	// Two sent together after the probe, both refused: the second one's
	// bound shares the span with the first (at most 10 a second, the wait
	// alone 5.6). Taken in first, it does not lift the closer one's.
	for _, order := range [][]uint64{{2, 3}, {3, 2}} {
		p := &pacer{}
		now := testStart.Add(40 * time.Millisecond)
		p.sent = 3
		p.servedSent(1, testStart)
		for _, sent := range order {
			p.answered(now, true)
			p.throttled(now, false, 180*time.Millisecond, true, sent, testStart.Add(20*time.Millisecond))
		}
		assert.InDelta(t, 5*paceMargin, p.rate, 1e-9, "refusals taken in as %v", order)
		assert.InDelta(t, 5*paceMargin, p.unitCap, 1e-9, "refusals taken in as %v", order)
	}

	// Attempts sent between the success and the refused one may have
	// taken a unit each: the bound shares the span among them.
	q := &pacer{}
	q.servedSent(1, testStart)
	assert.InDelta(t, 2/0.25, q.fineBound(100*time.Millisecond, 3, testStart.Add(150*time.Millisecond)), 1e-9)
	assert.InDelta(t, 1/0.18, q.fineBound(180*time.Millisecond, 1, testStart.Add(20*time.Millisecond)), 1e-9,
		"without a success sent before it, the wait alone")
}

func TestAPaceThatQuickensWakesWaitersThatCameWhileItWasSlow(t *testing.T) {
	// A coarse quota (a window still taken for a bucket). One request
	// waits on a pace of 100 a second; the pace slows to 33
	// and another comes (or the first, back after its old time): the pace
	// then goes to 103 a second, three times quicker than they timed their
	// waits by. Before the fix only the first waiter's 100 a second
	// counted, 103 was not quicker by a tenth, and nobody woke: the queue
	// went on at 33 a second for half a window.
	//
	// A stated pace (OpenAI's bucket of one, cut by a 429 and lifted back
	// second by second) is the same: its queue slept through the lift,
	// nothing was sent for up to a second, and the queue's slots then
	// fell due together.
	for _, p := range []*pacer{{coarse: true, mode: paceMeasured}, {mode: paceStated}} {
		now := testStart
		p.setPace(now, 10*time.Millisecond)
		p.tatV = p.slotsAt(now) + 50 // fifty wait on the pace
		first := p.book(now)
		c1 := p.quickerFor(first)
		p.setPace(now, 30*time.Millisecond)
		c2 := p.quickerFor(p.book(now))
		p.setPace(now, 9700*time.Microsecond)
		for i, c := range []<-chan struct{}{c1, c2} {
			select {
			case <-c:
			default:
				t.Errorf("%s: waiter %d not woken by a pace three times quicker than the one it waited on", p.mode, i+1)
			}
		}
	}
}

func TestAWindowDrainedOneAttemptAtATimeIsSeenFlatAfterAnOutOfOrderBurst(t *testing.T) {
	// A window of 100: a burst of 20 opens it, its answers counted out of
	// order (the second sent was counted twelfth); the pace then drains
	// the rest one attempt at a time, each reading down by one, to empty
	// before its end. No refill at all: flat, and the next window's
	// count, back whole at once, is its lump. Before the fix the drain
	// measure kept its mark on that second answer, whose count was ten
	// off, so no drain read flat, and the window was paced as a bucket
	// for a window or two more (1.25-1.5x the ideal, 1 in about 300 runs
	// of the matrix's 100 a second cells).
	p := &pacer{}
	now := testStart.Add(10 * time.Millisecond)
	p.sent = 20
	counted := []int64{1, 12, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20} // by send
	for k, pos := range counted {
		rem := 100 - pos
		p.answered(now, false)
		p.edge.see(now, now, rem, 100)
		p.learn(now, windowReading(100, rem, now), uint64(k+1))
	}
	for left := int64(79); left >= 0; left-- {
		now = now.Add(11 * time.Millisecond)
		answer(p, now, false, windowReading(100, left, now))
	}
	require.False(t, p.lumpy)
	assert.True(t, p.flat, "drained one attempt at a time with no refill")
	now = testStart.Add(time.Second + 2*time.Millisecond)
	answer(p, now, false, windowReading(100, 99, now))
	assert.True(t, p.lumpy, "back whole at once after a flat drain: a window")
}

// lateBucket is an Anthropic-style bucket of 4 read at now, its reset
// (when it is full again) on a clock ahead of ours by lead, in whole
// seconds rounded up: what a proxy's Date in front of a server whose clock
// is ahead, or no Date at all, leaves the client to read.
func lateBucket(remaining int64, now time.Time, lead time.Duration) RateLimits {
	reset := now.Add(lead + 25*time.Millisecond*time.Duration(4-remaining))
	if r := reset.Truncate(time.Second); r.Before(reset) {
		reset = r.Add(time.Second)
	}
	return RateLimits{Replenishing: true, Requests: Quota{Limit: 4, Remaining: remaining, HasLimit: true, HasRemaining: true,
		Reset: reset, Coarse: true}}
}

// A bucket read full at every answer is under-used, whatever its reset
// says: the pace doubles at each such reading (a drain measure's span
// apart), past the bound the reset states. Resets 1 s ahead (up to 2 s late, rounded up) capped a bucket of
// 4 at 40 a second to one or two requests a second, read full every time,
// for minutes (2m39s for 240 requests, 27x the ideal, in one run of
// the matrix's world without a Date).
func TestAFullBucketBeatsTheBoundItsResetStates(t *testing.T) {
	p := &pacer{}
	now := testStart
	p.learn(now, lateBucket(1, now, time.Second), 1)
	require.Equal(t, paceMeasured, p.mode)
	first := p.rate
	for i := 2; i <= 8; i++ {
		now = now.Add(p.interval)
		p.sent++
		p.tatV = p.slotsAt(now) + 10 // requests wait on the pace
		p.learn(now, lateBucket(3, now, time.Second), p.sent)
	}
	assert.GreaterOrEqual(t, p.rate, 8*first, "doubled at the full readings a measure's span apart: %.1f/s from %.1f/s", p.rate, first)
}

// A bucket read full a whole reset or more before the reset a reading
// before it stated runs its resets late: they bound no rate. One whose
// resets are on time (rounded up: up to a second late) does not.
func TestLateResetsAreSpottedWhenTheBucketIsFullBeforeThem(t *testing.T) {
	for _, tc := range []struct {
		lead time.Duration
		late bool
	}{{5 * time.Second, true}, {0, false}} {
		p := &pacer{}
		now := testStart
		p.learn(now, lateBucket(1, now, tc.lead), 1)
		now = now.Add(200 * time.Millisecond)
		p.sent++
		p.learn(now, lateBucket(3, now, tc.lead), p.sent)
		assert.Equal(t, tc.late, p.lateResets, "resets %v ahead", tc.lead)
	}
}

// slowBucket is an Anthropic-style bucket of 10 refilling one a second,
// read with remaining units left when the server counted the attempt at
// counted; its reset (when it is full again) exact, on whole seconds.
func slowBucket(remaining int64, counted time.Time) RateLimits {
	return RateLimits{Replenishing: true, Requests: Quota{Limit: 10, Remaining: remaining, HasLimit: true, HasRemaining: true,
		Reset: counted.Add(time.Duration(10-remaining) * time.Second), Coarse: true}}
}

// Answers come back in any order. Two requests sent at once to a full
// bucket whose resets are exact: the server counts the first (9 left, full
// in 1 s), then the second (8 left, full in 2 s), whose answer comes back
// first. The first's, read full half a second later, says nothing of the
// reset the second's stated; nor does an hourly window's first answer,
// back after its fifth's.
func TestAnswersOutOfOrderDoNotMakeResetsLate(t *testing.T) {
	p := &pacer{sent: 2}
	p.learn(testStart.Add(300*time.Millisecond), slowBucket(8, testStart), 2)
	p.learn(testStart.Add(500*time.Millisecond), slowBucket(9, testStart), 1)
	assert.False(t, p.lateResets, "a bucket's")

	end := testStart.Add(time.Hour)
	w := func(remaining int64) RateLimits {
		return RateLimits{Requests: Quota{Limit: 5000, Remaining: remaining, HasLimit: true, HasRemaining: true, Reset: end, Coarse: true}}
	}
	p = &pacer{sent: 5}
	p.learn(testStart.Add(300*time.Millisecond), w(4995), 5)
	p.learn(testStart.Add(500*time.Millisecond), w(4999), 1)
	assert.False(t, p.lateResets, "a window's")

	// Attempts sent while the upstream was free have no number (0): their
	// answers' order is unknown.
	p = &pacer{sent: 2}
	p.learn(testStart.Add(300*time.Millisecond), slowBucket(0, testStart), 0)
	p.learn(testStart.Add(500*time.Millisecond), slowBucket(9, testStart), 0)
	assert.False(t, p.lateResets, "unnumbered")
}

// A server whose clock is ours, its Date cut down to the second and its
// resets rounded up, is never taken for one whose resets run late, wherever
// in the second its first answer comes: placed by that Date before the
// server's clock is learned, a reset rounded up reads up to 2 s late.
func TestExactResetsPlacedByADateCutDownAreNotLate(t *testing.T) {
	answer := func(now time.Time, remaining int64) http.Header {
		full := now.Add(25 * time.Millisecond * time.Duration(4-remaining))
		reset := full.Truncate(time.Second)
		if reset.Before(full) {
			reset = reset.Add(time.Second)
		}
		return http.Header{"Date": {now.UTC().Format(http.TimeFormat)},
			"Anthropic-Ratelimit-Requests-Limit": {"4"}, "Anthropic-Ratelimit-Requests-Remaining": {fmt.Sprint(remaining)},
			"Anthropic-Ratelimit-Requests-Reset": {reset.UTC().Format(time.RFC3339)}}
	}
	for _, frac := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 900 * time.Millisecond, 950 * time.Millisecond} {
		u := &upstream{start: slowStart{phase: open}}
		now := testStart.Add(frac)
		for i, remaining := range []int64{1, 3} {
			u.sentOne()
			h := answer(now, remaining)
			pass{u: u, sent: uint64(i + 1)}.observe(now, readRateLimits(h, now, u.serverNow(h, now)), 0, false, true)
			now = now.Add(200 * time.Millisecond)
		}
		assert.False(t, u.lateResets, "first answer %v into the second", frac)
	}
}

// fineReading is an OpenAI-style reading of a bucket of limit requests with
// remaining left, full again reset from now: a relative, exact reset.
func fineReading(limit, remaining int64, now time.Time, reset time.Duration) RateLimits {
	return RateLimits{Requests: Quota{Limit: limit, Remaining: remaining, HasLimit: true, HasRemaining: true,
		Reset: now.Add(reset)}, Replenishing: true}
}

func TestACeilingLeftByOne429OnAStatedPaceLifts(t *testing.T) {
	// A bucket of one at 5 a second, its reset stated to the millisecond:
	// one attempt that came early (an answer faster than the one before)
	// drew a 429. The rate it states has not changed, and the pace
	// recovers to it once no 429 has come for a while. Before, the
	// ceiling that 429 left was lifted only on a measured pace: the
	// stated one stayed under it for the life of the transport (234 ms
	// apart where the reset allows 200 ms: 1.25x the ideal).
	p := &pacer{}
	now := testStart
	answer(p, now, false, fineReading(1, 0, now, 200*time.Millisecond))
	require.Equal(t, paceStated, p.mode)
	stated := p.rate
	early := now.Add(190 * time.Millisecond) // a 429, in the order the upstream tells the pacer
	p.sent++
	p.answered(early, true)
	p.throttled(early, true, 10*time.Millisecond, true, p.sent, now)
	p.learn(early, fineReading(1, 0, early, 10*time.Millisecond), p.sent)
	require.Less(t, p.rate, stated, "the 429 cut the pace")
	for i := 0; i < 30; i++ {
		now = now.Add(200 * time.Millisecond)
		for j := 0; j < 5; j++ {
			p.book(now) // requests wait on the pace
		}
		answer(p, now, false, fineReading(1, 0, now, 200*time.Millisecond))
	}
	assert.InDelta(t, stated, p.rate, 0.01*stated, "six seconds without a 429: back to the stated rate")
}

func TestABucketOfOneStatedFinelyGoesOneAttemptAnIntervalApart(t *testing.T) {
	// Slots fall due together when their waiters were held past them (a
	// hold until the reset each reading states, longer than the pace's
	// interval): the first goes when the hold ends, and the next, on its
	// own slot long past, went right after it, before the first's answer
	// held the upstream again: two at once at a bucket of one, and the
	// second drew a 429. It waits out the interval from the first.
	p := &pacer{}
	now := testStart
	answer(p, now, false, fineReading(1, 0, now, 200*time.Millisecond))
	require.Equal(t, paceStated, p.mode)
	require.LessOrEqual(t, p.capacity, 1.0)
	later := now.Add(2 * time.Second) // the slots booked by now are all past
	assert.Zero(t, p.shortfall(later, 0), "the first goes")
	assert.Equal(t, p.interval-20*time.Millisecond, p.shortfall(later.Add(20*time.Millisecond), 1), "the next waits until an interval after it")
	assert.Zero(t, p.shortfall(later.Add(p.interval), 1))

	// A bucket with room for a burst is not spaced: its count and its
	// pace's capacity allow the burst.
	q := &pacer{}
	answer(q, now, false, fineReading(100, 99, now, 10*time.Millisecond))
	require.Greater(t, q.capacity, 1.0)
	assert.Zero(t, q.shortfall(later, 0))
	assert.Zero(t, q.shortfall(later, 1))
}

func TestLiftsThatDraw429sComeLessOften(t *testing.T) {
	// A bucket of one that states 10 a second and takes less: every
	// lift of the ceiling draws a 429. Lifted back each second, the pace
	// drew one every second or two for good; each 429 that follows a
	// lift now doubles the wait before the next.
	p := &pacer{}
	now := testStart
	reading := func() RateLimits { return fineReading(1, 0, now, 100*time.Millisecond) }
	refuse := func() {
		p.sent++
		p.answered(now, true)
		p.throttled(now, true, 0, false, p.sent, now)
		p.learn(now, reading(), p.sent)
	}
	answer(p, now, false, reading())
	refuse()
	require.Positive(t, p.ceiling)
	refused, lastLift := 1, now
	var waits []time.Duration
	for end := now.Add(time.Minute); now.Before(end); {
		now = now.Add(100 * time.Millisecond)
		p.book(now) // requests wait on the pace
		p.book(now)
		before := p.ceiling
		answer(p, now, false, reading())
		if p.ceiling > before { // lifted: the server refuses the lifted pace
			waits = append(waits, now.Sub(lastLift))
			lastLift = now
			now = now.Add(100 * time.Millisecond)
			refuse()
			refused++
		}
	}
	assert.LessOrEqual(t, refused, 7, "429s in a minute, each drawn by a lift (waits between lifts %v)", waits)
	require.NotEmpty(t, waits)
	assert.GreaterOrEqual(t, waits[len(waits)-1], 16*time.Second, "the waits double: %v", waits)
}

func TestACountReadLateAfterTheClockWasForgottenCountsWhatWentAfterIt(t *testing.T) {
	// Attempt 10's count said none left; the pace was then forgotten
	// (a poisoned pace, or the observed mode outliving its 429s), and a
	// late answer to attempt 5 says 5 left. Its count leaves out the five
	// attempts sent after it: none may go at once. Counted from attempt
	// 10, whose count the forgotten clock no longer holds, 4 of 10 went.
	p := &pacer{}
	now := testStart
	p.sent = 1
	p.learn(now, fineReading(10, 9, now, 100*time.Millisecond), 1)
	p.sent = 10
	now = now.Add(5 * time.Millisecond)
	p.learn(now, fineReading(10, 0, now, time.Second), 10)
	p.forget(now)
	now = now.Add(5 * time.Millisecond)
	p.learn(now, fineReading(10, 5, now, 500*time.Millisecond), 5)
	for i := 0; i < 10; i++ {
		assert.True(t, p.book(now).at.After(now), "booking %d went at once", i+1)
	}
}

// A reset is placed by the Date of the answer, which a server writes when
// it answers; it counted the attempt when it came, which for a
// non-streaming generation may be much sooner. Read from the answer's
// arrival, the reset understates the time the bucket takes to fill by the
// generation's length, and the lower bound taken from it overstated a
// bucket of 50 a minute, counted 30 s before its Date, as 2.3 a second:
// the pace and the shortfall (which refills at the proven rate) would have
// spent units it did not hold. From the attempt's send, the bound holds.
func TestAResetDatedAfterALongAnswerProvesNoMoreThanTheRate(t *testing.T) {
	const limit, rate = 50, 50.0 / 60
	sentAt := testStart.Add(290 * time.Millisecond)
	countedAt := sentAt.Add(10 * time.Millisecond)
	answeredAt := countedAt.Add(30 * time.Second) // the Date, cut down to the second
	now := answeredAt.Add(20 * time.Millisecond)
	level := 10.5 // units left after the count
	full := countedAt.Add(time.Duration((limit - level) / rate * float64(time.Second)))
	if r := full.Truncate(time.Second); r.Before(full) {
		full = r.Add(time.Second) // rounded up: the reset is never early
	}
	h := http.Header{}
	h.Set("Anthropic-Ratelimit-Requests-Limit", fmt.Sprint(limit))
	h.Set("Anthropic-Ratelimit-Requests-Remaining", fmt.Sprint(int64(level)))
	h.Set("Anthropic-Ratelimit-Requests-Reset", full.UTC().Format(time.RFC3339))
	h.Set("Date", answeredAt.UTC().Format(http.TimeFormat))
	var c serverClock
	p := &pacer{sent: 1, answerSentAt: sentAt}
	p.learn(now, readRateLimits(h, now, c.serverNow(h, now)), 1)
	assert.LessOrEqual(t, p.proven, rate, "the proven rate, per second")
}

func TestTheObservedPaceStartsFasterThanOneABound(t *testing.T) {
	// One a bound is what upstream.poisoned takes for a poisoned pace: a
	// pace the observed mode starts at must not be that.
	for _, bound := range []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2 * time.Second, time.Minute} {
		p := &pacer{bound: bound}
		p.observe(testStart)
		assert.Less(t, p.interval, bound, "bound %v", bound)
		assert.GreaterOrEqual(t, p.rate, 1.0, "at least one a second, bound %v", bound)
		// Just over: a start at two a bound overshot short bounds (964
		// requests failed at 250 ms in a review's sweep) and slowed
		// those of 1.1 to 2 s (up to 1.83x the ideal).
		assert.LessOrEqual(t, p.rate, max(1.0, 1.5/bound.Seconds()), "only just over one a bound, bound %v", bound)
		if bound >= 1100*time.Millisecond {
			assert.Equal(t, 1.0, p.rate, "one a second is not poisoned by a bound of %v: kept", bound)
		}
	}
	p := &pacer{} // no bound
	p.observe(testStart)
	assert.Equal(t, 1.0, p.rate, "no bound: one a second")
}

func TestTheAcceptedRateCountsTheWholeLastSecond(t *testing.T) {
	// Successes 227 ms apart (4.4 a second), read at every millisecond
	// between: on average the count of the last second is the rate.
	// Counted over 0.9 to 1 s, it read 5% low on average, and 3 at times.
	var a acceptCounter
	const every = 227 * time.Millisecond
	next := testStart
	sum, n := 0.0, 0
	for now := testStart; now.Before(testStart.Add(10 * time.Second)); now = now.Add(time.Millisecond) {
		if !now.Before(next) {
			a.add(now)
			next = next.Add(every)
		}
		if now.Sub(testStart) >= 2*time.Second {
			got := a.perSecond(now)
			assert.InDelta(t, 4.4, got, 1.05, "at %v", now.Sub(testStart))
			sum += got
			n++
		}
	}
	assert.InDelta(t, 1/every.Seconds(), sum/float64(n), 0.05, "the mean of the readings")
}

func TestTheAcceptedRateReadBeforeTheNewestSuccessCountsEachOnce(t *testing.T) {
	// Answers read the clock before they take the upstream's lock, so a
	// count can be read at a time before the newest bucket began.
	var a acceptCounter
	for i := range 11 {
		a.add(testStart.Add(time.Duration(i) * acceptBucket))
	}
	newest := testStart.Add(10 * acceptBucket)
	for _, back := range []time.Duration{0, 10 * time.Millisecond, acceptBucket} {
		assert.LessOrEqual(t, a.perSecond(newest.Add(-back)), 11.0, "read %v before the newest success", back)
	}
}
