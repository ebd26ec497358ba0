package retryhttp

import (
	"sync"
	"sync/atomic"
	"time"
)

// Circuit breaker defaults; CircuitBreaker explains each.
const (
	defaultBreakerFailures = 5
	defaultBreakerWindow   = time.Second
	defaultBreakerOpenFor  = 500 * time.Millisecond
	// defaultBreakerMaxOpen is how many times OpenFor the default MaxOpenFor
	// is (2s with the default OpenFor).
	defaultBreakerMaxOpen = 4
	defaultBreakerProbes  = 1
	defaultBreakerSpread  = 250 * time.Millisecond
	// defaultBreakerProbeInterval is how often a probe goes while callers
	// wait: a recovery is seen within a fifth of a second.
	defaultBreakerProbeInterval = 200 * time.Millisecond
)

// CircuitBreaker configures the circuit breaker that every upstream (see
// [WithKeyFunc]) has, so that an upstream that is down is not sent attempts
// that cannot succeed, and callers learn the moment it is back. The zero
// value means the defaults.
//
// The breaker counts only failures of the upstream itself: 5xx, 529,
// attempt timeouts and connection errors. Any other answer, a 429 or another
// 4xx included, shows the upstream is up and counts as a success.
//
// Closed, the normal state, lets every attempt go. It opens after Failures
// upstream failures in a row, provided at least half of the outcomes of the
// last Window were failures: an upstream that serves most requests never
// trips it, however its failures bunch together. Open, it lets no attempt go
// for OpenFor, or for as long as a Retry-After on the failure that opened it
// asked; callers wait for it when their deadline allows, and otherwise fail
// at once with [ErrCircuitOpen]. Then it is half-open: Probes attempts go to
// test the upstream while everyone else keeps waiting for their answer.
// When they succeed it closes and the callers that waited go, in the order
// they came, spread over Spread rather than as a herd. When one fails it
// opens again, for twice as long as the last time, up to MaxOpenFor.
//
// While callers wait, the open period is cut to ProbeInterval (unless a
// Retry-After asks for longer): a probe costs the upstream one request, and
// the callers waiting learn of a recovery within ProbeInterval of it. The
// doubling of OpenFor is the back-off for when no one waits: it decides
// when the breaker turns half-open by itself, and which callers that cannot
// wait fail at once.
//
// A dead upstream that fails fast therefore receives, per key, Failures
// attempts and then at most Probes per open period: while callers wait, one
// probe every ProbeInterval (5 a second with the defaults); while none do,
// only what callers that come by send, at most Probes per open period of
// 0.5s, 1s, 2s, 2s, ... Attempts already in flight when it opens come on
// top (at most R × L at R requests a second answered after L).
type CircuitBreaker struct {
	// Failures is how many upstream failures in a row open the breaker.
	// Default 5, as Envoy's consecutive-5xx outlier detection: the
	// contract's floor, and few enough that a dead upstream is found
	// within the first handful of attempts.
	Failures int

	// Window is the span over which the share of failures is measured: the
	// breaker opens only while at least half of the last Window's outcomes
	// were failures. Default 1s. It bounds how long an upstream that dies
	// after serving well takes to trip the breaker: at a steady rate, about
	// half of Window.
	Window time.Duration

	// OpenFor is how long the breaker stays open before it lets a probe
	// go. Default 500ms: a probe costs the upstream one request, and the
	// sooner it goes, the sooner waiting callers learn of a recovery.
	OpenFor time.Duration

	// MaxOpenFor is the longest the breaker stays open while probes keep
	// failing (OpenFor doubles at each failed probe up to it), unless a
	// Retry-After asks for longer. It is also how long a probe may go
	// unanswered before another one may go, so a hung probe cannot keep
	// callers waiting on a recovered upstream. Default 4 × OpenFor (2s):
	// a recovery is seen at most 2s after it happens, and a dead upstream
	// gets one probe every 2s, 30 a minute. A value below OpenFor is
	// raised to OpenFor (no doubling).
	MaxOpenFor time.Duration

	// Probes is how many attempts may test the upstream at once while the
	// breaker is half-open; that many must succeed to close it. Default 1.
	Probes int

	// Spread is the span over which callers that waited for a successful
	// probe are let go, in the order they came (the longest waiting
	// first), evenly, so a recovered upstream sees a ramp instead of every
	// waiter at once. Default 250ms, short next to the time they already
	// waited. Negative: no spread.
	Spread time.Duration

	// ProbeInterval is the longest the breaker stays open while callers
	// wait for it, however long OpenFor has grown: a probe goes at least
	// that often, so they are served again within ProbeInterval of a
	// recovery. Default 200ms. Negative: no shortening (the open period
	// is OpenFor, doubling to MaxOpenFor, waiters or not). A Retry-After
	// on the failure that opened it still holds.
	ProbeInterval time.Duration

	// Disabled turns the breaker off: every attempt goes.
	Disabled bool
}

