package retryhttp

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The adaptive concurrency limit alone, in simulated time: the tests hand it
// the time and the outcomes, as the transport does.

// limDriver sends attempts through a limiter and answers them, in simulated
// time.
type limDriver struct {
	t   *testing.T
	l   *concurrencyLimit
	now time.Time
}

func newLimDriver(t *testing.T, a AdaptiveConcurrency) *limDriver {
	return &limDriver{t: t, l: newConcurrencyLimit(a), now: testStart}
}

// send takes a slot at once, as admit does, and stamps the ticket; it fails
// the test if the attempt would have to queue.
func (d *limDriver) send() limitTicket {
	d.t.Helper()
	tk, ok := d.l.fast()
	if !ok {
		var w *limitWaiter
		tk, w, _ = d.l.acquire()
		require.Nil(d.t, w, "the attempt would queue")
	}
	tk.sentAt = d.now
	return tk
}

// room reports whether an attempt may go at once (without queueing it).
func (d *limDriver) room() bool {
	if !d.l.learned.Load() {
		return true
	}
	d.l.mu.Lock()
	defer d.l.mu.Unlock()
	return len(d.l.queue) == 0 && d.l.roomLocked()
}

// answer gives the attempt's outcome after d of latency (from its send) and
// releases its slot; it returns whether a refusal was taken as "at
// capacity".
func (d *limDriver) answer(tk limitTicket, s limitSignal, after time.Duration) bool {
	capacity, _, _ := d.l.observe(tk, s, tk.sentAt.Add(after))
	d.l.release(tk.epoch)
	return capacity
}

// round sends n attempts at once (as many as the limit lets go), answers
// them all after latency, and moves the clock on by latency. It returns how
// many went.
func (d *limDriver) round(n int, s limitSignal, latency func() time.Duration) int {
	var sent []limitTicket
	for len(sent) < n && d.room() {
		sent = append(sent, d.send())
	}
	for _, tk := range sent {
		d.answer(tk, s, latency())
	}
	d.now = d.now.Add(latency())
	return len(sent)
}

// trip keeps as many attempts in flight as the limit lets go for one
// round trip: a limit's worth of answers, each followed by as many sends as
// there is room for, the oldest answered first, latency apart.
func (d *limDriver) trip(s limitSignal, latency time.Duration) {
	var q []limitTicket
	for d.room() {
		q = append(q, d.send())
	}
	for n := len(q); n > 0; n-- {
		d.now = d.now.Add(latency / time.Duration(len(q)))
		d.answer(q[0], s, latency)
		q = q[1:]
		for d.room() {
			q = append(q, d.send())
		}
	}
	for _, tk := range q {
		d.answer(tk, s, latency)
	}
}

func (d *limDriver) limit() int { l, _ := d.l.snapshot(); return l }

// fill sends as many attempts as the limit lets go, in order, for the test
// to answer.
func (d *limDriver) fill() []limitTicket {
	var out []limitTicket
	for d.room() {
		out = append(out, d.send())
	}
	return out
}

func fixed(d time.Duration) func() time.Duration { return func() time.Duration { return d } }

func TestAdaptiveConcurrencyDefaults(t *testing.T) {
	assert.Equal(t, AdaptiveConcurrency{Min: 1, Max: 1000, Backoff: 0.9, LatencyTolerance: 2}, AdaptiveConcurrency{}.withDefaults())
	assert.Equal(t, AdaptiveConcurrency{Initial: 5, Min: 5, Max: 5, Backoff: 0.9, LatencyTolerance: -1},
		AdaptiveConcurrency{Initial: 2, Min: 5, Max: 3, Backoff: 1.5, LatencyTolerance: -1}.withDefaults(), "brought into range")
	assert.Equal(t, 1.0, AdaptiveConcurrency{LatencyTolerance: 0.5}.withDefaults().LatencyTolerance, "a tolerance below 1 would judge the baseline itself slower")
	assert.Nil(t, newConcurrencyLimit(AdaptiveConcurrency{Disabled: true}))
	var l *concurrencyLimit // disabled: admits everything, learns nothing
	tk, ok := l.fast()
	assert.True(t, ok)
	assert.False(t, tk.held)
	capacity, _, changed := l.observe(tk, limitRefused, testStart)
	assert.False(t, capacity || changed)
}

