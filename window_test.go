package retryhttp

import (
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ms is the time n milliseconds after testStart.
func ms(n int) time.Time { return testStart.Add(time.Duration(n) * time.Millisecond) }

// opensWindow tells e that its probe at at was answered by a new window
// (39 of 40 left), whose quota the next answer, 2 ms later, finds used.
func opensWindow(e *windowEdge, at time.Time) {
	e.probeAt = at
	e.see(at, at.Add(2*time.Millisecond), 39, 40)
	e.see(at.Add(2*time.Millisecond), at.Add(4*time.Millisecond), 0, 40)
}

// A fixed window of 40 a second whose windows end 781 ms into each second
// (0.781 s, 1.781 s, ...):
// its resets, in whole seconds, say nothing finer. The answers do.
func TestWindowEdgeIsLearnedFromAnswersAndBisected(t *testing.T) {
	var e windowEdge
	// The first window: its quota, then probes refused as it stays shut.
	e.see(ms(0), ms(2), 39, 40)
	e.see(ms(2), ms(4), 0, 40)
	e.see(ms(700), ms(702), 0, 40)
	_, _, ok := e.end()
	require.False(t, ok, "one window tells no period")
	// The next window's first answer, and its quota used.
	e.see(ms(1200), ms(1202), 39, 40)
	require.Equal(t, time.Second, e.period)
	e.see(ms(1202), ms(1204), 0, 40)
	lo, hi, ok := e.end()
	require.True(t, ok)
	assert.Equal(t, ms(1700), lo, "the first window ended after its last send, so this one a period later")
	assert.Equal(t, ms(2002), hi, "and at most a period after its own first answer, so this one a period later")

	// Known only roughly: the first probe goes just before the late
	// bound, not at the stated reset, nor at the middle.
	at, fine, ok := e.next(ms(1750))
	require.True(t, ok)
	assert.False(t, fine)
	assert.Equal(t, ms(1994), at)
	// It is answered by the new window: the end lies well before the late
	// bound. (windowShortfall marks the probe out as it lets it go.)
	opensWindow(&e, at)
	lo, hi, _ = e.end()
	assert.Equal(t, ms(2700), lo)
	assert.Equal(t, ms(2996), hi, "the new window's first answer, a period on")
	// From then on the probes bisect: a stated reset within what is known
	// first, else the middle.
	at, _, _ = e.next(ms(2750))
	assert.Equal(t, ms(2750), at)
	at, _, _ = e.next(time.Time{})
	assert.Equal(t, ms(2848), at)

	// That probe at the stated reset is refused: the window ends later.
	e.probeAt = ms(2750)
	e.see(ms(2750), ms(2752), 0, 40)
	lo, hi, _ = e.end()
	assert.Equal(t, ms(2750), lo)
	assert.Equal(t, ms(2996), hi)
	// The next, at the middle, is answered by the new window: it ended
	// before.
	at, _, _ = e.next(time.Time{})
	assert.Equal(t, ms(2873), at)
	opensWindow(&e, at)
	lo, hi, _ = e.end()
	assert.Equal(t, ms(3750), lo)
	assert.Equal(t, ms(3875), hi)

	// Bisected on, window after window, the end is known within edgeFine.
	curEnd := ms(3781)
	for i := 0; i < 20; i++ {
		at, fine, _ = e.next(time.Time{})
		if fine {
			break
		}
		if at.Before(curEnd) {
			e.probeAt = at
			e.see(at, at.Add(2*time.Millisecond), 0, 40)
		} else { // the new window, and its quota used at once
			opensWindow(&e, at)
			curEnd = curEnd.Add(time.Second)
		}
	}
	lo, hi, ok = e.end()
	require.True(t, ok)
	assert.LessOrEqual(t, hi.Sub(lo), edgeFine)
	assert.True(t, curEnd.After(lo) && !curEnd.After(hi), "the true end %v in (%v, %v]", curEnd, lo, hi)
}

// A burst that opens a fixed window (its first requests went as the window
// began, as the retries of a plain loop a period later do): the window ends
// just before its first answer plus the period, and one probe just before
// that late bound, refused, makes the end known. Before, the first window's
// late bound was lost (its period was not known yet) and the end, known to
// hundreds of milliseconds, was bisected at the middle, one probe a window:
// a burst's last window went up to 30-45 ms after it opened, behind the
// plain loop.
func TestWindowEdgeOfAWindowOpenedByTheBurstIsKnownAfterOneProbe(t *testing.T) {
	var e windowEdge
	// Windows from 0.219 s, 40 each: the first opened by the burst.
	e.see(ms(219), ms(221), 39, 40)
	e.see(ms(221), ms(223), 0, 40)
	e.see(ms(700), ms(702), 0, 40)
	e.see(ms(1100), ms(1102), 0, 40)
	// The next window's first answer came late (its requests waited).
	e.see(ms(1300), ms(1302), 39, 40)
	e.see(ms(1302), ms(1304), 0, 40)
	lo, hi, ok := e.end()
	require.True(t, ok)
	assert.Equal(t, ms(2100), lo)
	assert.Equal(t, ms(2221), hi, "the first window ended at most a period after its first answer")

	at, fine, _ := e.next(time.Time{})
	assert.False(t, fine)
	assert.Equal(t, ms(2213), at, "the probe goes just before the late bound")
	e.probeAt = at
	e.see(at, at.Add(2*time.Millisecond), 0, 40) // refused: the end is 2.219
	at, fine, _ = e.next(time.Time{})
	assert.True(t, fine, "known after one refusal")
	assert.Equal(t, ms(2221), at)
	assert.False(t, at.Before(ms(2219)), "never before the true end")
}

func TestWindowEdgeTakesNoCountFromEarlierInTheWindowForANewWindow(t *testing.T) {
	// Attempts sent at once reach the server in any order: an answer it
	// counted early (count higher) may come after one it counted late.
	var e windowEdge
	e.see(ms(0), ms(2), 39, 40)
	e.see(ms(5), ms(7), 0, 40)
	e.see(ms(700), ms(702), 0, 40)
	e.see(ms(1000), ms(1002), 39, 40) // the next window
	require.True(t, e.fresh)
	e.see(ms(1003), ms(1005), 0, 40)
	e.see(ms(1003), ms(1006), 25, 40) // counted before the one that read 0
	assert.False(t, e.fresh, "the count came back up before the window could end: the same window")
	assert.Equal(t, int64(0), e.least)
}

func TestWindowEdgePeriodJustUnderAWholeSecondIsThatSecond(t *testing.T) {
	// The first window's first answer came 2 ms into it; the next one's
	// was sent just before the boundary and came at once.
	var e windowEdge
	e.see(ms(0), ms(2), 99, 100)
	e.see(ms(600), ms(602), 0, 100)
	e.see(ms(998), ms(1000), 99, 100)
	assert.Equal(t, time.Second, e.period)
	_, _, ok := e.end()
	assert.True(t, ok)
}

func TestAWindowWithAnEarlyResetIsProbedByOneAttemptNotTheWholeQuota(t *testing.T) {
	// A window whose resets are cut down (they come before its end): past
	// the stated reset, one probe goes and the rest wait for its answer;
	// before the fix the whole quota went at the stated reset, into the
	// window still shut, and drew a 429 each.
	reading := func(remaining int64, reset time.Time) RateLimits {
		return RateLimits{Requests: Quota{Limit: 40, Remaining: remaining, HasLimit: true, HasRemaining: true, Reset: reset, Coarse: true}}
	}
	p := &pacer{}
	// Window 0 from 0.781 to 1.781 s, stated as ending at 1 s: its
	// quota, then probes refused well past the stated end.
	now := ms(790)
	for left := int64(39); left >= 0; left-- {
		answer(p, now, false, reading(left, ms(1000)))
		now = now.Add(time.Millisecond)
	}
	for _, at := range []int{1100, 1300, 1700} {
		answer(p, ms(at), true, reading(0, ms(at))) // a reset past is read as now
	}
	// Window 1, from 1.781 s, stated as ending at 2 s.
	now = ms(1790)
	for left := int64(39); left >= 0; left-- {
		answer(p, now, false, reading(left, ms(2000)))
		now = now.Add(time.Millisecond)
	}
	require.True(t, p.lumpy)
	lo, hi, ok := p.edge.end()
	require.True(t, ok)
	assert.True(t, lo.Before(ms(2781)) && !hi.Before(ms(2781)), "the end learned: (%v, %v]", lo, hi)

	// Past the stated end nothing goes before the probe's time, and then
	// one probe goes, not the quota.
	w, fine, _ := p.edge.next(p.statedEnd())
	require.False(t, fine)
	assert.True(t, w.After(ms(2000)), "the stated end, cut down, is not waited for: the learned one is (%v)", w)
	assert.Positive(t, p.shortfall(ms(2000), 0))
	gone := 0
	for i := 0; i < 40; i++ {
		if p.shortfall(w, 0) == 0 {
			gone++
		}
	}
	assert.Equal(t, 1, gone, "one probe at a time while the end is known only roughly")
}

// lumpyWindow is a pacer that has told a window of 40 a second by its lump:
// window 0 drained and probed, window 1's first answer at 1.005 s. It
// returns the time of that answer.
func lumpyWindow(t *testing.T) (*pacer, time.Time) {
	t.Helper()
	p := &pacer{}
	now := testStart.Add(10 * time.Millisecond)
	now = dryWindow(p, now)
	now = testStart.Add(time.Second + 5*time.Millisecond)
	answer(p, now, false, windowReading(40, 39, now))
	require.True(t, p.lumpy)
	require.True(t, p.paced())
	return p, now
}

func TestAWindowsAnswersCountedOutOfOrderDoNotPushThePaceOut(t *testing.T) {
	// 32 attempts go at once into a window; the server counts them in
	// another order than they were sent. The last sent is counted first
	// (38 remain), the first sent last (7 remain), and its answer comes
	// after three more went: 4 remain, and the next 4 go at once. Before
	// the fix each answer's own count was taken with every attempt sent
	// after it as unseen: the first sent's 7, less the 34 sent after it,
	// pushed the pace clock 27 slots out, and the window's last units
	// went up to 7 ms late (behind a plain loop, in the matrix's 40 a
	// second cells).
	p, start := lumpyWindow(t)
	now := start.Add(100 * time.Millisecond) // the pace clock is idle
	first := p.sent + 1
	for i := 0; i < 32; i++ {
		p.book(now)
		p.sentOne()
	}
	last := p.sent
	got := now.Add(2 * time.Millisecond)
	see := func(sent uint64, remaining int64) {
		p.answered(got, false)
		p.edge.see(now, got, remaining, 40)
		p.learn(got, windowReading(40, remaining, got), sent)
	}
	see(last, 38)
	for i := 0; i < 3; i++ { // the callers answered send again
		p.book(got)
		p.sentOne()
	}
	see(first, 7)
	for i := 0; i < 4; i++ {
		turn := p.book(got)
		assert.False(t, turn.at.After(got.Add(time.Millisecond)), "unit %d of the 4 left goes at once, not at %v", i, turn.at.Sub(got))
	}
}

func TestAQuotaFoundEmptyIsProbedOneAttemptAtATime(t *testing.T) {
	// A window of 40 drained in 40 ms proves a fast refill to the bucket
	// model. Refused once, it did not refill as that rate said: what it
	// holds is unknown until an answer comes. With an attempt out, no
	// other goes; before the fix, with 20 ms answers, three went a unit
	// apart before the first was refused, and all three were.
	p := &pacer{}
	now := testStart.Add(10 * time.Millisecond)
	now = drainWindow(p, now, time.Millisecond)
	answer(p, now, true, windowReading(40, 0, now))
	require.Positive(t, p.dry)
	require.Positive(t, p.proven)
	later := now.Add(time.Duration(3 / p.proven * float64(time.Second))) // three units at the proven rate
	assert.Positive(t, p.shortfall(later, 1), "a probe is out: the next waits for its answer")
	assert.Zero(t, p.shortfall(later, 0), "with none out, one probe goes")
	assert.Positive(t, p.shortfall(later, 0), "one, not two")
}

// An edge known within edgeTrips round trips is gone to at its late bound,
// not bisected: a probe the old window refuses waits out a whole-second
// Retry-After (with 20 ms answers, a refused probe in the last window cost
// a burst a second in about half the runs). Known as roughly with fast
// answers, it is still bisected.
func TestWindowEdgeKnownWithinFiveRoundTripsIsNotProbed(t *testing.T) {
	edge := func(trip time.Duration) *windowEdge {
		e := &windowEdge{trip: trip}
		e.see(ms(0), ms(20), 39, 40)
		e.see(ms(20), ms(40), 0, 40)
		e.see(ms(990), ms(1010), 0, 40)   // still the first window's
		e.see(ms(1030), ms(1050), 39, 40) // the next window's: the edge lies in (990, 1020]
		e.see(ms(1050), ms(1070), 0, 40)
		return e
	}
	e := edge(20 * time.Millisecond)
	lo, hi, ok := e.end()
	require.True(t, ok)
	require.Greater(t, hi.Sub(lo), edgeFine)
	require.LessOrEqual(t, hi.Sub(lo), 5*20*time.Millisecond)
	at, fine, _ := e.next(time.Time{})
	assert.True(t, fine, "within five 20 ms round trips: no probe")
	assert.Equal(t, hi, at, "its late bound")

	at, fine, _ = edge(2 * time.Millisecond).next(time.Time{})
	assert.False(t, fine, "as wide with 2 ms answers: a probe")
	assert.True(t, at.Before(hi))
}

// Attempts sent at once reach the server in any order, so a reading can
// count an attempt sent after the one it answers: that attempt is then
// counted twice, and a window's last unit looks spent while it is not. A
// request that found the window used up while attempts were out is woken
// by their answers, which bring the true count; before, it slept to the
// window's end with the unit unused, and a burst of 500 over windows of 100
// a second ended a whole window late (the matrix's 40 and 100 a second
// GitHub cells, now and then under -race).
func TestAWindowFoundUsedUpWhileAttemptsAreOutIsCheckedAgainAtTheirAnswers(t *testing.T) {
	p, start := lumpyWindow(t)
	u := &upstream{start: slowStart{phase: open}, pacer: *p}
	u.replies = u.sent
	now := start.Add(100 * time.Millisecond)
	limits := func(remaining int64) RateLimits { return windowReading(40, remaining, now) }

	// The window has 5 left; 4 attempts go at once. The server counts
	// the second before the first, so the first's answer says 3 remain,
	// counting the second too.
	out := make([]pass, 4)
	for i := range out {
		out[i] = pass{u: u, at: now}
		u.dispatch(&out[i])
	}
	now = now.Add(2 * time.Millisecond)
	out[0].observe(now, limits(3), 0, false, true)

	// By that count the three still out use the window up.
	tn, w, _ := u.schedule(now, 0)
	require.Nil(t, w)
	at, woken, _ := u.recheck(now, &tn, 0)
	if at.After(now) && at.Before(now.Add(time.Millisecond)) {
		now = at // its slot on the window's pace
		at, woken, _ = u.recheck(now, &tn, 0)
	}
	require.True(t, at.After(now.Add(100*time.Millisecond)), "the window looks used up: the request waits for its end (told %v)", at.Sub(now))
	require.NotNil(t, woken, "nothing would wake it before the window's end")

	// The second's answer, with two still out, brings the true count:
	// one unit is left.
	out[1].observe(now, limits(4), 0, false, true)
	select {
	case <-woken:
	default:
		t.Fatal("the answer that brings the window's count did not wake the request waiting on it")
	}
	at, _, _ = u.recheck(now, &tn, 0)
	assert.True(t, at.IsZero(), "the window's last unit goes at once, not at %v", at.Sub(now))
}

// A pace forgotten (poisoned, or gone cold for a new probe) wakes the
// requests waiting on a window's count, as it wakes those waiting on the
// pace: nothing else would fire for them before their timers.
func TestForgettingAWindowWakesTheRequestsWaitingOnItsCount(t *testing.T) {
	p, start := lumpyWindow(t)
	woken := p.countedFor(1)
	require.NotNil(t, woken)
	p.forget(start)
	select {
	case <-woken:
	default:
		t.Fatal("forgetting the pace left a request asleep on the window's count")
	}
}

// A fixed window of five a second that ends 800 ms into each second, its
// reset cut down to the whole second before: read empty at 300 ms into the
// second, the reset has passed already, and a reading says nothing of
// when the window's units come back. Its answers do (windowEdge), and
// the upstream is held until that end, at most a second away. Before, it
// was not held at all: the pace sent the next request two units on, just
// before the window's end, for a 429, and the probe after that as long
// after the new window began, so the next window drained as late, window
// after window (the matrix's GitHub 5/s cells, windows ending within the
// second, up to 7 of 60 refused). An end not yet known well enough is no
// reason to hold (see TestABucketsRefillsTeachNoEdgeToHoldFor), nor is a
// quota whose reset is still to come.
func TestAWindowReadEmptyAfterItsCutDownResetWaitsForTheEndItsAnswersShow(t *testing.T) {
	u := &upstream{start: slowStart{phase: open}}
	u.replies = u.sent
	reading := func(now time.Time, remaining int64, reset time.Time) RateLimits {
		return RateLimits{Requests: Quota{Limit: 5, Remaining: remaining, HasLimit: true, HasRemaining: true,
			Reset: reset, Coarse: true}}
	}
	send := func(at, answered time.Time, remaining int64, reset time.Time, refused bool) {
		p := pass{u: u, at: at}
		u.dispatch(&p)
		p.observe(answered, reading(answered, remaining, reset), 0, refused, true)
	}
	const trip = 20 * time.Millisecond
	// Each window k ends at k+0.8 s; its reset, cut down, says k s, and
	// is read as the time of the answer once it has passed (clampReset).
	// Its quota goes by k+0.3 s, and a request sent at k+0.7 s, the
	// proven rate's next unit, is refused: the answers bound its end.
	windowEnd := func(k int) time.Time { return ms(1000*k + 800) }
	var drained time.Time
	for k := 1; k <= 4; k++ {
		stated := ms(1000 * k)
		sends := []time.Time{windowEnd(k - 1).Add(5 * time.Millisecond), ms(1000*k + 100), ms(1000*k + 150),
			ms(1000*k + 200), ms(1000*k + 300)}
		for i, at := range sends {
			answered := at.Add(trip)
			send(at, answered, int64(4-i), later(stated, answered), false)
			drained = answered
		}
		if k == 3 {
			_, ok := u.cutDownEnd(drained, reading(drained, 0, drained).Requests)
			require.False(t, ok, "an end learned over the first windows' ends is no edge to hold for yet")
		}
		if k < 4 {
			at := ms(1000*k + 700)
			send(at, at.Add(trip), 0, at.Add(trip), true)
		}
	}
	require.False(t, u.lumpy, "five a second is too few to be told from a bucket by its lumps")
	require.True(t, u.coarse)

	u.mu.Lock()
	held := u.hold.end
	u.mu.Unlock()
	end := windowEnd(4)
	require.True(t, held.After(drained), "read empty after its reset passed, the window is held (the hold ends %v after the drain)", held.Sub(drained))
	assert.False(t, held.Before(end), "held until the end its answers show, not %v before it", end.Sub(held))
	assert.True(t, held.Before(end.Add(trip+10*time.Millisecond)), "and not much past it (%v)", held.Sub(end))

	// Nor for longer than its reset, cut down to the second, could be late.
	early := end.Add(-1500 * time.Millisecond)
	_, ok := u.cutDownEnd(early, reading(early, 0, early).Requests)
	assert.False(t, ok, "an end more than a second past a reset that has passed is not the window's")
	// An end known only roughly, or over fewer windows in a row, is no
	// edge to hold for (see the bucket below).
	at := drained
	edge := u.edge
	u.edge.lo = u.edge.hi.Add(-cutDownWidest - time.Millisecond)
	_, ok = u.cutDownEnd(at, reading(at, 0, at).Requests)
	assert.False(t, ok, "an end known within more than %v", cutDownWidest)
	u.edge = edge
	u.edge.agreed = cutDownAgreed - 1
	_, ok = u.cutDownEnd(at, reading(at, 0, at).Requests)
	assert.False(t, ok, "an end that held over fewer than %d windows", cutDownAgreed)
	u.edge = edge
	// A reset still to come decides by itself.
	_, ok = u.cutDownEnd(drained, reading(drained, 0, drained.Add(time.Second)).Requests)
	assert.False(t, ok, "a reset to come is no cut-down one")
	// Nothing learned, nothing held.
	b := &upstream{start: slowStart{phase: open}}
	b.coarse = true
	_, ok = b.cutDownEnd(drained, reading(drained, 0, drained).Requests)
	assert.False(t, ok, "no edge learned, no hold")
}

// A bucket's count rises as it refills, and windowEdge takes a rise of a
// quarter of the limit for a new window: a bucket of 5 at 10 a second,
// shared with another client and drained in waves with idle time between,
// taught it edges 87 to 979 ms wide, and the upstream was held up to a
// second at empty readings whose reset had passed, for units a tenth of a
// second away (a burst 1.38-1.47x the ideal where it had run 1.36x). Its
// edges do not hold from one "window" to the next: none is trusted.
func TestABucketsRefillsTeachNoEdgeToHoldFor(t *testing.T) {
	u := &upstream{start: slowStart{phase: open}}
	u.replies = u.sent
	const limit, rate = 5, 10.0 // a unit every 100 ms
	tokens, last := float64(limit), testStart
	take := func(now time.Time) (remaining int64, ok bool) {
		tokens = min(limit, tokens+rate*now.Sub(last).Seconds())
		last = now
		if tokens < 1 {
			return 0, false
		}
		tokens--
		return int64(tokens), true
	}
	rng := rand.New(rand.NewSource(1))
	other := testStart
	holds := 0
	for wave := 0; wave < 12; wave++ {
		start := testStart.Add(time.Duration(wave) * 1500 * time.Millisecond)
		for i := 0; i < 12; i++ {
			at := start.Add(time.Duration(i*60+rng.Intn(40)) * time.Millisecond)
			for ; other.Before(at); other = other.Add(400 * time.Millisecond) {
				take(other) // the other client, 2.5 a second
			}
			answered := at.Add(time.Duration(2+rng.Intn(20)) * time.Millisecond)
			remaining, ok := take(at.Add(time.Millisecond))
			full := answered.Add(time.Duration(float64(limit)-tokens) / rate * time.Second)
			reset := later(full.Truncate(time.Second), answered) // cut down, read as now once passed
			p := pass{u: u, at: at}
			u.dispatch(&p)
			p.observe(answered, RateLimits{Requests: Quota{Limit: limit, Remaining: remaining, HasLimit: true,
				HasRemaining: true, Reset: reset, Coarse: true}}, 0, !ok, true)
			if remaining == 0 && !reset.After(answered) {
				if _, held := u.cutDownEnd(answered, Quota{Limit: limit, HasLimit: true, HasRemaining: true,
					Reset: reset, Coarse: true}); held {
					holds++
				}
			}
		}
	}
	require.True(t, u.coarse)
	assert.Zero(t, holds, "a bucket's rises are no window's end")
}
