package retryhttp

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Retry budget defaults: Finagle's RetryBudget defaults (20% of requests on
// top of 10 retries a second, deposits living 10 seconds), which it has
// shipped since 2016 as enough for transient errors and too little for a
// retry storm.
const (
	defaultBudgetRatio  = 0.2
	defaultBudgetMin    = 10.0
	defaultBudgetWindow = 10 * time.Second
	// minBudgetWindow is the shortest Window: a budget that forgets requests
	// faster than retries are spaced would bound nothing.
	minBudgetWindow = time.Second
	// maxBudgetRatio keeps Ratio × requests finite (Tower's bound too).
	maxBudgetRatio = 1000
)

// RetryBudget bounds the retries sent to each upstream (see [WithKeyFunc]) to a
// share of its requests, so that an outage cannot multiply the load on it:
// the scheme of Finagle's RetryBudget and Tower's retry budget, and the
// "retry ratio" of the SRE book. The zero value means the defaults.
//
// Every request's first attempt is counted and never held back. A retry
// goes only if, counting it, the retries of the last Window do not exceed
//
//	Ratio × (requests of the last Window) + MinPerSecond × Window
//
// (Window in seconds). Otherwise the retry is not made and the caller gets
// the failure it had. "The last Window" is counted in tenths of it: the
// current tenth and the nine before, so a request or retry counts for
// between 0.9 × Window and Window after it was made, and memory stays
// bounded whatever the rate.
//
// Over any span of T (a whole number of tenths of Window), it follows that
//
//	retries ≤ Ratio × (requests in T and in the 0.9 × Window before it)
//	        + MinPerSecond × Window × ⌈T / Window⌉
//
// so a client offering R requests a second sends at most about
// Ratio × R + MinPerSecond retries a second, for as long as the upstream
// fails: with the defaults, at 100 requests a second, 0.2 × 100 × 69 + 600 =
// 1,980 retries in a minute instead of 5 per request (30,000). Only retries
// after upstream failures (5xx, 529, attempt timeouts, connection errors)
// draw on the budget; a 429 that the server paces does not.
type RetryBudget struct {
	// Ratio is the retries allowed per request. Default 0.2: at most one
	// attempt in six is a retry while the upstream fails. Negative: none
	// beyond MinPerSecond.
	Ratio float64

	// MinPerSecond is the retries allowed per second whatever the traffic,
	// so a client that sends few requests can still retry each of them a
	// few times. Default 10. Negative: none beyond Ratio.
	MinPerSecond float64

	// Window is how long a request counts toward retries (and a retry
	// against them). Default 10s; at least 1s.
	Window time.Duration

	// Disabled turns the budget off: retries are bounded by [WithMaxRetries]
	// alone.
	Disabled bool
}

// WithRetryBudget sets the retry budget of every upstream (see [RetryBudget]);
// WithRetryBudget(RetryBudget{Disabled: true}) turns it off. The budget is on
// by default, with the defaults RetryBudget lists. It shapes the transport as
// a whole and has no per-request counterpart (see [RequestOption]).
func WithRetryBudget(b RetryBudget) Option {
	return Option{func(c *config) { c.retryBudget = b }}
}

// withDefaults returns rb with its zero fields set to the defaults and the
// others brought into range.
func (rb RetryBudget) withDefaults() RetryBudget {
	switch {
	case rb.Ratio == 0 || math.IsNaN(rb.Ratio):
		rb.Ratio = defaultBudgetRatio
	case rb.Ratio < 0:
		rb.Ratio = 0
	case rb.Ratio > maxBudgetRatio:
		rb.Ratio = maxBudgetRatio
	}
	switch {
	case rb.MinPerSecond == 0 || math.IsNaN(rb.MinPerSecond):
		rb.MinPerSecond = defaultBudgetMin
	case rb.MinPerSecond < 0:
		rb.MinPerSecond = 0
	}
	if rb.Window <= 0 {
		rb.Window = defaultBudgetWindow
	}
	rb.Window = max(rb.Window, minBudgetWindow)
	return rb
}

// budget is the retry budget of one upstream key. Time is passed in, as in
// golang.org/x/time/rate. A nil *budget is a disabled one: it allows every
// retry.
//
// The attempt loop calls deposit for every request's first attempt and
// withdraw before each retry that follows an upstream failure; a retry
// withdraw refuses is not made.
type budget struct {
	ratio   float64
	reserve float64 // MinPerSecond × Window: the retries allowed per window whatever the traffic

	span time.Duration // Window

	// count counts first attempts: the budget's own counter, or the
	// upstream's counts of requests (see countWith: count and also, added
	// up), so the hot path adds to one counter for both. It is added to
	// without the lock or the clock (depositLater), and the next look at
	// the budget dates what was added since the last one (foldLocked).
	count *atomic.Uint64
	also  *atomic.Uint64 // nil for the budget's own
	own   atomic.Uint64

	mu       sync.Mutex
	w        window // a: requests, b: retries
	foldedAt time.Time
	folded   uint64 // count when last folded
}