// An upstream that has never pushed back is never limited, however many
// attempts are in flight: no lock, no queue, no clock below limitSampleFrom.
func TestAdaptiveLimitNoneUntilPushedBack(t *testing.T) {
	d := newLimDriver(t, AdaptiveConcurrency{})
	var out []limitTicket
	for i := 0; i < 500; i++ {
		tk, ok := d.l.fast()
		require.True(t, ok, "attempt %d", i)
		assert.Equal(t, i+1, tk.k)
		assert.Equal(t, i+1 >= limitSampleFrom, tk.sample, "sampled from %d in flight", limitSampleFrom)
		tk.sentAt = d.now
		out = append(out, tk)
	}
	for _, tk := range out {
		d.answer(tk, limitAccepted, 10*time.Millisecond)
	}
	assert.Equal(t, 0, d.limit(), "accepts teach no limit")
	_, inflight := d.l.snapshot()
	assert.Equal(t, 0, inflight)
}

// The first refusal from an upstream that has been serving sets the limit
// to Backoff times what was in flight; attempts beyond it queue, first come
// first served, and go as slots free.
func TestAdaptiveLimitLearnsFromARefusal(t *testing.T) {
	d := newLimDriver(t, AdaptiveConcurrency{})
	d.answer(d.send(), limitAccepted, time.Millisecond) // it serves
	var out []limitTicket
	for i := 0; i < 20; i++ {
		out = append(out, d.send())
	}
	assert.True(t, d.answer(out[19], limitRefused, time.Millisecond), "at capacity")
	assert.Equal(t, 18, d.limit(), "0.9 × 20 in flight")

	// 19 in flight, limit 18: the next two queue, in order.
	_, w1, _ := d.l.acquire()
	_, w2, _ := d.l.acquire()
	require.NotNil(t, w1)
	require.NotNil(t, w2)
	d.answer(out[0], limitAccepted, time.Millisecond)
	d.answer(out[1], limitAccepted, time.Millisecond) // 17 in flight: the first waiter goes
	assert.True(t, closed(w1.ready))
	assert.False(t, closed(w2.ready))
	tk, ok := d.l.claim(w1)
	assert.True(t, ok)
	assert.Equal(t, 18, tk.k)
	_, ok = d.l.claim(w2) // gives up
	assert.False(t, ok)
	d.answer(out[2], limitAccepted, time.Millisecond)
	d.answer(out[3], limitAccepted, time.Millisecond)
	_, inflight := d.l.snapshot()
	assert.Equal(t, 16, inflight, "the waiter that gave up took no slot")
}

// A refusal says "at capacity" only when the upstream is busy: a lone
// attempt refused, or refusals with nothing served since the last decrease
// and nothing older in flight, are a failing upstream, the breaker's.
func TestAdaptiveLimitTellsFailingFromFull(t *testing.T) {
	d := newLimDriver(t, AdaptiveConcurrency{})
	lone := d.send()
	assert.False(t, d.answer(lone, limitRefused, time.Millisecond), "a lone attempt")

	a, b := d.send(), d.send()
	assert.False(t, d.answer(b, limitRefused, time.Millisecond), "nothing served yet: a cold upstream that fails")
	assert.False(t, d.answer(a, limitRefused, time.Millisecond))
	assert.Equal(t, 0, d.limit())

	d.answer(d.send(), limitAccepted, time.Millisecond)
	var out []limitTicket
	for i := 0; i < 10; i++ {
		out = append(out, d.send())
	}
	assert.True(t, d.answer(out[9], limitRefused, time.Millisecond), "it served: full")
	assert.Equal(t, 9, d.limit())
	for _, tk := range out[1:9] { // the rest of that round: refused too, and answered
		assert.True(t, d.answer(tk, limitRefused, time.Millisecond), "sent before the decrease: its news")
	}
	assert.False(t, d.answer(out[0], limitRefused, time.Millisecond), "sent alone (k=1): a lone attempt")
	assert.Equal(t, 1, d.limit(), "each refusal of the round said one fewer was served")

	// Refused again after a decrease, with nothing served since: full while
	// attempts sent before the decrease are still out (the upstream is
	// busy with them), failing once none is.
	d = newLimDriver(t, AdaptiveConcurrency{Initial: 10, Min: 3})
	d.answer(d.send(), limitAccepted, time.Millisecond)
	out = []limitTicket{d.send(), d.send(), d.send()}
	require.True(t, d.answer(out[2], limitRefused, time.Millisecond))
	require.Equal(t, 3, d.limit())
	a = d.send()
	assert.True(t, d.answer(a, limitRefused, time.Millisecond), "out[0] and out[1], sent before the decrease, are still out: busy")
	d.answer(out[0], limitRefused, time.Millisecond)
	d.answer(out[1], limitRefused, time.Millisecond)
	a, b = d.send(), d.send()
	assert.False(t, d.answer(b, limitRefused, time.Millisecond), "nothing served since, nothing older out: failing")
	d.answer(a, limitRefused, time.Millisecond)
}

