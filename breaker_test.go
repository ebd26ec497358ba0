package retryhttp

import (
	"container/heap"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// brAt is the moment d after the tests' epoch.
func brAt(d time.Duration) time.Time { return testStart.Add(d) }

// brNew returns a breaker with cb's settings and no hook.
func brNew(cb CircuitBreaker) *breaker { return newBreaker(cb, nil) }

// brTrip fails b's attempts at now until it opens, requiring that it takes
// exactly n failures.
func brTrip(t *testing.T, b *breaker, now time.Time, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		require.Equal(t, BreakerClosed, b.state(now), "before failure %d", i)
		ok, probe, _, _ := b.allow(now)
		require.True(t, ok)
		require.Zero(t, probe)
		b.failure(now, 0, 0)
	}
	require.Equal(t, BreakerOpen, b.state(now))
}

// brClosedChan reports whether ch is closed (nil counts as not closed).
func brClosedChan(ch <-chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestCircuitBreakerDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   CircuitBreaker
		want CircuitBreaker
	}{
		{"zero value", CircuitBreaker{},
			CircuitBreaker{Failures: 5, Window: time.Second, OpenFor: 500 * time.Millisecond, MaxOpenFor: 2 * time.Second, Probes: 1, Spread: 250 * time.Millisecond, ProbeInterval: 200 * time.Millisecond}},
		{"max open for follows open for", CircuitBreaker{OpenFor: 3 * time.Second},
			CircuitBreaker{Failures: 5, Window: time.Second, OpenFor: 3 * time.Second, MaxOpenFor: 12 * time.Second, Probes: 1, Spread: 250 * time.Millisecond, ProbeInterval: 200 * time.Millisecond}},
		{"max open for below open for is raised", CircuitBreaker{OpenFor: 3 * time.Second, MaxOpenFor: time.Second},
			CircuitBreaker{Failures: 5, Window: time.Second, OpenFor: 3 * time.Second, MaxOpenFor: 3 * time.Second, Probes: 1, Spread: 250 * time.Millisecond, ProbeInterval: 200 * time.Millisecond}},
		{"negatives", CircuitBreaker{Failures: -1, Window: -1, OpenFor: -1, MaxOpenFor: -1, Probes: -1, Spread: -1, ProbeInterval: -1},
			CircuitBreaker{Failures: 5, Window: time.Second, OpenFor: 500 * time.Millisecond, MaxOpenFor: 2 * time.Second, Probes: 1, Spread: 0, ProbeInterval: 0}},
		{"kept", CircuitBreaker{Failures: 3, Window: 5 * time.Second, OpenFor: time.Second, MaxOpenFor: 10 * time.Second, Probes: 2, Spread: time.Second, ProbeInterval: time.Second},
			CircuitBreaker{Failures: 3, Window: 5 * time.Second, OpenFor: time.Second, MaxOpenFor: 10 * time.Second, Probes: 2, Spread: time.Second, ProbeInterval: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.in.withDefaults())
		})
	}
	assert.Nil(t, newBreaker(CircuitBreaker{Disabled: true}, nil))

	var c config
	WithCircuitBreaker(CircuitBreaker{Failures: 7}).apply(&c)
	assert.Equal(t, CircuitBreaker{Failures: 7}, c.breaker)
}

func TestBreakerStateString(t *testing.T) {
	assert.Equal(t, "closed", BreakerClosed.String())
	assert.Equal(t, "open", BreakerOpen.String())
	assert.Equal(t, "half-open", BreakerHalfOpen.String())
	assert.Equal(t, "unknown", BreakerState(42).String())
}

func TestBreakerOpensOnARunOfFailures(t *testing.T) {
	b := brNew(CircuitBreaker{})
	now := brAt(0)
	for i := 0; i < 4; i++ {
		b.failure(now, 0, 0)
	}
	b.success(now, 0) // any success ends the run
	for i := 0; i < 4; i++ {
		b.failure(now, 0, 0)
	}
	assert.Equal(t, BreakerClosed, b.state(now), "4 in a row is not enough")
	b.failure(now, 0, 0)
	assert.Equal(t, BreakerOpen, b.state(now), "the 5th in a row opens it")

	ok, probe, retryAt, changed := b.allow(now.Add(499 * time.Millisecond))
	assert.False(t, ok)
	assert.Zero(t, probe)
	assert.Equal(t, now.Add(500*time.Millisecond), retryAt, "open for OpenFor")
	assert.NotNil(t, changed)
	assert.False(t, brClosedChan(changed))
}