// WithCircuitBreaker configures the circuit breaker of every upstream (see
// [CircuitBreaker]); WithCircuitBreaker(CircuitBreaker{Disabled: true}) turns
// it off. The breaker is on by default, with the defaults CircuitBreaker
// lists. It shapes the transport as a whole and has no per-request
// counterpart (see [RequestOption]).
func WithCircuitBreaker(cb CircuitBreaker) Option {
	return Option{func(c *config) { c.breaker = cb }}
}

// withDefaults returns cb with its zero fields set to the defaults and the
// others brought into range.
func (cb CircuitBreaker) withDefaults() CircuitBreaker {
	if cb.Failures <= 0 {
		cb.Failures = defaultBreakerFailures
	}
	if cb.Window <= 0 {
		cb.Window = defaultBreakerWindow
	}
	if cb.OpenFor <= 0 {
		cb.OpenFor = defaultBreakerOpenFor
	}
	if cb.MaxOpenFor <= 0 {
		cb.MaxOpenFor = defaultBreakerMaxOpen * cb.OpenFor
	}
	cb.MaxOpenFor = max(cb.MaxOpenFor, cb.OpenFor)
	if cb.Probes <= 0 {
		cb.Probes = defaultBreakerProbes
	}
	switch {
	case cb.Spread == 0:
		cb.Spread = defaultBreakerSpread
	case cb.Spread < 0:
		cb.Spread = 0
	}
	switch {
	case cb.ProbeInterval == 0:
		cb.ProbeInterval = defaultBreakerProbeInterval
	case cb.ProbeInterval < 0:
		cb.ProbeInterval = 0
	}
	return cb
}

// BreakerState is the state of an upstream's circuit breaker.
type BreakerState int

const (
	// BreakerClosed lets every attempt go: the upstream is serving.
	BreakerClosed BreakerState = iota
	// BreakerOpen lets no attempt go: the upstream is failing.
	BreakerOpen
	// BreakerHalfOpen lets probes go to test whether the upstream is back.
	BreakerHalfOpen
)

// String names the state: "closed", "open" or "half-open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return "unknown"
}

