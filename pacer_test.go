package retryhttp

import (
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
	for left := int64(39); left >= 0; left-- { // a burst empties the window
		answer(p, now, false, windowReading(40, left, now))
		now = now.Add(5 * time.Millisecond)
	}
	for i := 0; i < 3; i++ { // probes a unit or more apart find it still empty
		now = now.Add(max(p.unitAfter(), 10*time.Millisecond))
		answer(p, now, true, windowReading(40, 0, now))
	}
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
	for left := int64(39); left >= 0; left-- {
		answer(p, now, false, windowReading(40, left, now))
		now = now.Add(time.Millisecond)
	}
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
	for left := int64(39); left >= 0; left-- {
		answer(p, now, false, windowReading(40, left, now))
		now = now.Add(5 * time.Millisecond)
	}
	for i := 0; i < 3; i++ {
		now = now.Add(max(p.unitAfter(), 10*time.Millisecond))
		answer(p, now, true, windowReading(40, 0, now))
	}
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