// An upstream that serves most requests never trips the breaker, however
// its failures bunch: in every slot of the window more outcomes succeed than
// fail, in random order, so runs of 5 or more failures happen.
func TestBreakerMostlyServingNeverTrips(t *testing.T) {
	rnd := rand.New(rand.NewPCG(4, 4))
	b := brNew(CircuitBreaker{})
	now := brAt(0)
	longest, run := 0, 0
	for slot := 0; slot < 500; slot++ { // 50s in 100ms slots
		fails := rnd.IntN(20)
		oks := fails + 1 + rnd.IntN(3)
		outcomes := make([]bool, 0, fails+oks)
		for i := 0; i < oks; i++ {
			outcomes = append(outcomes, true)
		}
		for i := 0; i < fails; i++ {
			outcomes = append(outcomes, false)
		}
		rnd.Shuffle(len(outcomes), func(i, j int) { outcomes[i], outcomes[j] = outcomes[j], outcomes[i] })
		step := 100 * time.Millisecond / time.Duration(len(outcomes))
		for i, ok := range outcomes {
			at := now.Add(time.Duration(slot)*100*time.Millisecond + time.Duration(i)*step)
			allowed, _, _, _ := b.allow(at)
			require.True(t, allowed, "slot %d", slot)
			if ok {
				b.success(at, 0)
				run = 0
			} else {
				b.failure(at, 0, 0)
				run++
				longest = max(longest, run)
			}
		}
	}
	assert.Equal(t, BreakerClosed, b.state(now.Add(time.Minute)))
	assert.GreaterOrEqual(t, longest, 8, "the test must produce long runs of failures to mean anything")
}

// An upstream that dies after serving everything trips the breaker once
// failures make half of the last Window: at 100 requests a second and
// Window 1s, after 50 failures (half a second), not after 5.
func TestBreakerTripsAfterHealthyTraffic(t *testing.T) {
	b := brNew(CircuitBreaker{})
	const step = 10 * time.Millisecond
	var now time.Time
	for i := 0; i < 200; i++ { // 2s of successes
		now = brAt(time.Duration(i) * step)
		b.success(now, 0)
	}
	failures := 0
	for i := 200; b.state(now) == BreakerClosed; i++ {
		require.Less(t, i, 400)
		now = brAt(time.Duration(i) * step)
		b.failure(now, 0, 0)
		failures++
	}
	// The window at 2490ms holds slots 1500ms..2499ms: successes in
	// 1500..1999 (50), failures in 2000..2490 (50).
	assert.Equal(t, 50, failures)
	assert.Equal(t, brAt(2490*time.Millisecond), now)
}

func TestBreakerHalfOpenProbe(t *testing.T) {
	b := brNew(CircuitBreaker{})
	opened := brAt(0)
	brTrip(t, b, opened, 5)

	// A caller refused while open waits on changed.
	_, _, _, waiter := b.allow(opened.Add(100 * time.Millisecond))

	probeAt := opened.Add(500 * time.Millisecond)
	ok, probe, _, _ := b.allow(probeAt)
	require.True(t, ok, "the first caller once the open period ends is the probe")
	require.NotZero(t, probe)
	assert.Equal(t, BreakerHalfOpen, b.state(probeAt))
	assert.True(t, brClosedChan(waiter), "going half-open is a change")

	ok, p2, retryAt, changed := b.allow(probeAt.Add(time.Millisecond))
	assert.False(t, ok, "one probe at a time")
	assert.Zero(t, p2)
	assert.Equal(t, probeAt.Add(2*time.Second), retryAt, "when the probe out counts as lost")
	require.NotNil(t, changed)

	closedAt := probeAt.Add(300 * time.Millisecond)
	b.success(closedAt, probe)
	assert.True(t, brClosedChan(changed), "waiters learn of the probe's success")
	assert.Equal(t, BreakerClosed, b.state(closedAt))
	ok, p3, _, _ := b.allow(closedAt)
	assert.True(t, ok)
	assert.Zero(t, p3, "closed: no probes")

	// The open time went back to OpenFor, and the count starts afresh.
	brTrip(t, b, closedAt, 5)
	_, _, retryAt, _ = b.allow(closedAt)
	assert.Equal(t, closedAt.Add(500*time.Millisecond), retryAt)
}