// One multiplicative decrease per round trip: refusals of attempts sent
// before a decrease do not cut the limit again by Backoff, they only bring
// it down to what is still in flight (the attempts the upstream serves).
func TestAdaptiveLimitOneDecreasePerRoundTrip(t *testing.T) {
	d := newLimDriver(t, AdaptiveConcurrency{Initial: 100})
	d.answer(d.send(), limitAccepted, time.Millisecond)
	var out []limitTicket
	for i := 0; i < 60; i++ {
		out = append(out, d.send())
	}
	// The upstream serves 50 and refuses 10, which come back first.
	d.answer(out[55], limitRefused, time.Millisecond)
	assert.Equal(t, 54, d.limit(), "0.9 × 60")
	for _, tk := range out[50:55] {
		d.answer(tk, limitRefused, time.Millisecond)
	}
	for _, tk := range out[56:] {
		d.answer(tk, limitRefused, time.Millisecond)
	}
	assert.Equal(t, 45, d.limit(), "0.9 × the 50 still in flight, not 0.9^10 × 60")
}

// After a decrease the limit climbs back to just below the concurrency that
// was refused, holds there for limitPlateau round trips, then probes past
// it; a failed probe takes it back to that level, not lower.
func TestAdaptiveLimitClimbsBackHoldsAndProbes(t *testing.T) {
	d := newLimDriver(t, AdaptiveConcurrency{Initial: 60})
	d.answer(d.send(), limitAccepted, time.Millisecond)
	var out []limitTicket
	for i := 0; i < 51; i++ {
		out = append(out, d.send())
	}
	d.answer(out[50], limitRefused, time.Millisecond)
	require.Equal(t, 45, d.limit(), "0.9 × 51 (the 51 in flight at the refusal)")
	for _, tk := range out[:50] {
		d.answer(tk, limitAccepted, time.Millisecond)
	}
	var trips []int
	for i := 0; i < 6; i++ {
		d.trip(limitAccepted, time.Millisecond)
		trips = append(trips, d.limit())
	}
	assert.Equal(t, []int{50, 50, 50, 50}, trips[1:5], "back to 50, just below the 51 refused, and held there: %v", trips)
	assert.Equal(t, 53, trips[5], "then probing past it")

	// A probe just past it fails: back to 50, not 0.9 × 53.
	probe := d.fill()
	d.answer(probe[len(probe)-1], limitRefused, time.Millisecond)
	assert.Equal(t, 50, d.limit())
	for _, tk := range probe[:len(probe)-1] {
		d.answer(tk, limitAccepted, time.Millisecond)
	}

	for i := 0; i < 12; i++ {
		d.trip(limitAccepted, time.Millisecond)
		trips = append(trips, d.limit())
	}
	assert.Greater(t, trips[len(trips)-1], 100, "then past it, faster and faster: %v", trips)
}

