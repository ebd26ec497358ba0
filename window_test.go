package retryhttp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A fixed window of 40 a second whose windows end 781 ms into each second
// (0.781 s, 1.781 s, ...):
// its resets, in whole seconds, say nothing finer. The answers do.
func TestWindowEdgeIsLearnedFromAnswersAndBisected(t *testing.T) {
	ms := func(n int) time.Time { return testStart.Add(time.Duration(n) * time.Millisecond) }
	var e windowEdge
	// The first window: its quota, then probes refused as it stays shut.
	e.see(ms(0), ms(2), 39, 40)
	e.see(ms(2), ms(4), 0, 40)
	e.see(ms(700), ms(702), 0, 40)
	_, _, ok := e.end()
	require.False(t, ok, "one window tells no period")
	// The next window's first answer.
	e.see(ms(1200), ms(1202), 39, 40)
	require.Equal(t, time.Second, e.period)
	lo, hi, ok := e.end()
	require.True(t, ok)
	assert.Equal(t, ms(1700), lo, "the first window ended after its last send, so this one a period later")
	assert.Equal(t, ms(2202), hi, "and at or before the first answer of the next, a period later")

	// Known only roughly: a probe at the middle, not the stated reset
	// when it lies past what is known.
	at, fine, ok := e.next(ms(2500))
	require.True(t, ok)
	assert.False(t, fine)
	assert.Equal(t, ms(1951), at)
	// A stated reset within what is known is tried first.
	at, _, _ = e.next(ms(1750))
	assert.Equal(t, ms(1750), at)

	// That probe is refused: the window ends later.
	e.see(ms(1750), ms(1752), 0, 40)
	lo, hi, _ = e.end()
	assert.Equal(t, ms(1750), lo)
	assert.Equal(t, ms(2202), hi)
	// The next, at the middle, is answered by the new window: it ended
	// before.
	at, _, _ = e.next(time.Time{})
	assert.Equal(t, ms(1976), at)
	e.see(at, at.Add(2*time.Millisecond), 39, 40)
	e.see(ms(1978), ms(1980), 0, 40)
	lo, hi, _ = e.end()
	assert.Equal(t, ms(2750), lo)
	assert.Equal(t, ms(2978), hi)

	// Bisected on, window after window, the end is known within edgeFine.
	curEnd := ms(2781)
	for i := 0; i < 20; i++ {
		at, fine, _ = e.next(time.Time{})
		if fine {
			break
		}
		if at.Before(curEnd) {
			e.see(at, at.Add(2*time.Millisecond), 0, 40)
		} else { // the new window, and its quota used at once
			e.see(at, at.Add(2*time.Millisecond), 39, 40)
			e.see(at.Add(2*time.Millisecond), at.Add(4*time.Millisecond), 0, 40)
			curEnd = curEnd.Add(time.Second)
		}
	}
	lo, hi, ok = e.end()
	require.True(t, ok)
	assert.LessOrEqual(t, hi.Sub(lo), edgeFine)
	assert.True(t, curEnd.After(lo) && !curEnd.After(hi), "the true end %v in (%v, %v]", curEnd, lo, hi)
}

func TestWindowEdgeTakesNoCountFromEarlierInTheWindowForANewWindow(t *testing.T) {
	// Attempts sent at once reach the server in any order: an answer it
	// counted early (count higher) may come after one it counted late.
	ms := func(n int) time.Time { return testStart.Add(time.Duration(n) * time.Millisecond) }
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
	ms := func(n int) time.Time { return testStart.Add(time.Duration(n) * time.Millisecond) }
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
	ms := func(n int) time.Time { return testStart.Add(time.Duration(n) * time.Millisecond) }
	reading := func(remaining int64, reset time.Time) RateLimits {
		return RateLimits{Requests: Quota{Limit: 40, Remaining: remaining, HasLimit: true, HasRemaining: true, Reset: reset, Coarse: true}}
	}
	p := &pacer{}
	// Window 0 from 0 to 1.781 s, stated as ending at 1 s: its quota,
	// then probes refused well past the stated end.
	now := ms(1)
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
