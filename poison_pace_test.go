//go:build go1.25

// Poisoning the pace: absurd statements that the pacer turns into a rate
// (a reset in year 9999, a window of 3000 years) rather than only a hold.
// Each test's comment names the failure it catches.

package retryhttp

import (
	"net/http"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp/retrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func poisonPaceCases() []poisonCase {
	openAIForever := func(time.Time) http.Header { return openAIHeaders(100, 0, "1000000h") }
	anthropic9999 := func(remaining int) func(time.Time) http.Header {
		return func(time.Time) http.Header {
			return anthropicHeaders(50, remaining, time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC))
		}
	}
	return []poisonCase{
		{name: "OpenAI remaining 0 reset 1000000h/200", status: 200, absurd: openAIForever, healthy: saneOpenAI},
		{name: "OpenAI remaining 0 reset 1000000h/429", status: 429, absurd: openAIForever, healthy: saneOpenAI},
		{name: "OpenAI remaining 0 reset 1000000h/then no headers", status: 200, absurd: openAIForever},
		// A pace of 49 requests over 8000 years: ~1e-8 per second.
		{name: "Anthropic reset in 9999 remaining 1 of 50", status: 200, absurd: anthropic9999(1), healthy: saneAnthropic},
		{name: "Anthropic reset in 9999 remaining 0 of 50/429", status: 429, absurd: anthropic9999(0), healthy: saneAnthropic},
		{name: "IETF window and reset of 99999999999s", status: 429,
			absurd: func(time.Time) http.Header {
				return hdr("Ratelimit", `"default";r=0;t=99999999999`, "Ratelimit-Policy", `"default";q=100;w=99999999999`)
			},
			healthy: saneIETF},
	}
}

// TestPoisonedPaceServesAgainWithinTheBound is
// TestPoisonedUpstreamServesAgainWithinTheBound for statements that poison
// the pace. The failure it catches: no request reaches the server again;
// every request is refused at once (OpenAI, IETF) or waits its whole queue
// wait and fails (Anthropic), the probe due at the bound included.
func TestPoisonedPaceServesAgainWithinTheBound(t *testing.T) {
	for _, c := range poisonPaceCases() {
		t.Run(c.name, func(t *testing.T) { runPoison(t, c) })
	}
}

// poisonedPace is an upstream with a bound of 2s that has just read an
// OpenAI bucket with 0 of 100 left, full again in 1000000h: a stated rate
// of 100 per 114 years, which would pace at the bound; the pacer forgets
// it and holds for the bound instead, then probes.
func poisonedPace(t *testing.T) (*upstream, time.Time, time.Duration) {
	t.Helper()
	const bound = 2 * time.Second
	u := &upstream{start: slowStart{phase: open}}
	u.bound = bound
	now := testStart
	pass{u: u}.observe(now, ParseRateLimits(openAIHeaders(100, 0, "1000000h"), now), 0, false, true)
	require.Zero(t, u.interval, "a pace at the bound is no pace: it is forgotten for a hold")
	require.Equal(t, now.Add(bound), u.hold.end, "the hold is cut to the bound")
	require.Equal(t, now.Add(bound), u.hold.reprobeAt, "and ends in a new probe")
	return u, now, bound
}

// While a new probe is due at the bound, no turn is handed out past it.
//
// The failure it catches: the first turn is at +4s, the next at +6s, +8s...
// The reading left the pace clock two slots in debt (syncRemaining:
// remaining 0 less the headroom), and each slot is as long as the bound;
// every request booked takes one more slot, and the transport refuses each
// of them at once (the turn is firm and past the queue wait) without giving
// the slot back.
func TestPoisonedPaceHandsOutNoTurnPastTheReprobe(t *testing.T) {
	u, now, _ := poisonedPace(t)
	for i := 0; i < 4; i++ {
		tn, _, _ := u.schedule(now, 0)
		assert.False(t, tn.at.After(u.hold.reprobeAt), "request %d: turn at +%v, past the new probe at +%v",
			i+1, tn.at.Sub(now), u.hold.reprobeAt.Sub(now))
	}
}

// When the hold cut to the bound ends, one probe goes.
//
// The failure it catches: the probe's turn is not paced (schedule, cold), so
// recheck books it a slot on the pace behind every slot booked before
// (pacing.go, recheck: "paced since it was booked: take a slot"): +8s after
// three refused requests. The turn is firm, so the transport refuses the
// probe at once and the upstream is never tried again while requests keep
// coming.
func TestPoisonedPaceLetsTheProbeGoAtTheBound(t *testing.T) {
	u, now, bound := poisonedPace(t)
	for i := 0; i < 3; i++ {
		u.schedule(now, 0) // refused at once by the transport, and gone
	}
	at := now.Add(bound)
	tn, _, p := u.schedule(at, 0)
	require.True(t, p.probe, "the hold cut to the bound ends in a new probe")
	wait, _, again := u.recheck(at, &tn, 0)
	require.False(t, again)
	assert.True(t, wait.IsZero(), "the probe must go now; it is told to wait until +%v", wait.Sub(at))
}