// The capacity grows (a server gets replicas back): the limit probes past
// the level found and the upstream serves ever more. A refusal far past
// the old level finds the new capacity: the limit is cut from there, not
// sent back to the old level (before, it went back, and climbed, and went
// back: a saw-tooth between the two capacities, 0.58 of a capacity that
// went from 10 to 50 slots in simulated time).
func TestAdaptiveLimitFindsACapacityThatGrew(t *testing.T) {
	d := newLimDriver(t, AdaptiveConcurrency{Initial: 20})
	d.answer(d.send(), limitAccepted, time.Millisecond)
	wave := d.fill()
	require.Len(t, wave, 20)
	d.answer(wave[19], limitRefused, time.Millisecond) // full at 20
	require.Equal(t, 18, d.limit())
	for _, tk := range wave[:19] {
		d.answer(tk, limitAccepted, time.Millisecond)
	}
	for d.limit() < 60 {
		d.trip(limitAccepted, time.Millisecond) // it serves all of it now
	}
	grown := d.limit()
	out := d.fill()
	d.answer(out[len(out)-1], limitRefused, time.Millisecond)
	assert.Equal(t, int(0.9*float64(len(out))), d.limit(), "0.9 × the %d in flight, not back to 19", len(out))
	assert.GreaterOrEqual(t, len(out), grown)
}

// The limit grows only while the limit is what holds the load back: an
// upstream used far below its limit teaches nothing about more.
func TestAdaptiveLimitGrowsOnlyWhenSaturated(t *testing.T) {
	d := newLimDriver(t, AdaptiveConcurrency{Initial: 40})
	for i := 0; i < 100; i++ {
		d.round(10, limitAccepted, fixed(time.Millisecond)) // 10 of 40: under half
	}
	assert.Equal(t, 40, d.limit())
	for i := 0; i < 100; i++ {
		d.round(1000, limitAccepted, fixed(time.Millisecond))
	}
	assert.Equal(t, 0, d.limit(), "grown to Max: no limit again")
}

// When the breaker opens, the refusals were an outage, not a capacity: the
// limit goes back to what it was before them.
func TestAdaptiveLimitRestoredWhenTheUpstreamFails(t *testing.T) {
	d := newLimDriver(t, AdaptiveConcurrency{Initial: 40})
	d.answer(d.send(), limitAccepted, time.Millisecond)
	var out []limitTicket
	for i := 0; i < 30; i++ {
		out = append(out, d.send())
	}
	for _, tk := range out {
		d.answer(tk, limitRefused, time.Millisecond) // the upstream goes down
	}
	require.Less(t, d.limit(), 30)
	ch, changed := d.l.failing()
	assert.True(t, changed)
	assert.Equal(t, 40, d.limit())
	assert.Equal(t, limitChange{from: 1, to: 40, why: "upstream failing, not full: limit restored"}, ch)

	// Never learned before the outage: no limit again.
	d = newLimDriver(t, AdaptiveConcurrency{})
	d.answer(d.send(), limitAccepted, time.Millisecond)
	out = out[:0]
	for range limitSignalMin {
		out = append(out, d.send())
	}
	for i := len(out) - 1; i >= 0; i-- {
		d.answer(out[i], limitRefused, time.Millisecond)
	}
	require.Positive(t, d.limit())
	d.l.failing()
	assert.Equal(t, 0, d.limit())

	// Something served since: it was a capacity after all.
	d = newLimDriver(t, AdaptiveConcurrency{Initial: 40})
	d.answer(d.send(), limitAccepted, time.Millisecond)
	a, b := d.send(), d.send()
	d.answer(b, limitRefused, time.Millisecond)
	d.answer(a, limitAccepted, time.Millisecond)
	_, changed = d.l.failing()
	assert.False(t, changed)
}

// The queue's expected wait follows Little's law: the typical latency per
// limit's worth of places ahead.
func TestAdaptiveLimitQueueEstimate(t *testing.T) {
	d := newLimDriver(t, AdaptiveConcurrency{Initial: 10})
	assert.Zero(t, d.l.estimate(), "no latency known yet")
	d.round(10, limitAccepted, fixed(200*time.Millisecond))
	d.round(10, limitAccepted, fixed(200*time.Millisecond))
	var out []limitTicket
	for d.room() {
		out = append(out, d.send())
	}
	_, w, wait := d.l.acquire()
	require.NotNil(t, w)
	perPlace := float64(200*time.Millisecond) / d.l.limit
	assert.InDelta(t, perPlace, float64(wait), 1)
	assert.InDelta(t, 2*perPlace, float64(d.l.estimate()), 1)
}

