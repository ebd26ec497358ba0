package retryhttp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shortfall's rule (a quota found empty is probed one attempt
// at a time: dry > 0 and inFlight > 0 -> probePoll) trusts inFlight =
// u.sent - u.replies. u.sent is bumped by dispatch (end of scheduleOnce),
// but an attempt whose admission then fails (admitSlow: awaitBreaker,
// awaitLimit, or the WithMaxConcurrency slot wait ending with the
// context) only calls pass.abandon, which does nothing for a non-probe:
// u.replies never catches up. With nothing in flight, the dry bucket is
// then polled every probePoll forever: no attempt goes, so no answer ever
// clears dry, and every queued request fails with ErrRateLimited.
func TestAnAttemptLetGoButNeverSentIsNoLongerOut(t *testing.T) {
	tr := New(nil)
	u := tr.newUpstream()
	now := testStart.Add(10 * time.Millisecond)
	now = drainWindow(&u.pacer, now, time.Millisecond) // as TestAQuotaFoundEmptyIsProbedOneAttemptAtATime
	answer(&u.pacer, now, true, windowReading(40, 0, now))
	u.replies = u.sent // every attempt so far was answered
	require.Positive(t, u.dry)
	require.False(t, u.lumpy)

	// One more request is scheduled and dispatched, then not admitted
	// after all (say its deadline ended while it waited for a
	// WithMaxConcurrency slot): admitSlow calls a.pass.abandon, a no-op.
	p := pass{u: u}
	u.dispatch(&p)
	p.abandon(now)

	// Nothing is in flight. A request waiting on the pace must go within
	// a bounded time (CONTRACT: "with requests queued and nothing in
	// flight, something is sent within a bounded time").
	// Within a unit at the rate proven, not after the bound that holds
	// any dry quota whose probe goes unanswered
	// (TestADryQuotaWaitsForAnAnswerAtMostTheBound).
	turn := u.turnAt(now)
	end := now.Add(time.Second)
	for ; now.Before(end); now = now.Add(time.Millisecond) {
		at, _, again := u.recheck(now, &turn, 0)
		if again {
			turn = u.turnAt(now)
			continue
		}
		if at.IsZero() {
			return // let go
		}
	}
	t.Fatalf("nothing in flight, yet no attempt let go in a second (inFlight seen: %d, dry %d)", u.sent-u.replies, u.dry)
}

// fineBound assumes the server's bucket held no refill between the
// latest served attempt's send (okAt) and the refused one's. A bucket that
// sat full meanwhile (a slow success, or an idle spell) breaks that: the
// bound comes out far below the server's rate, and unitCap then keeps the
// observed rate under it (capRate in grow) until another 429 in
// milliseconds replaces it, which a pace that slow never draws.
//
// A header-less LLM-style upstream: a bucket of 2 at 5 a second, answers
// that take 3 s, 429s that come at once with retry-after-ms. The slow-start
// probe goes at 0 and is served at 3 s; the ramp sends four at 3 s, two are
// served (answers at 6 s), two refused at 3.01 s with retry-after-ms: 190.
func TestASlowSuccessDoesNotBoundTheRateBelowTheServers(t *testing.T) {
	p := &pacer{}
	t0 := testStart
	p.sent = 1
	p.answered(t0.Add(3*time.Second), false) // the probe, served
	p.servedSent(1, t0)
	p.sent = 5 // the ramp's four, sent at 3 s
	now := t0.Add(3*time.Second + 10*time.Millisecond)
	p.answered(now, true)
	p.throttled(now, false, 190*time.Millisecond, true, 4, t0.Add(3*time.Second))
	require.Equal(t, paceObserved, p.mode)
	// The wait alone bounds the rate to 1/0.19 = 5.26 a second (true: 5).
	t.Logf("rate after the 429: %.3f/s, unitCap %.3f/s", p.rate, p.unitCap)
	for i := 0; i < 200; i++ { // 20 s of requests waiting and being served
		p.tatV = p.slotsAt(now) + 20
		now = now.Add(100 * time.Millisecond)
		serve(p, now)
	}
	t.Logf("rate 20 s later: %.3f/s", p.rate)
	require.Greater(t, p.rate, 2.5, "a bucket at 5 a second paced at %.2f/s for 20 s after one 429", p.rate)
}

// Whatever the count of attempts out says, a quota found empty is held to
// one probe at a time for at most the bound: an attempt counted as out
// whose answer is never told (a path that forgot it) must not keep the
// upstream polling with nothing in flight for good.
func TestADryQuotaWaitsForAnAnswerAtMostTheBound(t *testing.T) {
	tr := New(nil)
	u := tr.newUpstream()
	now := testStart.Add(10 * time.Millisecond)
	now = drainWindow(&u.pacer, now, time.Millisecond)
	answer(&u.pacer, now, true, windowReading(40, 0, now))
	require.Positive(t, u.dry)
	u.sent++ // out, as far as the count goes, and never answered
	u.pacer.sentOne()
	turn := u.turnAt(now)
	start := now
	for end := now.Add(2 * u.bound); now.Before(end); now = now.Add(time.Millisecond) {
		at, _, again := u.recheck(now, &turn, 0)
		if again {
			turn = u.turnAt(now)
			continue
		}
		if at.IsZero() {
			require.LessOrEqual(t, now.Sub(start), u.bound+time.Second, "let go, but only after %v", now.Sub(start))
			return
		}
	}
	t.Fatalf("an attempt counted as out and never answered kept a dry quota polling for %v", 2*u.bound)
}

// With no bound (0), a shortfall the proven rate makes huge is capped, not
// converted past what a Duration holds (it came out negative).
func TestAShortfallWithNoBoundDoesNotOverflow(t *testing.T) {
	p := &pacer{coarse: true, proven: 1e-12, limit: 10}
	p.latest = reading{at: testStart, remaining: 0}
	got := p.shortfall(testStart, 1)
	assert.Positive(t, got)
	assert.LessOrEqual(t, got, maxShortfall)
}
