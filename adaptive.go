package retryhttp

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Adaptive concurrency defaults; AdaptiveConcurrency explains each.
const (
	defaultLimitMin         = 1
	defaultLimitMax         = 1000
	defaultLimitBackoff     = 0.9
	defaultLatencyTolerance = 2.0

	// limitSampleFrom is how many attempts must be in flight before an
	// upstream that has not pushed back is watched at all: below it an
	// attempt costs the limiter two atomic adds, no lock and no clock.
	limitSampleFrom = 4
	// latencySamples is how many accepted attempts make one latency
	// window: the median of so many is not moved by one odd answer.
	latencySamples = 16
	// latencyHorizon is how long a window's median serves as the baseline
	// (at least half of it, at most all of it). An incident that lasts
	// longer is taken for the upstream's new normal.
	latencyHorizon = time.Minute
	// latencyMinRise is the least rise over the baseline that counts:
	// below it, latency moves with the client's own scheduling, not the
	// upstream's queue.
	latencyMinRise = 5 * time.Millisecond
	// latencyRecent is how many recent windows (those not judged slower)
	// tell the typical latency and how much answers vary by themselves;
	// latencyFence is how many interquartile ranges of the answers above
	// the typical median a window's median must be to be slower than
	// that (see outsideNoise). At least latencyRecentMin windows must be
	// there.
	latencyRecent    = 16
	latencyFence     = 1.5
	latencyRecentMin = 4
	// limitClasses is how many load classes (powers of two of the
	// attempts in flight: 1, 2-3, 4-7, ...) keep a baseline of their own.
	limitClasses = 12
	// limitPlateau is how many round trips the limit holds just below
	// the concurrency last refused before it probes past it.
	limitPlateau = 4
	// limitReportShare is the change, as a share of the last reported
	// limit, that is reported to OnLimit and the log.
	limitReportShare = 0.25
)