// Reports: the first limit learned, a move of a quarter or more, no limit
// again; not every step.
func TestAdaptiveLimitReportsLargeChanges(t *testing.T) {
	d := newLimDriver(t, AdaptiveConcurrency{})
	d.answer(d.send(), limitAccepted, time.Millisecond)
	var out []limitTicket
	for i := 0; i < 40; i++ {
		out = append(out, d.send())
	}
	_, ch, changed := d.l.observe(out[39], limitRefused, d.now)
	assert.True(t, changed)
	assert.Equal(t, limitChange{from: 0, to: 36, why: "refused"}, ch)
	d.l.release(out[39].epoch)
	_, _, changed = d.l.observe(out[38], limitRefused, d.now)
	assert.False(t, changed, "35 is within a quarter of 36")
}

// Latency: a window slower than the baseline at the same load cuts the
// limit, as a refusal does.
func TestAdaptiveLimitShrinksWhenLatencyRises(t *testing.T) {
	d := newLimDriver(t, AdaptiveConcurrency{Initial: 32})
	for i := 0; i < 10; i++ {
		d.round(32, limitAccepted, fixed(100*time.Millisecond))
	}
	before := d.limit()
	d.round(32, limitAccepted, fixed(350*time.Millisecond))
	assert.Less(t, d.limit(), before, "3.5× the baseline at the same load")
	assert.Equal(t, uint32(1), d.l.epoch.Load(), "one decrease")
}

// Failure mode 1: the baseline drifting up during a long incident, so that
// the limit stops shrinking. A slower window never becomes the baseline:
// for as long as the incident lasts (within latencyHorizon), the limit keeps
// shrinking to Min and stays there; when it ends, the limit grows again.
func TestAdaptiveLimitBaselineDoesNotDriftDuringAnIncident(t *testing.T) {
	d := newLimDriver(t, AdaptiveConcurrency{Initial: 32})
	for i := 0; i < 20; i++ {
		d.round(32, limitAccepted, fixed(100*time.Millisecond))
	}
	var during []int
	for d.now.Sub(testStart) < 40*time.Second { // a long incident: 3× slower
		d.round(32, limitAccepted, fixed(300*time.Millisecond))
		during = append(during, d.limit())
	}
	last := during[len(during)-1]
	assert.Equal(t, 1, last, "shrunk to Min and kept there: %v", during)
	for i := len(during) / 2; i < len(during); i++ {
		assert.LessOrEqual(t, during[i], 2, "never grows back while the incident lasts: %v", during)
	}
	for i := 0; i < 200; i++ { // it ends
		d.round(32, limitAccepted, fixed(100*time.Millisecond))
	}
	assert.GreaterOrEqual(t, d.limit(), 16, "grows again once latency is back")

	// The watch alone, at a steady load: every window of a 50 s incident
	// is judged slower; none lifts the baseline.
	var w latencyWatch
	now := testStart
	window := func(d time.Duration) (slower bool) {
		for i := 0; i < latencySamples; i++ {
			now = now.Add(100 * time.Millisecond)
			if closed, s, _ := w.add(d, 16, now, 2); closed {
				slower = s
			}
		}
		return slower
	}
	for i := 0; i < 5; i++ {
		require.False(t, window(100*time.Millisecond))
	}
	for i := 0; now.Sub(testStart) < 50*time.Second; i++ {
		require.True(t, window(300*time.Millisecond), "incident window %d, at %v", i, now.Sub(testStart))
	}
	assert.Equal(t, 100*time.Millisecond, w.baseline(16, now))
}