// While probes keep failing, each open period doubles up to MaxOpenFor; a
// success resets it.
func TestBreakerOpenPeriodDoubles(t *testing.T) {
	tests := []struct {
		name string
		cb   CircuitBreaker
		want []time.Duration
	}{
		{"defaults", CircuitBreaker{}, []time.Duration{500, 1000, 2000, 2000, 2000}},
		{"custom", CircuitBreaker{OpenFor: time.Second, MaxOpenFor: 3 * time.Second}, []time.Duration{1000, 2000, 3000, 3000}},
		{"no doubling", CircuitBreaker{OpenFor: time.Second, MaxOpenFor: time.Second}, []time.Duration{1000, 1000, 1000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := brNew(tt.cb)
			now := brAt(0)
			for round := 0; round < 2; round++ {
				brTrip(t, b, now, 5)
				for i, want := range tt.want {
					_, _, retryAt, _ := b.allow(now)
					require.Equal(t, want*time.Millisecond, retryAt.Sub(now), "round %d, period %d", round, i)
					now = retryAt
					ok, probe, _, _ := b.allow(now)
					require.True(t, ok)
					require.NotZero(t, probe)
					if i < len(tt.want)-1 {
						b.failure(now, probe, 0)
					} else {
						b.success(now, probe)
					}
				}
				require.Equal(t, BreakerClosed, b.state(now))
			}
		})
	}
}

// A Retry-After on the failure that opens the breaker keeps it open at least
// that long; a shorter one does not shorten the open period.
func TestBreakerRetryAfter(t *testing.T) {
	b := brNew(CircuitBreaker{})
	now := brAt(0)
	for i := 0; i < 4; i++ {
		b.failure(now, 0, 0)
	}
	b.failure(now, 0, 5*time.Second)
	_, _, retryAt, _ := b.allow(now)
	assert.Equal(t, now.Add(5*time.Second), retryAt)

	now = retryAt
	_, probe, _, _ := b.allow(now)
	b.failure(now, probe, 300*time.Millisecond) // the doubled 1s is longer
	_, _, retryAt, _ = b.allow(now)
	assert.Equal(t, now.Add(time.Second), retryAt)

	now = retryAt
	_, probe, _, _ = b.allow(now)
	b.failure(now, probe, 10*time.Second) // longer than MaxOpenFor: the server wins
	_, _, retryAt, _ = b.allow(now)
	assert.Equal(t, now.Add(10*time.Second), retryAt)
}

func TestBreakerAbandon(t *testing.T) {
	b := brNew(CircuitBreaker{})
	now := brAt(0)
	brTrip(t, b, now, 5)
	now = now.Add(500 * time.Millisecond)
	ok, probe, _, _ := b.allow(now)
	require.True(t, ok)
	ok, _, _, changed := b.allow(now)
	require.False(t, ok)

	b.abandon(0) // not a probe: nothing happens
	b.abandon(probe + 100)
	assert.False(t, brClosedChan(changed), "an id that holds no slot wakes nobody")

	b.abandon(probe)
	assert.True(t, brClosedChan(changed), "a freed slot wakes the waiters")
	assert.Equal(t, BreakerHalfOpen, b.state(now), "no verdict: still half-open")
	ok, probe2, _, _ := b.allow(now)
	require.True(t, ok, "a waiter takes the probe's slot at once")
	assert.NotZero(t, probe2)

	b.abandon(probe) // twice: no slot to free
	ok, _, _, _ = b.allow(now)
	assert.False(t, ok)

	b.success(now, probe2)
	assert.Equal(t, BreakerClosed, b.state(now))
}