// AdaptiveConcurrency configures the concurrency limit every upstream (see
// [WithKeyFunc]) learns from its answers, so that requests beyond what the
// upstream can serve wait their turn in the client instead of being sent to
// be refused. The zero value means the defaults.
//
// # The model
//
// The limit is how many attempts may be in flight to the upstream at once.
// An attempt is in flight from the moment it is sent until its response
// body is closed or read to EOF (or it fails), as with [WithMaxConcurrency].
// An attempt that finds the limit reached waits in a first-come,
// first-served queue, for at most as long as its deadline and
// [WithMaxQueueWait] allow; one that cannot wait that long fails at once with
// [ErrRateLimited] and a RetryAt.
//
// At first there is no limit: an upstream that has never pushed back, or
// that serves a handful of requests at a time, is never held back, and the
// limiter costs an attempt two atomic adds. The limit is learned from what
// the upstream says, as TCP learns its window:
//
//   - Refused: a 503, 529 or 504, or an attempt timeout, from an upstream
//     that is busy (it served an attempt since the last cut, or still holds
//     attempts sent before it) says it is full. The limit is cut to [Backoff]
//     (0.9) times the attempts then in flight, and one less than them is
//     remembered as the capacity found. One cut per round trip: the
//     refusals of attempts sent before it each say that one fewer of them
//     is served, and bring the limit down to Backoff times what is still
//     in flight, no further.
//   - Accepted: an answer the upstream meant (2xx to 4xx; a 429 is the
//     pacer's business) sent with at least half the limit in flight grows
//     the limit: back to the capacity found by half the way per round
//     trip, then held there for 4 round trips, then past it by 1, 2, 4, ...
//     per round trip (at most half the limit). A refusal while it is just
//     past the capacity found takes it back there, without a cut; one so
//     far past it that Backoff times what is in flight is still above it
//     is a capacity that grew, and the limit is cut from there instead.
//     Past Max there is no limit again.
//   - Slower: the median latency of each 16 accepted attempts is compared
//     with the lowest median of the last minute at as much load or more. A
//     median above LatencyTolerance times that baseline (and 5 ms above
//     it) that also lies beyond the answers' own variance (1.5 times their
//     interquartile range above the typical median of the last 16 typical
//     windows, at least 4 of them; a window over the tolerance is not
//     typical) is a queue building up in the upstream: the limit is cut as
//     for a refusal, and does not grow while it lasts. Where answers vary
//     widely, a rise must pass that fence too: with answers of 5 to 35 ms,
//     about 2.1 times the typical latency.
//
// For example, 150 callers against a server that serves 50 at once: the
// first refusal comes with some 64 attempts out and cuts the limit to 57;
// the refusals of that wave bring it to 45 (0.9 times the 50 served); it is
// back at 50 within two or three round trips and stays there, one refusal
// every six round trips or so telling it that 51 is one too many.
//
// A refusal that is not "full" is the circuit breaker's: a lone attempt
// refused, or a refusal with nothing served since the last cut and nothing
// older in flight, means the upstream is failing. The breaker never counts
// a refusal the limiter took as "full", so an upstream that serves most
// requests never trips it. When the breaker opens, the limit goes back to
// what it was before the cuts since the last accept: that was an outage,
// not a capacity. A request refused as "full" is retried at once, into the
// queue (or after the server's Retry-After), without drawing on the retry
// budget; it still counts against [WithMaxRetries].
//
// # Known failure modes of latency-based limits, and what this one does
//
//   - The baseline drifting up during a long incident, so that the limit
//     stops shrinking: a window judged slower never becomes the baseline;
//     the baseline of the minute before the incident stays until it
//     expires.
//   - The limit pinned low by probing for the minimum latency: the limit is
//     never lowered to measure anything; the baseline is measured at the
//     load the upstream gets.
//   - Identical timeouts (no variance) letting the limit climb: a timeout
//     is a refusal, never a latency sample.
//   - A bogus minimum from sparse traffic (one fast answer, an idle
//     upstream): the baseline is a median of 16, and only windows at as
//     much load or more (by powers of two) are compared, so an idle
//     upstream's latency is not held against a busy one's.
//   - A bogus minimum from noise: where answers vary widely (a network's
//     jitter, an LLM API's answers of every length) the medians of 16
//     vary too, and the lowest of a minute's, or a burst's first window
//     (its fastest answers come back first), lies far below the typical
//     median. A window is slower only past a fence the noise does not
//     reach: 1.5 interquartile ranges of the answers above the typical
//     median, about six times what a median of 16 varies by.
type AdaptiveConcurrency struct {
	// Initial is the limit before the upstream first pushes back. Default
	// 0: none, the limit is learned from the first refusal.
	Initial int

	// Min is the lowest the limit goes. Default 1.
	Min int

	// Max is the highest the limit grows; a limit that grows to it is
	// dropped (no limit) until the upstream pushes back again. Default
	// 1000.
	Max int

	// Backoff is the share of the attempts in flight that the limit is cut
	// to when the upstream pushes back, in (0, 1). Default 0.9, as
	// Netflix's AIMD limit: close to the capacity found, so a steady load
	// loses little. Lower values leave more room to other clients of the
	// same upstream.
	Backoff float64

	// LatencyTolerance is how many times its baseline the median latency
	// may grow before the limit decreases. Default 2. Negative: latency is
	// not watched, only refusals and timeouts.
	LatencyTolerance float64

	// Disabled turns the adaptive limit off: only [WithMaxConcurrency], if
	// set, bounds the attempts in flight.
	Disabled bool
}

// WithAdaptiveConcurrency configures the concurrency limit every upstream
// learns (see [AdaptiveConcurrency]);
// WithAdaptiveConcurrency(AdaptiveConcurrency{Disabled: true}) turns it off.
// It is on by default, with the defaults AdaptiveConcurrency lists. It
// composes with the others: [WithMaxConcurrency] is a hard cap on top of it,
// pacing bounds the rate, the breaker stops an upstream that fails. It
// shapes the transport as a whole and has no per-request counterpart.
func WithAdaptiveConcurrency(a AdaptiveConcurrency) Option {
	return Option{func(c *config) { c.adaptive = a }}
}