// An incident longer than latencyHorizon is the upstream's new normal: its
// baseline expires, and the limit grows again.
func TestAdaptiveLimitAcceptsANewNormalAfterTheHorizon(t *testing.T) {
	d := newLimDriver(t, AdaptiveConcurrency{Initial: 32})
	for i := 0; i < 20; i++ {
		d.round(32, limitAccepted, fixed(100*time.Millisecond))
	}
	start := d.now
	for d.now.Sub(start) < latencyHorizon+10*time.Second {
		d.round(32, limitAccepted, fixed(300*time.Millisecond))
	}
	low := d.limit()
	for i := 0; i < 400; i++ {
		d.round(32, limitAccepted, fixed(300*time.Millisecond))
	}
	assert.Greater(t, d.limit(), low, "grows at the new latency")
}

// Failure mode 2: the limit pinned low by probing for the minimum latency.
// Nothing here lowers the limit to measure, and the baseline is a median,
// not the fastest answer ever seen: under a steady load with noisy latency
// and an occasional very fast answer (a cache hit), for minutes (several
// horizons), the limit never dips.
func TestAdaptiveLimitIsNotPinnedByMinimumLatencyProbing(t *testing.T) {
	d := newLimDriver(t, AdaptiveConcurrency{Initial: 24})
	rnd := rand.New(rand.NewPCG(1, 2))
	noisy := func() time.Duration { // 80-120 ms, one in ten 5 ms
		if rnd.IntN(10) == 0 {
			return 5 * time.Millisecond
		}
		return 80*time.Millisecond + time.Duration(rnd.Int64N(int64(40*time.Millisecond)))
	}
	lowest := math.MaxInt
	for d.now.Sub(testStart) < 5*time.Minute {
		d.round(30, limitAccepted, noisy)
		lowest = min(lowest, d.limit())
	}
	assert.Equal(t, uint32(0), d.l.epoch.Load(), "no decrease at all")
	assert.GreaterOrEqual(t, lowest, 24, "never below where it started")
}

// Failure mode 3: identical timeouts (no latency variance) letting the
// limit climb. A timeout is a refusal, never a latency sample: the limit
// does not grow on them, and with some attempts still served it shrinks.
func TestAdaptiveLimitDoesNotClimbOnIdenticalTimeouts(t *testing.T) {
	d := newLimDriver(t, AdaptiveConcurrency{Initial: 20})
	for i := 0; i < 5; i++ {
		d.round(20, limitAccepted, fixed(50*time.Millisecond))
	}
	start := d.limit()
	for i := 0; i < 200; i++ { // every attempt times out after exactly 1s
		d.round(20, limitRefused, fixed(time.Second))
		assert.LessOrEqual(t, d.limit(), start, "round %d", i)
	}
	assert.Equal(t, 0, d.l.lat.n, "no timeout became a latency sample")

	// Half of them time out, the others are served: it shrinks.
	d = newLimDriver(t, AdaptiveConcurrency{Initial: 20})
	for i := 0; i < 50; i++ {
		n := 0
		var sent []limitTicket
		for d.room() && n < 20 {
			sent, n = append(sent, d.send()), n+1
		}
		for j, tk := range sent {
			if j%2 == 0 {
				d.answer(tk, limitRefused, time.Second)
			} else {
				d.answer(tk, limitAccepted, 50*time.Millisecond)
			}
		}
		d.now = d.now.Add(time.Second)
	}
	assert.Less(t, d.limit(), 5)
}

// Failure mode 4: a bogus minimum latency from sparse traffic. An idle
// upstream answers fast (and once, faster still); busy, it is slower but
// serves more. The baseline is a median of 16 and is only compared at as
// much load or more, so the busy latency is not judged against the idle
// one and nothing is held back.
func TestAdaptiveLimitIgnoresTheMinimumOfSparseTraffic(t *testing.T) {
	d := newLimDriver(t, AdaptiveConcurrency{Initial: 64})
	for i := 0; i < 48; i++ { // one request every 2 s: three windows at a load of 1
		lat := 20 * time.Millisecond
		if i == 7 {
			lat = time.Millisecond // a cached answer
		}
		d.round(1, limitAccepted, fixed(lat))
		d.now = d.now.Add(2 * time.Second)
	}
	require.Equal(t, 20*time.Millisecond, d.l.lat.baseline(1, d.now), "the idle baseline: 20 ms, not the 1 ms outlier")
	for i := 0; i < 100; i++ { // then 32 at a time, 3× slower: batching, not queueing
		assert.Equal(t, 32, d.round(32, limitAccepted, fixed(60*time.Millisecond)), "round %d: all 32 go", i)
	}
	assert.Equal(t, uint32(0), d.l.epoch.Load(), "no decrease")
	assert.GreaterOrEqual(t, d.limit(), 64)
}