// A probe that goes unanswered for MaxOpenFor no longer holds the others
// back; its answer still counts when it comes.
func TestBreakerLostProbe(t *testing.T) {
	b := brNew(CircuitBreaker{})
	now := brAt(0)
	brTrip(t, b, now, 5)
	first := now.Add(500 * time.Millisecond)
	ok, slow, _, _ := b.allow(first)
	require.True(t, ok)

	ok, _, retryAt, _ := b.allow(first.Add(2*time.Second - 1))
	require.False(t, ok)
	require.Equal(t, first.Add(2*time.Second), retryAt)

	second := first.Add(2 * time.Second)
	ok, next, _, _ := b.allow(second)
	require.True(t, ok, "the slow probe counts as lost")
	require.NotZero(t, next)
	ok, _, retryAt, _ = b.allow(second)
	require.False(t, ok, "and the new probe holds the slot")
	assert.Equal(t, second.Add(2*time.Second), retryAt)

	b.success(second.Add(time.Second), slow) // the slow one answers after all
	assert.Equal(t, BreakerClosed, b.state(second.Add(time.Second)), "a late success still shows the upstream serves")

	b.failure(second.Add(time.Second), next, 0) // now an ordinary failure: one of 5
	assert.Equal(t, BreakerClosed, b.state(second.Add(time.Second)))
}

// Outcomes of attempts that went before the breaker's latest change are
// older than what it knows: they neither close nor reopen it.
func TestBreakerStaleOutcomesIgnored(t *testing.T) {
	b := brNew(CircuitBreaker{})
	now := brAt(0)
	brTrip(t, b, now, 5)

	b.success(now, 0) // an attempt let go before it opened
	assert.Equal(t, BreakerOpen, b.state(now))

	now = now.Add(500 * time.Millisecond)
	ok, old, _, _ := b.allow(now) // probe of the first half-open period
	require.True(t, ok)
	b.success(now, 0)
	b.failure(now, 0, time.Hour)
	assert.Equal(t, BreakerHalfOpen, b.state(now), "a non-probe's answer decides nothing")

	// The probe counts as lost, a new one goes and fails: open again.
	now = now.Add(2 * time.Second)
	ok, next, _, _ := b.allow(now)
	require.True(t, ok)
	b.failure(now, next, 0)
	require.Equal(t, BreakerOpen, b.state(now))
	b.success(now, old)
	assert.Equal(t, BreakerOpen, b.state(now), "an answer while open is ignored")

	// Next half-open period: the old probe's failure is from before it.
	now = now.Add(time.Second)
	ok, cur, _, _ := b.allow(now)
	require.True(t, ok)
	b.failure(now, old, 0)
	assert.Equal(t, BreakerHalfOpen, b.state(now))
	ok, _, _, _ = b.allow(now)
	assert.False(t, ok, "the old probe held no slot of this period")
	b.success(now, cur)
	assert.Equal(t, BreakerClosed, b.state(now))
}

func TestBreakerSeveralProbes(t *testing.T) {
	b := brNew(CircuitBreaker{Probes: 3})
	now := brAt(0)
	brTrip(t, b, now, 5)
	now = now.Add(500 * time.Millisecond)
	var probes []uint64
	for i := 0; i < 3; i++ {
		ok, p, _, _ := b.allow(now)
		require.True(t, ok, "probe %d", i)
		probes = append(probes, p)
	}
	ok, _, _, changed := b.allow(now)
	require.False(t, ok, "three at a time")

	b.success(now, probes[0])
	assert.Equal(t, BreakerHalfOpen, b.state(now), "one success of three is not enough")
	assert.True(t, brClosedChan(changed), "its slot is free for a waiter")
	ok, p4, _, _ := b.allow(now)
	require.True(t, ok)
	b.success(now, probes[1])
	b.success(now, p4)
	assert.Equal(t, BreakerClosed, b.state(now), "three successes close it")
	b.failure(now, probes[2], 0) // the last probe's answer is now an ordinary outcome
	assert.Equal(t, BreakerClosed, b.state(now))

	// One failed probe of three reopens it.
	brTrip(t, b, now, 4)
	now = now.Add(500 * time.Millisecond)
	_, p1, _, _ := b.allow(now)
	_, p2, _, _ := b.allow(now)
	b.success(now, p1)
	b.failure(now, p2, 0)
	assert.Equal(t, BreakerOpen, b.state(now))
}

func TestBreakerOnChange(t *testing.T) {
	var got []transition
	var b *breaker
	b = newBreaker(CircuitBreaker{}, func(from, to BreakerState) {
		got = append(got, transition{from, to})
		b.state(brAt(0)) // the hook may read the breaker: no deadlock
	})
	now := brAt(0)
	brTrip(t, b, now, 5)
	now = now.Add(500 * time.Millisecond)
	b.state(now) // an open period that ended shows half-open
	_, probe, _, _ := b.allow(now)
	b.failure(now, probe, 0)
	now = now.Add(time.Second)
	_, probe, _, _ = b.allow(now)
	b.success(now, probe)
	assert.Equal(t, []transition{
		{BreakerClosed, BreakerOpen},
		{BreakerOpen, BreakerHalfOpen},
		{BreakerHalfOpen, BreakerOpen},
		{BreakerOpen, BreakerHalfOpen},
		{BreakerHalfOpen, BreakerClosed},
	}, got)
}