// newBudget returns the budget rb describes, or nil when it is disabled.
func newBudget(rb RetryBudget) *budget {
	if rb.Disabled {
		return nil
	}
	rb = rb.withDefaults()
	b := &budget{
		ratio:   rb.Ratio,
		reserve: rb.MinPerSecond * rb.Window.Seconds(),
		w:       newWindow(rb.Window),
		span:    rb.Window,
	}
	b.count = &b.own
	return b
}

// countWith makes requests and quick, added up, the count of first
// attempts: what is added to either is deposited, as by depositLater. Call
// it before the budget is used.
func (b *budget) countWith(requests, quick *atomic.Uint64) {
	if b != nil {
		b.count, b.also = requests, quick
		b.folded = b.counted()
	}
}

// counted is the count of first attempts so far.
func (b *budget) counted() uint64 {
	if b.also != nil {
		return b.count.Load() + b.also.Load()
	}
	return b.count.Load()
}

// start dates the budget's creation, so first attempts counted before it is
// first consulted are dated from then (see foldLocked).
func (b *budget) start(now time.Time) {
	if b != nil {
		b.mu.Lock()
		b.foldedAt = now
		b.mu.Unlock()
	}
}

// depositLater counts a request's first attempt without the lock or the
// clock; it is dated when the budget is next consulted. This keeps the
// budget off the happy path: a request costs it one atomic add.
func (b *budget) depositLater() {
	if b != nil {
		b.count.Add(1)
	}
}

// foldLocked moves the deposits depositLater counted into w, dated now: of
// the n counted since the last fold, the share that falls within the last
// Window if they came evenly (see lazyShare).
func (b *budget) foldLocked(now time.Time) {
	cur := b.counted()
	if n := int64(cur - b.folded); n > 0 {
		b.w.add(now, lazyShare(n, b.foldedAt, now, b.span), 0)
	}
	b.folded, b.foldedAt = cur, now
}

// lazyShare is how many of n events counted evenly over [since, now] fall
// within the last span before now: all of them when that is no longer
// than span (or since is unknown), else n × span / (now − since), rounded
// up. Counting them at now then keeps them a little longer than their true
// times would: a rule built on them errs on the side of the traffic seen.
func lazyShare(n int64, since, now time.Time, span time.Duration) int64 {
	elapsed := now.Sub(since)
	if since.IsZero() || elapsed <= span {
		return n
	}
	return int64(math.Ceil(float64(n) * float64(span) / float64(elapsed)))
}

// budgetSlack absorbs float rounding (0.1 × 30 is not quite 3), so a retry the
// formula allows exactly is not refused.
const budgetSlack = 1e-9

// deposit counts a request's first attempt. It is never refused.
func (b *budget) deposit(now time.Time) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.w.add(now, 1, 0)
}

// withdraw takes one retry from the budget, reporting false (and taking
// nothing) when the budget is spent.
func (b *budget) withdraw(now time.Time) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.foldLocked(now)
	requests, retries := b.w.sums(now)
	if float64(retries+1) > b.ratio*float64(requests)+b.reserve+budgetSlack {
		return false
	}
	b.w.add(now, 0, 1)
	return true
}

// left returns how many retries withdraw would allow at now if no request
// came meanwhile; +Inf for a disabled budget.
func (b *budget) left(now time.Time) float64 {
	if b == nil {
		return math.Inf(1)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.foldLocked(now)
	requests, retries := b.w.sums(now)
	return max(0, math.Floor(b.ratio*float64(requests)+b.reserve-float64(retries)+budgetSlack))
}

// windowSlots is how many slots a window has: the granularity of "the last
// Window" is a tenth of it.
const windowSlots = 10

// window counts two kinds of events (a and b) over the last span of time, in
// windowSlots slots of span/windowSlots each: the current slot and the ones
// before it. Memory is fixed whatever the rate. Slots are aligned to the
// first event; a time before the newest slot (a clock that stepped back)
// counts in the newest slot. Not safe for concurrent use: its owner locks.
type window struct {
	width time.Duration // one slot's span
	epoch time.Time     // start of slot 0: the time of the first event
	head  int64         // index of the newest slot, counted from epoch
	used  bool
	a, b  [windowSlots]int64
}

func newWindow(span time.Duration) window {
	return window{width: max(span/windowSlots, 1)}
}

// at moves the window forward to now, clearing the slots that fell out of
// it, and returns the index of now's slot in a and b.
func (w *window) at(now time.Time) int {
	if !w.used {
		w.used, w.epoch, w.head = true, now, 0
		return 0
	}
	if i := int64(now.Sub(w.epoch) / w.width); i > w.head {
		for k := w.head + 1; k <= min(i, w.head+windowSlots); k++ {
			w.a[k%windowSlots], w.b[k%windowSlots] = 0, 0
		}
		w.head = i
	}
	return int(w.head % windowSlots)
}

// add counts na events of kind a and nb of kind b at now.
func (w *window) add(now time.Time, na, nb int64) {
	i := w.at(now)
	w.a[i] += na
	w.b[i] += nb
}

// sums returns the counts of the window that ends in now's slot.
func (w *window) sums(now time.Time) (a, b int64) {
	if !w.used {
		return 0, 0
	}
	w.at(now)
	for i := range w.a {
		a += w.a[i]
		b += w.b[i]
	}
	return a, b
}

// reset forgets every event.
func (w *window) reset() { *w = newWindow(w.width * windowSlots) }