// The latency watch alone: one odd sample does not move a window's
// median; windows at low load are not compared with higher load.
func TestLatencyWatch(t *testing.T) {
	var w latencyWatch
	now := testStart
	add := func(d time.Duration, k int) (bool, bool) {
		closed, slower, _ := w.add(d, k, now, 2)
		return closed, slower
	}
	for i := 0; i < latencySamples-1; i++ {
		closed, _ := add(100*time.Millisecond, 2)
		assert.False(t, closed)
	}
	closed, slower := add(time.Millisecond, 2) // one very fast answer
	assert.True(t, closed)
	assert.False(t, slower)
	assert.Equal(t, 100*time.Millisecond, w.baseline(2, now), "the median, not the minimum")
	assert.Zero(t, w.baseline(8, now), "no baseline at four times the load")
	assert.Equal(t, 100*time.Millisecond, w.baseline(1, now), "a baseline at more load counts for less")

	now = now.Add(latencyHorizon)
	assert.Zero(t, w.baseline(2, now), "expired")
}

// A cut counts everything in flight, not only what was sent before the last
// cut: a server that holds 40 attempts, most of them sent since the last
// cut, is not full at 4.
func TestAdaptiveLimitCutCountsAllThatIsInFlight(t *testing.T) {
	d := newLimDriver(t, AdaptiveConcurrency{Initial: 100})
	d.answer(d.send(), limitAccepted, time.Millisecond)
	var wave []limitTicket
	for i := 0; i < 60; i++ {
		wave = append(wave, d.send())
	}
	d.answer(wave[59], limitRefused, time.Millisecond) // cut to 0.9 × 60
	for _, tk := range wave[:55] {
		d.answer(tk, limitAccepted, time.Millisecond) // most of the wave was served
	}
	var next []limitTicket
	for i := 0; i < 36; i++ {
		next = append(next, d.send()) // 40 in flight: 4 of the wave, 36 since the cut
	}
	d.answer(next[35], limitRefused, time.Millisecond)
	assert.Equal(t, 36, d.limit(), "0.9 × the 40 in flight, not 0.9 × the 4 older ones")
}

// A stray refusal with a few attempts out (a proxy's 503 at a healthy,
// lightly loaded upstream) teaches no limit: learned from it, a limit of
// one or two would queue every request behind the slowest answer.
func TestAdaptiveLimitIgnoresAStrayRefusalWithFewInFlight(t *testing.T) {
	d := newLimDriver(t, AdaptiveConcurrency{})
	d.answer(d.send(), limitAccepted, time.Millisecond)
	var out []limitTicket
	for range 5 { // five out, as at a flaky upstream with slow answers
		out = append(out, d.send())
	}
	assert.False(t, d.answer(out[len(out)-1], limitRefused, time.Millisecond), "not taken as full")
	assert.Equal(t, 0, d.limit(), "no limit learned")
}

// The attempts of a burst reach the upstream in any order: the one refused
// may have been sent with few others out while many are out now. It says
// "full" as much as the others. (Judged by its own count, it was taken for
// a stray refusal and went to the backoff: a second's wait, in a world of
// 20 ms answers, for the first requests of a slow start's step.)
func TestAdaptiveLimitJudgesARefusalByAllThatIsInFlight(t *testing.T) {
	d := newLimDriver(t, AdaptiveConcurrency{})
	d.answer(d.send(), limitAccepted, time.Millisecond)
	var out []limitTicket
	for range 10 {
		out = append(out, d.send())
	}
	require.Equal(t, 3, out[2].k)
	assert.True(t, d.answer(out[2], limitRefused, time.Millisecond), "full: 10 in flight")
	assert.Equal(t, 9, d.limit(), "0.9 × the 10 in flight")
}