// breaker is the circuit breaker of one upstream key. Time is passed in, as
// in golang.org/x/time/rate, so every transition can be tested exactly. A nil
// *breaker is a disabled one: it lets everything go.
//
// How the attempt loop uses it:
//
//  1. Before each attempt, allow(now). ok: send; probe != 0 marks the
//     attempt as a probe, to be passed back with its outcome.
//  2. Not ok: the caller may wait. changed is closed at the breaker's next
//     change (it closes, reopens, goes half-open or a probe slot frees up);
//     retryAt is when asking again is worth it even if nothing changed (the
//     open period ends, or the probe out counts as lost, when this caller
//     may probe itself). While open (state), a caller whose deadline or
//     retry schedule cannot reach next(now) fails at once with
//     ErrCircuitOpen (RetryAt: that time). While half-open a probe is out
//     and its answer may come any moment, so waiting on changed up to the
//     deadline is worth it. A caller that waits says so first: enter()
//     gives it its place, and leave(place) when it stops waiting; while
//     anyone waits the open period ends at ProbeInterval. A waiting caller
//     selects on changed, a timer to retryAt and its context, then asks
//     allow again. When it finds the breaker closed after waiting, it
//     sleeps until releaseAt(now, place(p)) first, so waiters go in the
//     order they came, not as a herd.
//  3. After each attempt that allow let go, exactly one of:
//     success(now, probe) for any answer that is not an upstream failure
//     (2xx, 3xx, 4xx, 429 included: the upstream is alive);
//     failure(now, probe, retryAfter) for 5xx, 529, an attempt timeout or
//     a connection error, with the server's Retry-After (already capped by
//     WithMaxRetryAfter; 0 if none);
//     abandon(probe) when there is no verdict on the upstream, such as the
//     caller's own context ending. Without it a probe would hold its slot
//     until it counts as lost.
type breaker struct {
	cfg CircuitBreaker // with defaults applied
	// onChange is told of every transition, in order, outside the lock, so
	// it may read the breaker (but should be quick).
	onChange func(from, to BreakerState)
	// closed mirrors st == BreakerClosed so allow needs no lock then.
	closed atomic.Bool

	mu  sync.Mutex
	st  BreakerState
	run int // upstream failures in a row, while closed
	// outcomes counts successes (a) and failures (b) while closed, for the
	// rule that an upstream serving most requests never trips it.
	outcomes  window
	openFor   time.Duration // the current open period: OpenFor, doubling per failed probe
	openUntil time.Time

	// Probes. Each gets an id from seq; those of the current half-open
	// period are the ids from first on. live holds the ids that still hold
	// a slot (not answered, abandoned or counted as lost).
	seq       uint64
	first     uint64
	live      []uint64
	lastProbe time.Time
	probeOK   int // probes of this period that succeeded

	// oks counts successes while closed that are not yet in outcomes: the
	// hot path counts them without the lock or the clock (countSuccess),
	// and the next failure dates them (foldLocked).
	oks      atomic.Int64
	foldedAt time.Time

	closedAt time.Time // when it last closed after being open, for releaseAt
	changed  broadcast // fired at a change of state or a freed probe slot

	// Waiters. waiting counts the callers waiting now; places are handed
	// out in arrival order (seats is the last one given). hurryAt is when
	// the open period ends while anyone waits (see ProbeInterval). At a
	// close, the places of the callers who waited through that outage
	// are (firstSeat, lastSeat], for place.
	waiting             int
	seats               uint64
	hurryAt             time.Time
	outageSeat          uint64 // seats when it last opened from closed
	firstSeat, lastSeat uint64

	pending   []transition // changes not yet told to onChange
	reporting bool         // a goroutine is telling onChange
}

type transition struct{ from, to BreakerState }

// newBreaker returns the breaker cb describes, or nil when it is disabled.
func newBreaker(cb CircuitBreaker, onChange func(from, to BreakerState)) *breaker {
	if cb.Disabled {
		return nil
	}
	cb = cb.withDefaults()
	b := &breaker{
		cfg:      cb,
		onChange: onChange,
		outcomes: newWindow(cb.Window),
		openFor:  cb.OpenFor,
		live:     make([]uint64, 0, cb.Probes),
	}
	b.closed.Store(true)
	return b
}

// allow says whether an attempt may go now (see the type's comment). probe is
// non-zero for a probe; retryAt and changed are set when ok is false.
func (b *breaker) allow(now time.Time) (ok bool, probe uint64, retryAt time.Time, changed <-chan struct{}) {
	if b == nil || b.closed.Load() {
		return true, 0, time.Time{}, nil
	}
	b.mu.Lock()
	defer b.unlock()
	switch b.st {
	case BreakerClosed:
		return true, 0, time.Time{}, nil
	case BreakerOpen:
		if until := b.untilLocked(); now.Before(until) {
			return false, 0, until, b.changed.wait()
		}
		b.halfOpenLocked()
	}
	lostAt := b.lastProbe.Add(b.cfg.MaxOpenFor)
	if len(b.live) >= b.cfg.Probes && now.Before(lostAt) {
		return false, 0, lostAt, b.changed.wait()
	}
	if len(b.live) >= b.cfg.Probes {
		// The probes out have gone unanswered for MaxOpenFor: they no
		// longer hold the slots. Their answers still count if they come.
		b.live = b.live[:0]
	}
	b.seq++
	b.live = append(b.live, b.seq)
	b.lastProbe = now
	return true, b.seq, time.Time{}, nil
}