// With nothing in flight, the shortfall check holds a request at most the
// bound.
//
// The failure it catches: an Anthropic bucket with 1 of 50 left and a reset
// in year 9999 proves a refill of ~1.5e-8 per second, and shortfall waits
// one unit at that rate: 18249h. The turn is not firm, so every request
// waits its whole queue wait and fails; nothing is ever sent, so no reading
// corrects it.
func TestPoisonedShortfallIsBounded(t *testing.T) {
	const bound = 2 * time.Second
	u := &upstream{start: slowStart{phase: open}}
	u.bound = bound
	now := testStart
	_, _, p := u.schedule(now, 0)
	u.dispatch(&p)
	p.observe(now, ParseRateLimits(anthropicHeaders(50, 1, time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)), now), 0, false, true)
	tn, _, _ := u.schedule(now, 0)
	later := now.Add(10 * time.Second) // its turn came long ago; nothing is in flight
	at, _, again := u.recheck(later, &tn, 0)
	if again {
		// The statement was forgotten for a hold of the bound, and a new
		// probe is due: the request takes a place again, as the probe,
		// and goes now.
		tn, w, p := u.schedule(later, 0)
		require.Nil(t, w)
		require.True(t, p.probe)
		at, _, again = u.recheck(later, &tn, 0)
		require.False(t, again)
		assert.True(t, at.IsZero(), "the new probe must go now; told to wait until +%v", at.Sub(later))
		return
	}
	assert.LessOrEqual(t, at.Sub(later), bound, "told to wait %v with nothing in flight", at.Sub(later))
}

// A reading with quota to spare lets a request go within one interval,
// whatever an earlier reading of a larger quota said.
//
// The failure it catches: the first reading (1 of 1000 left, full again in
// 24h) set the capacity to 999 and the pace clock 998 slots ahead, the burst
// it allowed; the second (2 of 3 left) cuts the capacity to 2 but
// syncRemaining only ever moves the clock later, so the old burst becomes a
// debt of 997 slots of 2s: the next turn is 33 minutes away.
func TestPoisonedPaceShrinkingCapacityLeavesNoDebt(t *testing.T) {
	const bound = 2 * time.Second
	u := &upstream{start: slowStart{phase: open}}
	u.bound = bound
	now := testStart
	pass{u: u}.observe(now, ParseRateLimits(openAIHeaders(1000, 1, "24h"), now), 0, false, true)
	pass{u: u}.observe(now, ParseRateLimits(openAIHeaders(3, 2, "1s"), now), 0, false, true)
	tn, _, _ := u.schedule(now, 0)
	assert.LessOrEqual(t, tn.at.Sub(now), u.interval, "2 of 3 left; the turn is %v away (interval %v)", tn.at.Sub(now), u.interval)
}

func TestAShortBoundKeepsABucketOfOnePaced(t *testing.T) {
	// A bucket of one at 5 a second whose resets come in whole seconds
	// is paced by its 429s and successes (the observed mode), which began
	// at one a second. With WithMaxRetryAfter(time.Second) that pace was
	// one a bound, taken for a poisoned one: forgotten, held for the bound
	// and probed again, so every request waited a second (5x the ideal).
	// (The queue may wait a minute: by default it may wait only as long
	// as the bound, and 20 callers queue for 4 s.)
	for _, family := range []string{"anthropic", "github-bucket"} {
		for _, rounding := range []retrytest.Rounding{retrytest.RoundDown, retrytest.RoundNearest, retrytest.RoundUp} {
			w := world{family: family, rounding: rounding, retryAfter: retrytest.RetryAfterSeconds, load: workloads[2]}
			t.Run(w.String(), func(t *testing.T) {
				got := runWorld(t, w, func(base http.RoundTripper) http.RoundTripper {
					return New(base, WithMaxRetryAfter(time.Second), WithMaxQueueWait(time.Minute))
				})
				ratio := float64(got.wall) / float64(w.ideal())
				assert.Zero(t, got.failed, "%q", got.errs)
				assert.LessOrEqual(t, ratio, 1.5, "wall %v, ideal %v", got.wall, w.ideal())
			})
		}
	}
}