// withDefaults returns a with its zero fields set to the defaults and the
// others brought into range.
func (a AdaptiveConcurrency) withDefaults() AdaptiveConcurrency {
	if a.Min <= 0 {
		a.Min = defaultLimitMin
	}
	if a.Max <= 0 {
		a.Max = defaultLimitMax
	}
	a.Max = max(a.Max, a.Min)
	if a.Initial < 0 {
		a.Initial = 0
	}
	if a.Initial > 0 {
		a.Initial = min(max(a.Initial, a.Min), a.Max)
	}
	if !(a.Backoff > 0 && a.Backoff < 1) { // also catches NaN
		a.Backoff = defaultLimitBackoff
	}
	switch {
	case a.LatencyTolerance == 0 || math.IsNaN(a.LatencyTolerance):
		a.LatencyTolerance = defaultLatencyTolerance
	case a.LatencyTolerance > 0:
		a.LatencyTolerance = max(a.LatencyTolerance, 1)
	}
	return a
}

// limitSignal is what an attempt's outcome tells the limiter.
type limitSignal int

const (
	// limitNeutral: nothing about capacity (a 429, a 500, a connection
	// error, the caller's own error).
	limitNeutral limitSignal = iota
	// limitAccepted: the upstream served the attempt.
	limitAccepted
	// limitRefused: a 503, 529 or 504, or an attempt timeout.
	limitRefused
)

// limitTicket is an attempt's slot: what the limiter needs to judge its
// outcome.
type limitTicket struct {
	held   bool      // it holds a slot, to release when it ends
	sample bool      // its latency is measured (sentAt is set)
	k      int       // attempts in flight when it was sent, itself included
	epoch  uint32    // decreases made before it was sent
	sentAt time.Time // when it was sent, if sampled
}

// limitWaiter is an attempt queued for a slot.
type limitWaiter struct {
	ready   chan struct{} // closed when it is granted a slot
	granted bool
	gone    bool // gave up
	t       limitTicket
}

// limitChange is a change of the limit worth reporting; 0 is no limit.
type limitChange struct {
	from, to int
	why      string
}

// concurrencyLimit is the adaptive concurrency limit of one upstream (see
// AdaptiveConcurrency for the model). Time is passed in, as in
// golang.org/x/time/rate, so that it runs in simulated time in tests. A nil
// *concurrencyLimit is a disabled one: it admits everything.
//
// How the attempt loop uses it:
//
//  1. Before each attempt, fast(): ok means a slot was taken without the
//     lock; the caller stamps the ticket's sentAt when it says sample.
//     Otherwise acquire(): a ticket, or a waiter to wait on (its ready
//     channel, for at most as long as the request may wait), then
//     claim(w), which says whether it was granted a slot meanwhile.
//  2. After the attempt, observe(t, signal, now), which reports whether a
//     refusal was taken as "at capacity" (then the breaker is not told).
//  3. When the attempt ends (its body closed or read, or it failed),
//     release(), once per ticket held.
//
// The breaker tells it failing() when it opens.
type concurrencyLimit struct {
	cfg AdaptiveConcurrency // with defaults applied

	inflight atomic.Int64  // attempts holding a slot
	older    atomic.Int64  // of them, those sent before the last decrease
	learned  atomic.Bool   // limit is finite: acquire and release take the lock
	epoch    atomic.Uint32 // decreases so far
	served   atomic.Bool   // an attempt was accepted since the last decrease

	mu    sync.Mutex
	limit float64 // +Inf until learned
	// found is the concurrency at which the upstream last refused (the
	// limit it cut): growth is slow up to it, faster beyond.
	found float64
	// beyond counts the accepts at saturation since the limit grew past
	// found, for the growth ramp.
	beyond float64
	// restore is the limit before the decreases since the last accept,
	// for failing to go back to; 0 when there is none to go back to.
	restore float64
	queue   []*limitWaiter
	lat     latencyWatch
	// capOK is set while the refusals of attempts sent just before the
	// last decrease may cut the limit further (see observe): after a
	// multiplicative decrease, not after a failed probe, nor once the
	// limit was restored.
	capOK bool
	// reported is the limit last reported (+Inf: none).
	reported float64
}