func TestBreakerReleaseAt(t *testing.T) {
	b := brNew(CircuitBreaker{})
	now := brAt(0)
	assert.Equal(t, now, b.releaseAt(now, 0.5), "never opened: go now")

	brTrip(t, b, now, 5)
	assert.Equal(t, now, b.releaseAt(now, 0.5), "not closed: ask allow again now")
	now = now.Add(500 * time.Millisecond)
	_, probe, _, _ := b.allow(now)
	b.success(now, probe)

	tests := []struct {
		woke time.Duration // after the breaker closed
		rnd  float64
		want time.Duration // after the breaker closed
	}{
		{0, 0, 0},
		{0, 0.5, 125 * time.Millisecond},
		{0, 0.999, 249750 * time.Microsecond},
		{50 * time.Millisecond, 0.5, 150 * time.Millisecond},  // spread over what is left
		{250 * time.Millisecond, 0.5, 250 * time.Millisecond}, // spread over: go now
		{time.Second, 0.9, time.Second},
		{0, -1, 0},                     // out of range: clamped
		{0, 2, 250 * time.Millisecond}, // out of range: clamped
	}
	for _, tt := range tests {
		got := b.releaseAt(now.Add(tt.woke), tt.rnd)
		assert.Equal(t, tt.want, got.Sub(now), "woke %v rnd %v", tt.woke, tt.rnd)
	}

	noSpread := brNew(CircuitBreaker{Spread: -1})
	brTrip(t, noSpread, now, 5)
	later := now.Add(500 * time.Millisecond)
	_, probe, _, _ = noSpread.allow(later)
	noSpread.success(later, probe)
	assert.Equal(t, later, noSpread.releaseAt(later, 0.9))
}

func TestBreakerDisabled(t *testing.T) {
	var b *breaker // what newBreaker returns when Disabled
	now := brAt(0)
	for i := 0; i < 100; i++ {
		ok, probe, retryAt, changed := b.allow(now)
		require.True(t, ok)
		require.Zero(t, probe)
		require.True(t, retryAt.IsZero())
		require.Nil(t, changed)
		b.failure(now, probe, time.Minute)
	}
	b.success(now, 0)
	b.abandon(1)
	assert.Equal(t, BreakerClosed, b.state(now))
	assert.Equal(t, now, b.releaseAt(now, 0.5))
}

// Callers blocked on changed are all released by the probe's success.
func TestBreakerWaitersWake(t *testing.T) {
	b := brNew(CircuitBreaker{})
	now := brAt(0)
	brTrip(t, b, now, 5)
	now = now.Add(500 * time.Millisecond)
	_, probe, _, _ := b.allow(now)

	const waiters = 20
	var wg sync.WaitGroup
	var parked sync.WaitGroup
	var through atomic.Int32
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		parked.Add(1)
		go func() {
			defer wg.Done()
			ok, _, _, changed := b.allow(now)
			parked.Done()
			for !ok {
				<-changed
				ok, _, _, changed = b.allow(now)
			}
			through.Add(1)
		}()
	}
	parked.Wait()
	assert.Zero(t, through.Load(), "nobody passes while the probe is out")
	b.success(now, probe)
	wg.Wait()
	assert.Equal(t, int32(waiters), through.Load())
}