// Failure mode 4, again: a bogus baseline from noise. Latencies that vary
// widely from one answer to the next, at a steady load (a network's jitter,
// an LLM API's answers of every length), make window medians that vary too:
// the lowest of a minute's is far below the typical one, and so was the
// first window of a burst, made of its fastest answers (they come back
// first). Judged against either, a typical window looked "slower" every
// second or so, and the limit was cut under a healthy upstream (a
// header-less bucket at 100 a second, answers of 5 to 35 ms: cut to 2 in
// flight, 1.6x the ideal). A window is slower only past a fence the noise
// does not reach (1.5 interquartile ranges of the answers above the typical
// median of the recent windows); a real rise passes it, at once or in
// steps.
func TestAdaptiveLimitIsNotFooledByJitteredLatency(t *testing.T) {
	for _, spread := range []struct {
		name string
		draw func(*rand.Rand) time.Duration
	}{
		{"uniform 5-35ms", func(r *rand.Rand) time.Duration {
			return 5*time.Millisecond + time.Duration(r.Int64N(int64(30*time.Millisecond)))
		}},
		{"lognormal, median 1s", func(r *rand.Rand) time.Duration { // an LLM API's answers
			return time.Duration(float64(time.Second) * math.Exp(0.6*r.NormFloat64()))
		}},
	} {
		t.Run(spread.name, func(t *testing.T) {
			d := newLimDriver(t, AdaptiveConcurrency{Initial: 64})
			rnd := rand.New(rand.NewPCG(3, 4))
			wave := func(n int) {
				var sent []limitTicket
				for len(sent) < n && d.room() {
					sent = append(sent, d.send())
				}
				type answer struct {
					tk  limitTicket
					lat time.Duration
				}
				answers := make([]answer, len(sent))
				for i, tk := range sent {
					answers[i] = answer{tk, spread.draw(rnd)}
				}
				// The fastest answers come back first.
				slices.SortFunc(answers, func(a, b answer) int { return cmp.Compare(a.lat, b.lat) })
				for _, a := range answers {
					d.answer(a.tk, limitAccepted, a.lat)
				}
				d.now = d.now.Add(answers[len(answers)-1].lat)
			}
			wave(48) // a burst: its first window is its 16 fastest answers
			for d.now.Sub(testStart) < 10*time.Minute {
				wave(8)
			}
			assert.Equal(t, uint32(0), d.l.epoch.Load(), "no decrease: nothing got slower")
			assert.GreaterOrEqual(t, d.limit(), 64)

			// A real rise is still seen: every answer three times slower.
			base := spread.draw
			spread.draw = func(r *rand.Rand) time.Duration { return 3 * base(r) }
			before := d.l.epoch.Load()
			for i := 0; i < 16 && d.l.epoch.Load() == before; i++ {
				wave(8)
			}
			assert.Equal(t, before+1, d.l.epoch.Load(), "a rise to 3x is a queue building up")

			// And one in steps: 1.5x more every 20 seconds (a rise
			// slower than the baseline's horizon is a new normal). The
			// windows over twice the baseline do not move the typical
			// median (and the fence with it) as they come.
			d = newLimDriver(t, AdaptiveConcurrency{Initial: 64})
			spread.draw = base
			for range 200 {
				wave(8)
			}
			factor := 1.0
			for stage := 0; stage < 6 && d.l.epoch.Load() == 0; stage++ {
				factor *= 1.5
				f := factor
				spread.draw = func(r *rand.Rand) time.Duration { return time.Duration(f * float64(base(r))) }
				for end := d.now.Add(20 * time.Second); d.now.Before(end); {
					wave(8)
				}
			}
			assert.Positive(t, d.l.epoch.Load(), "a rise in steps of 1.5x is seen by %.1fx", factor)
			t.Logf("a rise in steps of 1.5x was seen at %.2fx", factor)
		})
	}
}