// newConcurrencyLimit returns the limit a describes, or nil when it is
// disabled.
// limitSignalMin is the fewest attempts in flight (the refused one
// included, counted when it was sent or when its answer came, whichever is
// more: a burst reaches the server in any order) at which a refusal first
// says the upstream is full; once a limit is learned, any refusal refines
// it. Below it, random
// 503s at a healthy upstream with a few requests out learned limits of one
// or two, and a flaky network's p50 went from under a millisecond to 0.9 s
// (retrysim's flaky scenario). A capacity below it is left to the breaker
// and the backoff.
const limitSignalMin = 6

func newConcurrencyLimit(a AdaptiveConcurrency) *concurrencyLimit {
	if a.Disabled {
		return nil
	}
	a = a.withDefaults()
	l := &concurrencyLimit{cfg: a, limit: math.Inf(1), found: math.Inf(1), reported: math.Inf(1)}
	if a.Initial > 0 {
		l.limit, l.reported = float64(a.Initial), float64(a.Initial)
		l.learned.Store(true)
	}
	return l
}

// fast takes a slot without the lock or the clock when no limit is learned;
// ok is false when acquire must be asked. A nil limiter admits at once
// with no ticket.
func (l *concurrencyLimit) fast() (t limitTicket, ok bool) {
	ok = l.takeFast(&t)
	return t, ok
}

// takeFast is fast writing into *t, a zero ticket, in place: small enough
// to inline in admit.
func (l *concurrencyLimit) takeFast(t *limitTicket) bool {
	if l == nil {
		return true
	}
	if l.learned.Load() {
		return false
	}
	k := int(l.inflight.Add(1))
	t.held, t.k, t.epoch, t.sample = true, k, l.epoch.Load(), k >= limitSampleFrom
	return true
}

// acquire takes a slot if the limit allows and no one is queued; otherwise
// it queues w, and wait is how long it is likely to wait (0 if that is not
// known yet). A taken slot's ticket is sampled: the caller stamps its
// sentAt.
func (l *concurrencyLimit) acquire() (t limitTicket, w *limitWaiter, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.queue) == 0 && l.roomLocked() {
		return l.takeLocked(), nil, 0
	}
	w = &limitWaiter{ready: make(chan struct{})}
	l.queue = append(l.queue, w)
	return limitTicket{}, w, l.drainLocked(len(l.queue))
}

// estimate is how long an attempt queued now would wait, 0 if not known.
func (l *concurrencyLimit) estimate() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.drainLocked(len(l.queue) + 1)
}

// drainLocked is how long the queue takes to reach its n-th place, by
// Little's law: limit attempts leave per typical latency. 0 if not known.
func (l *concurrencyLimit) drainLocked(n int) time.Duration {
	if l.lat.last <= 0 || math.IsInf(l.limit, 1) {
		return 0
	}
	return time.Duration(float64(n) * float64(l.lat.last) / l.limit)
}

// roomLocked reports whether one more attempt fits the limit.
func (l *concurrencyLimit) roomLocked() bool {
	return float64(l.inflight.Load())+1 <= l.limit
}

func (l *concurrencyLimit) takeLocked() limitTicket {
	k := int(l.inflight.Add(1))
	return limitTicket{held: true, sample: true, k: k, epoch: l.epoch.Load()}
}