// Many goroutines use one breaker at once (run with -race). The hook must
// see the transitions as a chain, in the order they happened.
func TestBreakerConcurrent(t *testing.T) {
	var mu sync.Mutex
	var got []transition
	b := newBreaker(CircuitBreaker{Probes: 2}, func(from, to BreakerState) {
		mu.Lock()
		got = append(got, transition{from, to})
		mu.Unlock()
	})
	var clock atomic.Int64 // milliseconds since the epoch
	now := func() time.Time { return brAt(time.Duration(clock.Add(1)) * time.Millisecond) }

	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(g), 7))
			for i := 0; i < 2000; i++ {
				ok, probe, _, changed := b.allow(now())
				if !ok {
					select {
					case <-changed:
					default:
					}
					b.state(now())
					continue
				}
				switch rnd.IntN(10) {
				case 0, 1, 2, 3, 4, 5:
					b.failure(now(), probe, 0)
				case 6:
					b.abandon(probe)
				default:
					b.success(now(), probe)
				}
				b.releaseAt(now(), rnd.Float64())
			}
		}()
	}
	wg.Wait()

	b.mu.Lock()
	assert.LessOrEqual(t, len(b.live), 2)
	b.mu.Unlock()
	// Read the state before taking mu: state may make a transition, and
	// the hook takes mu to record it.
	final := b.state(brAt(time.Duration(clock.Load()) * time.Millisecond))
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, got, "failures must have opened it at least once")
	prev := BreakerClosed
	for i, tr := range got {
		require.Equal(t, prev, tr.from, "transition %d", i)
		require.NotEqual(t, tr.from, tr.to)
		prev = tr.to
	}
	assert.Equal(t, final, prev)
}

// The attempts a dead upstream receives per minute.
//
// The documented bound (CircuitBreaker): a dead upstream that fails fast
// receives Failures attempts, and then Probes per open period; the periods
// last OpenFor, 2·OpenFor, 4·OpenFor, ... up to MaxOpenFor. When failures
// take a latency L to come back, the attempts already in flight when the
// breaker opens add at most R·L at an offered rate R.
func breakerBound(cb CircuitBreaker, span time.Duration, rate int, latency time.Duration) int {
	cb = cb.withDefaults()
	inFlight := int((time.Duration(rate)*latency + time.Second - 1) / time.Second)
	probes := 0
	d, elapsed := cb.OpenFor, time.Duration(0)
	for elapsed+d <= span {
		elapsed += d
		probes += cb.Probes
		d = min(2*d, cb.MaxOpenFor)
	}
	return cb.Failures + inFlight + probes
}

func TestDeadUpstreamAttemptsPerMinute(t *testing.T) {
	const rate = 100 // requests offered a second
	span := time.Minute

	t.Run("breaker, failing fast", func(t *testing.T) {
		t.Parallel()
		res := simulateDeadUpstream(deadSim{rate: rate, breaker: brNew(CircuitBreaker{})}, span)
		bound := breakerBound(CircuitBreaker{}, span, rate, 0)
		assert.Equal(t, 36, bound, "5 failures, then probes at 0.5s, 1.5s, 3.5s, 5.5s, ... after opening")
		assert.Equal(t, bound, res.attempts, "a fast failing upstream meets the bound exactly")
		assert.Equal(t, 6000, res.requests)
	})
	t.Run("breaker, failing after 100ms", func(t *testing.T) {
		t.Parallel()
		res := simulateDeadUpstream(deadSim{rate: rate, latency: 100 * time.Millisecond, breaker: brNew(CircuitBreaker{})}, span)
		assert.LessOrEqual(t, res.attempts, breakerBound(CircuitBreaker{}, span, rate, 100*time.Millisecond))
		assert.Greater(t, res.attempts, 20)
	})
	t.Run("breaker, failing after 3s (probes count as lost)", func(t *testing.T) {
		t.Parallel()
		// Failures slower than MaxOpenFor: another probe may go while one
		// hangs. Probes still go at least OpenFor apart: the next one goes
		// either when the last counts as lost (MaxOpenFor after it) or when
		// a new open period ends, at least OpenFor after the failure that
		// began it, and no probe goes between that failure and its end.
		res := simulateDeadUpstream(deadSim{rate: rate, latency: 3 * time.Second, breaker: brNew(CircuitBreaker{})}, span)
		bound := 5 + 300 + int(span/(500*time.Millisecond)) + 1 // failures, in flight, one probe per OpenFor
		assert.LessOrEqual(t, res.attempts, bound)
		t.Logf("attempts: %d (bound %d)", res.attempts, bound)
	})
	t.Run("custom breaker", func(t *testing.T) {
		t.Parallel()
		cb := CircuitBreaker{Failures: 10, OpenFor: time.Second, MaxOpenFor: 8 * time.Second, Probes: 2}
		res := simulateDeadUpstream(deadSim{rate: rate, breaker: brNew(cb)}, span)
		bound := breakerBound(cb, span, rate, 0)
		assert.Equal(t, 10+2*(1+1+1+6), bound) // periods 1, 2, 4, then 8s: 7s, then 6 × 8s by 55s
		assert.LessOrEqual(t, res.attempts, bound)
	})
	t.Run("budget alone", func(t *testing.T) {
		t.Parallel()
		rb := RetryBudget{}.withDefaults()
		res := simulateDeadUpstream(deadSim{rate: rate, budget: newBudget(RetryBudget{})}, span)
		// RetryBudget's bound over a minute from a standing start:
		// Ratio × requests + MinPerSecond × Window × ⌈minute / Window⌉.
		bound := int(rb.Ratio*float64(res.requests) + rb.MinPerSecond*rb.Window.Seconds()*6)
		assert.Equal(t, 1800, bound)
		assert.LessOrEqual(t, res.retries, bound)
		assert.Equal(t, res.requests+res.retries, res.attempts)
		assert.Greater(t, res.retries, bound*3/4, "the budget lets retries go while it has some")
		assert.Greater(t, res.refused, 0)
	})
	t.Run("breaker and budget", func(t *testing.T) {
		t.Parallel()
		res := simulateDeadUpstream(deadSim{rate: rate, breaker: brNew(CircuitBreaker{}), budget: newBudget(RetryBudget{})}, span)
		assert.Equal(t, 36, res.attempts)
	})
	t.Run("neither", func(t *testing.T) {
		t.Parallel()
		res := simulateDeadUpstream(deadSim{rate: rate}, span)
		assert.Greater(t, res.attempts, 5*6000, "without them every request makes its 6 attempts (the last ones after the minute)")
	})
}