// untilLocked is when the open period ends: at openUntil, or, while anyone
// waits, at hurryAt if that is sooner.
func (b *breaker) untilLocked() time.Time {
	if b.waiting > 0 && !b.hurryAt.IsZero() && b.hurryAt.Before(b.openUntil) {
		return b.hurryAt
	}
	return b.openUntil
}

// next is when an attempt may go for a caller that waits from now on: the
// end of the open period as it is while someone waits (zero if the
// breaker is not open).
func (b *breaker) next(now time.Time) time.Time {
	if b == nil {
		return time.Time{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.st != BreakerOpen {
		return time.Time{}
	}
	until := b.openUntil
	if !b.hurryAt.IsZero() && b.hurryAt.Before(until) {
		until = b.hurryAt
	}
	return until
}

// enter registers a caller that waits for the breaker, and returns its
// place in arrival order; leave(place) when it stops waiting.
func (b *breaker) enter() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.waiting++
	b.seats++
	return b.seats
}

// leave ends a wait that enter began.
func (b *breaker) leave() {
	b.mu.Lock()
	b.waiting--
	b.mu.Unlock()
}

// place is the share of the callers that waited through the last outage
// who came before the one at seat, in [0, 1): its place in the spread
// after the close (see releaseAt). 0 for a seat outside that outage.
func (b *breaker) place(seat uint64) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if seat <= b.firstSeat || seat > b.lastSeat {
		return 0
	}
	return float64(seat-b.firstSeat-1) / float64(b.lastSeat-b.firstSeat)
}

// lets reports, without a lock or the clock, that the breaker is closed (or
// disabled): every attempt may go.
func (b *breaker) lets() bool { return b == nil || b.closed.Load() }

// start dates the breaker's creation, so successes counted before its first
// failure are dated from then (see foldLocked).
func (b *breaker) start(now time.Time) {
	if b != nil {
		b.mu.Lock()
		b.foldedAt = now
		b.mu.Unlock()
	}
}

// countSuccess records a success of a non-probe attempt while the breaker is
// closed, without the lock or the clock, and reports whether it did; when it
// did not, call success. This keeps the breaker off the happy path: a
// request that succeeds costs it one atomic add.
func (b *breaker) countSuccess(probe uint64) bool {
	if b == nil {
		return true
	}
	if probe != 0 || !b.closed.Load() {
		return false
	}
	b.oks.Add(1)
	return true
}

// foldLocked moves the successes countSuccess counted into outcomes, dated
// now: of the n counted since the last fold, the share that falls within the
// last Window if they came evenly (see lazyShare). Any of them ends the run
// of failures.
func (b *breaker) foldLocked(now time.Time) {
	if n := b.oks.Swap(0); n > 0 {
		b.run = 0
		b.outcomes.add(now, lazyShare(n, b.foldedAt, now, b.cfg.Window), 0)
	}
	b.foldedAt = now
}

// success records an answer from the upstream that is not a failure of it.
func (b *breaker) success(now time.Time, probe uint64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.unlock()
	freed := b.release(probe)
	switch {
	case b.st == BreakerHalfOpen && probe >= b.first && probe != 0:
		b.probeOK++
		if b.probeOK >= b.cfg.Probes {
			b.closeLocked(now)
		} else if freed {
			b.changed.fire() // a waiter may take the slot
		}
	case b.st == BreakerClosed:
		b.run = 0
		b.outcomes.add(now, 1, 0)
	}
	// Open, or half-open with an attempt let go before it opened: the
	// answer is older than what the breaker knows, so it is ignored.
}

// failure records a failure of the upstream (5xx, 529, attempt timeout,
// connection error). retryAfter is the server's wait, if it sent one: the
// breaker stays open at least that long.
func (b *breaker) failure(now time.Time, probe uint64, retryAfter time.Duration) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.unlock()
	b.release(probe)
	switch {
	case b.st == BreakerHalfOpen && probe >= b.first && probe != 0:
		b.openFor = min(2*b.openFor, b.cfg.MaxOpenFor)
		b.openLocked(now, retryAfter)
	case b.st == BreakerClosed:
		b.foldLocked(now)
		b.run++
		b.outcomes.add(now, 0, 1)
		if b.run >= b.cfg.Failures {
			if ok, failed := b.outcomes.sums(now); failed >= ok {
				b.openLocked(now, retryAfter)
			}
		}
	}
}