// claim settles a waiter that woke or gave up: the ticket it was granted,
// or ok false, and then it has left the queue.
func (l *concurrencyLimit) claim(w *limitWaiter) (t limitTicket, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.granted {
		return w.t, true
	}
	w.gone = true
	return limitTicket{}, false
}

// servedQuietly takes an accepted outcome of an attempt that was not
// sampled while no limit is learned, and reports whether it did: lightly
// loaded, no limit, there is nothing to learn but that the upstream serves.
// Small enough to inline, so the quiet path does not call observe.
func (l *concurrencyLimit) servedQuietly(t *limitTicket) bool {
	if t.sample || l.learned.Load() {
		return false
	}
	if !l.served.Load() {
		l.served.Store(true)
	}
	return true
}

// release frees the slot of an attempt sent in epoch: it is over.
func (l *concurrencyLimit) release(epoch uint32) {
	l.inflight.Add(-1)
	if epoch != l.epoch.Load() && l.older.Add(-1) < 0 {
		l.older.Store(0) // raced with a decrease: never below none
	}
	if !l.learned.Load() {
		return // nobody queues while no limit is learned
	}
	l.mu.Lock()
	l.grantLocked()
	l.mu.Unlock()
}

// grantLocked gives the freed slots to the queue, in arrival order.
func (l *concurrencyLimit) grantLocked() {
	for len(l.queue) > 0 {
		w := l.queue[0]
		if !w.gone {
			if !l.roomLocked() {
				return
			}
			w.t, w.granted = l.takeLocked(), true
			close(w.ready)
		}
		l.queue[0] = nil
		l.queue = l.queue[1:]
	}
	l.queue = nil // let the array go once drained
}