// deadSim describes a simulated client in front of a dead upstream: rate
// requests a second, each retried up to 5 times 1s apart within a 10s
// deadline, waiting for the breaker while its deadline allows.
type deadSim struct {
	rate    int
	latency time.Duration // how long the upstream takes to fail an attempt
	breaker *breaker
	budget  *budget
}

type deadResult struct {
	requests, attempts, retries int
	refused                     int // retries the budget refused
	circuitOpen                 int // requests that could not wait for the breaker
}

type simRequest struct {
	start    time.Time
	attempts int
	token    int // the try event that is current; older ones are void
}

type simEvent struct {
	at    time.Time
	seq   int
	kind  int // simArrive, simTry, simAnswer
	req   *simRequest
	token int
	probe uint64
}

const (
	simArrive = iota
	simTry
	simAnswer
)

type simQueue []*simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(*simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// simulateDeadUpstream runs the client of s against an upstream that fails
// every attempt, for span of simulated time, and counts what reached it.
func simulateDeadUpstream(s deadSim, span time.Duration) deadResult {
	const (
		maxRetries = 5
		backoff    = time.Second
		deadline   = 10 * time.Second
	)
	var res deadResult
	var q simQueue
	seq := 0
	push := func(e *simEvent) {
		seq++
		e.seq = seq
		heap.Push(&q, e)
	}
	end := brAt(span)
	interval := time.Second / time.Duration(s.rate)
	for at := brAt(0); at.Before(end); at = at.Add(interval) {
		push(&simEvent{at: at, kind: simArrive, req: &simRequest{start: at}})
	}
	// Requests waiting for the breaker, by the channel that wakes them,
	// with the token of the try they wait for.
	type waiter struct {
		r     *simRequest
		token int
	}
	waiting := map[<-chan struct{}][]waiter{}
	retryLater := func(r *simRequest, at time.Time) {
		r.token++
		push(&simEvent{at: at, kind: simTry, req: r, token: r.token})
	}
	try := func(r *simRequest, now time.Time) {
		ok, probe, retryAt, changed := s.breaker.allow(now)
		if !ok {
			if retryAt.After(r.start.Add(deadline)) {
				res.circuitOpen++
				return
			}
			retryLater(r, retryAt)
			waiting[changed] = append(waiting[changed], waiter{r, r.token})
			return
		}
		if r.attempts > 0 {
			if !s.budget.withdraw(now) {
				s.breaker.abandon(probe)
				res.refused++
				return
			}
			res.retries++
		}
		r.attempts++
		res.attempts++
		push(&simEvent{at: now.Add(s.latency), kind: simAnswer, req: r, probe: probe})
	}
	for q.Len() > 0 {
		e := heap.Pop(&q).(*simEvent)
		if !e.at.Before(end) {
			break
		}
		now := e.at
		switch e.kind {
		case simArrive:
			res.requests++
			s.budget.deposit(now)
			try(e.req, now)
		case simTry:
			if e.token == e.req.token {
				try(e.req, now)
			}
		case simAnswer:
			s.breaker.failure(now, e.probe, 0)
			if e.req.attempts <= maxRetries && !now.Add(backoff).After(e.req.start.Add(deadline)) {
				retryLater(e.req, now.Add(backoff))
			}
		}
		for ch, ws := range waiting { // coordinated waiting: wake on the breaker's change
			if brClosedChan(ch) {
				delete(waiting, ch)
				for _, w := range ws {
					if w.token == w.r.token { // still waiting: not tried since
						retryLater(w.r, now)
					}
				}
			}
		}
	}
	return res
}

// While callers wait, the breaker probes every ProbeInterval however long
// the open period has grown; with no one waiting, the open period (and its
// doubling) is as before; a Retry-After still holds.
func TestBreakerProbesOftenWhileCallersWait(t *testing.T) {
	b := brNew(CircuitBreaker{})
	now := brAt(0)
	brTrip(t, b, now, 5)
	assert.Equal(t, now.Add(200*time.Millisecond), b.next(now), "a caller that waits may probe after ProbeInterval")
	ok, _, retryAt, _ := b.allow(now.Add(200 * time.Millisecond))
	assert.False(t, ok, "no one waits: the open period is OpenFor")
	assert.Equal(t, now.Add(500*time.Millisecond), retryAt)

	seat := b.enter()
	var opened []time.Duration
	for i := 0; i < 6; i++ { // the upstream stays down
		_, _, retryAt, _ = b.allow(now)
		assert.Equal(t, now.Add(200*time.Millisecond), retryAt, "probe %d: every ProbeInterval, not doubling", i)
		now = retryAt
		ok, probe, _, _ := b.allow(now)
		require.True(t, ok)
		require.NotZero(t, probe)
		b.failure(now, probe, 0)
		opened = append(opened, b.openUntil.Sub(now))
	}
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second}, opened,
		"the doubling goes on, for when no one waits")
	b.leave()
	_, _, retryAt, _ = b.allow(now)
	assert.Equal(t, now.Add(2*time.Second), retryAt, "no one waits any more: back to the doubled period")
	assert.Equal(t, uint64(1), seat)

	// A Retry-After on the failure holds, waiters or not.
	b = brNew(CircuitBreaker{})
	now = brAt(0)
	for i := 0; i < 5; i++ {
		b.failure(now, 0, 3*time.Second)
	}
	require.Equal(t, BreakerOpen, b.state(now))
	b.enter()
	_, _, retryAt, _ = b.allow(now)
	assert.Equal(t, now.Add(3*time.Second), retryAt)

	// ProbeInterval < 0: no shortening.
	b = brNew(CircuitBreaker{ProbeInterval: -1})
	brTrip(t, b, now, 5)
	b.enter()
	_, _, retryAt, _ = b.allow(now)
	assert.Equal(t, now.Add(500*time.Millisecond), retryAt)
	assert.Equal(t, now.Add(500*time.Millisecond), b.next(now))
}

// The callers that waited through an outage are let go in the order they
// came: the first at once, the last at the end of the spread.
func TestBreakerReleasesWaitersInArrivalOrder(t *testing.T) {
	b := brNew(CircuitBreaker{})
	now := brAt(0)
	early := b.enter() // a seat from before the outage: not of it
	b.leave()
	brTrip(t, b, now, 5)
	var seats []uint64
	for i := 0; i < 5; i++ {
		seats = append(seats, b.enter())
	}
	now = now.Add(200 * time.Millisecond)
	_, probe, _, _ := b.allow(now)
	b.success(now, probe)
	require.Equal(t, BreakerClosed, b.state(now))
	var at []time.Duration
	for _, s := range seats {
		at = append(at, b.releaseAt(now, b.place(s)).Sub(now))
	}
	assert.Equal(t, []time.Duration{0, 50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond}, at)
	assert.Zero(t, b.place(early))
	assert.Zero(t, b.place(seats[4]+1), "came after the close")
}