// abandon gives back the slot of a probe that ended with no verdict on the
// upstream, so the next caller can probe instead of waiting for it to count
// as lost. Calling it for a non-probe (0) does nothing.
func (b *breaker) abandon(probe uint64) {
	if b == nil || probe == 0 {
		return
	}
	b.mu.Lock()
	defer b.unlock()
	if b.release(probe) && b.st == BreakerHalfOpen {
		b.changed.fire()
	}
}

// state returns the state at now; an open period that has ended shows (and
// becomes) half-open.
func (b *breaker) state(now time.Time) BreakerState {
	if b == nil {
		return BreakerClosed
	}
	b.mu.Lock()
	defer b.unlock()
	if b.st == BreakerOpen && !now.Before(b.openUntil) {
		b.halfOpenLocked()
	}
	return b.st
}

// releaseAt returns when a caller that waited for the breaker and woke at now
// may go: spread evenly over what is left of Spread since the breaker
// closed, by its place rnd in [0, 1) (see place). Outside that span, or
// when the breaker is not closed (the caller will ask allow again), it is
// now.
func (b *breaker) releaseAt(now time.Time, rnd float64) time.Time {
	if b == nil {
		return now
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	end := b.closedAt.Add(b.cfg.Spread)
	if b.st != BreakerClosed || !now.Before(end) {
		return now
	}
	rnd = min(max(rnd, 0), 1)
	return now.Add(time.Duration(rnd * float64(end.Sub(now))))
}

// release frees the slot probe holds, reporting whether it held one.
func (b *breaker) release(probe uint64) bool {
	if probe == 0 {
		return false
	}
	for i, id := range b.live {
		if id == probe {
			b.live = append(b.live[:i], b.live[i+1:]...)
			return true
		}
	}
	return false
}

func (b *breaker) openLocked(now time.Time, retryAfter time.Duration) {
	b.openUntil = now.Add(max(b.openFor, retryAfter))
	b.hurryAt = time.Time{}
	if p := b.cfg.ProbeInterval; p > 0 {
		b.hurryAt = now.Add(max(p, retryAfter))
	}
	if b.st == BreakerClosed {
		b.outageSeat = b.seats
	}
	b.run = 0
	b.live = b.live[:0]
	b.setLocked(BreakerOpen)
}

func (b *breaker) halfOpenLocked() {
	b.first = b.seq + 1
	b.live = b.live[:0]
	b.probeOK = 0
	b.setLocked(BreakerHalfOpen)
}

func (b *breaker) closeLocked(now time.Time) {
	b.run = 0
	b.outcomes.reset() // what it counted led to the opening; start afresh
	b.oks.Store(0)
	b.foldedAt = now
	b.openFor = b.cfg.OpenFor
	b.closedAt = now
	b.firstSeat, b.lastSeat = b.outageSeat, b.seats
	b.live = b.live[:0]
	b.setLocked(BreakerClosed)
}

func (b *breaker) setLocked(to BreakerState) {
	from := b.st
	b.st = to
	b.closed.Store(to == BreakerClosed)
	b.changed.fire()
	if b.onChange != nil && from != to {
		b.pending = append(b.pending, transition{from, to})
	}
}

// unlock releases b.mu, first telling onChange of the transitions made while
// it was held. One goroutine at a time does the telling, in order; one that
// makes a transition meanwhile leaves it to that goroutine. The hook runs
// without the lock, so it may call state.
func (b *breaker) unlock() {
	if len(b.pending) == 0 || b.reporting {
		b.mu.Unlock()
		return
	}
	b.reporting = true
	for len(b.pending) > 0 {
		batch := b.pending
		b.pending = nil
		b.mu.Unlock()
		for _, t := range batch {
			b.onChange(t.from, t.to)
		}
		b.mu.Lock()
	}
	b.reporting = false
	b.mu.Unlock()
}