// observe learns from an attempt's outcome. capacity reports a refusal taken
// as "at capacity", which the breaker must not count as a failure. changed
// is set when the limit moved enough to report (see limitReportShare).
func (l *concurrencyLimit) observe(t limitTicket, s limitSignal, now time.Time) (capacity bool, change limitChange, changed bool) {
	if l == nil || !t.held {
		return false, limitChange{}, false
	}
	switch s {
	case limitAccepted:
		if l.servedQuietly(&t) {
			return false, limitChange{}, false
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.served.Store(true)
		why := "accepted"
		if l.cfg.LatencyTolerance > 0 && t.sample && t.epoch == l.epoch.Load() {
			if closed, slower, load := l.lat.add(now.Sub(t.sentAt), t.k, now, l.cfg.LatencyTolerance); closed && slower {
				l.decreaseLocked(load)
				why = "latency rose"
			}
		}
		if !l.lat.slower && l.learned.Load() && float64(t.k) >= l.limit/2 {
			l.growLocked()
		}
		change, changed = l.changeLocked(why)
		return false, change, changed
	case limitRefused:
		if k := max(t.k, int(l.inflight.Load())); k < 2 || k < limitSignalMin && !l.learned.Load() {
			// Too few in flight to tell "full" from a hiccup (a proxy's
			// stray 503, a slow answer): a limit learned from them would
			// queue a healthy upstream's requests behind its slowest.
			// Refusals there are the breaker's and the backoff's.
			return false, limitChange{}, false
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		switch {
		case t.epoch != l.epoch.Load():
			// Sent before the last decrease, which answered it already;
			// but if the decrease cut the limit, each such refusal
			// says one fewer of the attempts then in flight was served:
			// what is in flight now is a closer count of the capacity.
			if l.capOK && t.epoch+1 == l.epoch.Load() {
				if found := float64(l.inflight.Load()); found < l.found {
					l.found = found
					l.limit = math.Min(l.limit, math.Max(float64(l.cfg.Min), l.cfg.Backoff*found))
				}
			}
		case l.served.Load() || l.older.Load() > 0:
			// Something was served since the last decrease, or the
			// upstream still holds attempts sent before it: it is busy,
			// not down, and full with what is in flight now (refusals
			// come back at once, what it serves stays out). Not the
			// attempt's own count: attempts sent together arrive in any
			// order.
			l.decreaseLocked(float64(l.inflight.Load()))
		default:
			// Refused with nothing served since the last decrease and
			// nothing older in its hands: the upstream is failing,
			// which is the breaker's business.
			return false, limitChange{}, false
		}
		change, changed = l.changeLocked("refused")
		return true, change, changed
	}
	return false, limitChange{}, false
}

// decreaseLocked cuts the limit after a refusal with found in flight, or a
// latency window at a load of found. A refusal while the limit probes just
// past the level last found good (just below the concurrency last refused)
// only takes it back there; any other is a capacity other than believed,
// and the limit becomes Backoff times found (or times the limit, if
// lower): lower, or higher when the limit had grown so far past the level
// found that the cut stays above it (the upstream served that many: its
// capacity grew, and going back to the old level would throw that away, a
// saw-tooth between the old capacity and the new one). Attempts sent
// before it are judged by it (epoch).
func (l *concurrencyLimit) decreaseLocked(found float64) {
	if l.served.Load() || l.restore == 0 {
		l.restore = l.limit // the first decrease since an accept
	}
	good := l.found - 1
	if cut := l.cfg.Backoff * math.Min(l.limit, found); l.limit > good && found > good && good >= float64(l.cfg.Min) && cut <= good {
		l.limit = good // the probe past it failed: hold there again
		l.capOK = false
	} else {
		l.found = math.Min(l.limit, found)
		l.limit = math.Max(float64(l.cfg.Min), l.cfg.Backoff*l.found)
		l.capOK = true
	}
	l.beyond = 0
	l.learned.Store(true)
	l.epoch.Add(1)
	l.older.Store(l.inflight.Load())
	l.served.Store(false)
	l.lat.restart()
}

// growLocked grows the limit after an accept at saturation. Below the
// level last found good (just below the concurrency last refused) it climbs
// back by half the way per round trip, at least 1 (a binary search, as BIC
// TCP does); there it holds for limitPlateau round trips; then it probes
// past it by 1, 2, 4, ... per round trip (at most half the limit): quickly
// back to the capacity last found, steady there, fast once the upstream
// has more.
func (l *concurrencyLimit) growLocked() {
	good := math.Max(l.found-1, float64(l.cfg.Min))
	switch {
	case math.IsInf(l.found, 1):
		// Nothing refused yet (an Initial limit): grow as past a
		// level found good, without holding first.
		l.beyond++
		step := math.Min(math.Exp2(math.Floor(l.beyond/l.limit)), math.Max(l.limit/2, 1))
		l.limit += step / l.limit
	case l.limit < good:
		step := math.Max((good-l.limit)/2, 1) // per round trip
		l.limit = math.Min(l.limit+step/l.limit, good)
	default:
		l.beyond++
		trips := math.Floor(l.beyond/l.limit) - limitPlateau
		if trips < 0 {
			return
		}
		step := math.Min(math.Exp2(trips), math.Max(l.limit/2, 1))
		l.limit += step / l.limit
	}
	if l.limit >= float64(l.cfg.Max) {
		l.unlearnLocked()
	}
	l.grantLocked()
}

// unlearnLocked drops the limit: every queued attempt goes.
func (l *concurrencyLimit) unlearnLocked() {
	l.limit, l.found, l.restore = math.Inf(1), math.Inf(1), 0
	l.learned.Store(false)
	for _, w := range l.queue {
		if !w.gone {
			w.t, w.granted = l.takeLocked(), true
			close(w.ready)
		}
	}
	l.queue = nil
}

// failing tells the limiter that the upstream's breaker opened: the
// refusals since the last accept were an outage, not a capacity, so the
// limit goes back to what it was before them.
func (l *concurrencyLimit) failing() (change limitChange, changed bool) {
	if l == nil {
		return limitChange{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.served.Load() || l.restore == 0 {
		return limitChange{}, false
	}
	l.capOK = false // the refusals still to come are the outage's
	if math.IsInf(l.restore, 1) || l.restore >= float64(l.cfg.Max) {
		l.unlearnLocked()
	} else {
		l.limit, l.found, l.restore = l.restore, l.restore, 0
		l.grantLocked()
	}
	return l.changeLocked("upstream failing, not full: limit restored")
}

// changeLocked reports a change of the limit since the last report that is
// worth it: learned, dropped, or moved by limitReportShare or more.
func (l *concurrencyLimit) changeLocked(why string) (limitChange, bool) {
	was, now := l.reported, l.limit
	switch {
	case math.IsInf(was, 1) && math.IsInf(now, 1):
		return limitChange{}, false
	case !math.IsInf(was, 1) && !math.IsInf(now, 1) && math.Abs(now-was) < limitReportShare*was:
		return limitChange{}, false
	}
	l.reported = now
	if why == "accepted" {
		why = "grew while accepted"
		if math.IsInf(now, 1) {
			why = "grew to the maximum: no limit"
		}
	}
	return limitChange{from: limitInt(was), to: limitInt(now), why: why}, true
}

// limitInt is a limit as Stats and events show it: whole attempts, 0 for
// none.
func limitInt(f float64) int {
	if math.IsInf(f, 1) {
		return 0
	}
	return int(f)
}

// snapshot returns the limit (0: none) and the attempts in flight.
func (l *concurrencyLimit) snapshot() (limit, inflight int) {
	if l == nil {
		return 0, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return limitInt(l.limit), int(max(l.inflight.Load(), 0))
}

// latencyWatch judges the latency of accepted attempts, a window of
// latencySamples at a time, against a baseline per load class. It is not
// safe for concurrent use: the limiter's lock guards it.
type latencyWatch struct {
	n     int
	lat   [latencySamples]time.Duration
	load  int // the attempts in flight of the window's samples, summed
	start time.Time
	// last is the last window's median: the typical latency, for the
	// queue's wait estimate.
	last time.Duration
	// slower is set while the last window was judged slower than the
	// baseline.
	slower bool
	base   [limitClasses]latencyBase
	// recent are the medians of the last latencyRecent windows not
	// judged slower, a ring (next is the oldest).
	recent [latencyRecent]recentWindow
	next   int
}

// recentWindow is one window's median, the interquartile range of its
// answers and its load class.
type recentWindow struct {
	med, iqr time.Duration
	class    int
}

// latencyBase is the lowest window median of a load class: of the current
// half horizon and of the one before, so the baseline covers between half
// and all of latencyHorizon.
type latencyBase struct {
	cur, prev time.Duration // 0: none
	from      time.Time     // when cur started
}

// restart drops the window being filled: after a decrease, windows are of
// attempts sent under the new limit.
func (w *latencyWatch) restart() { w.n, w.load = 0, 0 }

// add records one accepted attempt's latency d, sent with k in flight. When
// it completes a window it returns closed, whether the window was slower
// than tol times the baseline for its load, and its mean load.
func (w *latencyWatch) add(d time.Duration, k int, now time.Time, tol float64) (closed, slower bool, load float64) {
	if w.n > 0 && now.Sub(w.start) > latencyHorizon {
		w.restart() // too old to judge the present with
	}
	if w.n == 0 {
		w.start = now
	}
	w.lat[w.n], w.load = d, w.load+k
	w.n++
	if w.last == 0 {
		w.last = d // a first idea of the latency, until a window closes
	}
	if w.n < latencySamples {
		return false, false, 0
	}
	med, iqr := quartiles(w.lat)
	load = float64(w.load) / latencySamples
	w.restart()
	w.last = med
	b := w.baseline(load, now)
	over := b > 0 && float64(med) > tol*float64(b) && med-b >= latencyMinRise
	w.slower = over && w.outsideNoise(med, load)
	if !w.slower {
		w.record(med, iqr, load, now, !over)
	}
	return true, w.slower, load
}

// loadClass is the class of a mean load: floor(log2), within the classes.
func loadClass(load float64) int {
	if load < 1 {
		return 0
	}
	return min(int(math.Log2(load)), limitClasses-1)
}

// baseline is the lowest median of the horizon among the windows at load
// or more (by class), 0 if none.
func (w *latencyWatch) baseline(load float64, now time.Time) time.Duration {
	var b time.Duration
	for c := loadClass(load); c < limitClasses; c++ {
		lb := &w.base[c]
		lb.roll(now)
		for _, v := range [2]time.Duration{lb.cur, lb.prev} {
			if v > 0 && (b == 0 || v < b) {
				b = v
			}
		}
	}
	return b
}

// outsideNoise reports whether a window's median med, at load, lies beyond
// the latency's own variance: above the typical median by latencyFence
// times the typical interquartile range of the answers, both the median of
// the recent typical windows at as much load or more, of which there must
// be latencyRecentMin. They do not expire with the baseline's horizon: a
// rise that outlasts the horizon is taken for the new normal by the
// baseline already, and with answers seconds long the typical windows of
// the minute before a rise would have aged out before it was seen.
//
// The baseline alone, the lowest median of the horizon, is no measure of a
// rise when answers vary widely from one to the next (a network's jitter,
// an LLM API's answers of every length): medians of 16 vary too, the
// lowest of a minute's lies far below the typical one, and so does a
// burst's first window, made of its fastest answers. Judged against it
// alone, a typical window was "slower" every second or so. A median of 16
// varies by about a quarter of the answers' interquartile range (for a
// normal spread): the fence lies six of those above the typical median,
// where noise does not reach and a queue building up, which moves every
// answer, does.
func (w *latencyWatch) outsideNoise(med time.Duration, load float64) bool {
	var meds, iqrs [latencyRecent]time.Duration
	n, class := 0, loadClass(load)
	for _, r := range w.recent {
		if r.med > 0 && r.class >= class {
			meds[n], iqrs[n] = r.med, r.iqr
			n++
		}
	}
	if n < latencyRecentMin {
		return false
	}
	typical, spread := middle(meds[:n]), middle(iqrs[:n])
	return float64(med) > float64(typical)+latencyFence*float64(spread)
}

// middle is the median of s (the upper one of the middle two), which it
// sorts.
func middle(s []time.Duration) time.Duration {
	slices.Sort(s)
	return s[len(s)/2]
}

// record makes a window that was not slower part of its class's baseline,
// and of the recent windows if it is typical: not over the tolerance,
// inside the noise only. Over it, it would move the typical median, and
// the fence with it, so that a rise that comes in steps was never seen
// (latency up 1.5x every 30 rounds to 11x: no cut).
func (w *latencyWatch) record(med, iqr time.Duration, load float64, now time.Time, typical bool) {
	if typical {
		w.recent[w.next] = recentWindow{med: med, iqr: iqr, class: loadClass(load)}
		w.next = (w.next + 1) % latencyRecent
	}
	lb := &w.base[loadClass(load)]
	lb.roll(now)
	if lb.cur == 0 || med < lb.cur {
		lb.cur = med
	}
}

// roll moves the halves of the horizon forward to now.
func (b *latencyBase) roll(now time.Time) {
	switch age := now.Sub(b.from); {
	case b.from.IsZero():
		b.from = now
	case age >= latencyHorizon:
		b.cur, b.prev, b.from = 0, 0, now
	case age >= latencyHorizon/2:
		b.cur, b.prev, b.from = 0, b.cur, now
	}
}

// quartiles returns the median of the samples (the upper one of the middle
// two) and their interquartile range.
func quartiles(s [latencySamples]time.Duration) (med, iqr time.Duration) {
	med = middle(s[:]) // sorts s, a copy
	return med, s[3*len(s)/4] - s[len(s)/4]
}
