package retrytest

import (
	"sort"
	"sync"
	"time"
)

// Clock is a [retryhttp.Clock] for tests on which waits pass at once: a timer
// (NewTimer) fires as soon as it is made and moves the clock's time to its
// deadline, so a transport's backoffs, Retry-After waits and holds run in no
// real time while the transport still sees them pass. Timeouts (AfterFunc)
// fire only when the clock's time passes them, through waits or Advance.
//
//	clock := retrytest.NewClock()
//	rt := retryhttp.New(srv.Client().Transport, retryhttp.WithClock(clock))
//	... // a scripted 529, 429 (Retry-After: 1), 200 takes microseconds
//	clock.Waits() // [1.2s 1s]: the backoff and the server's wait
//
// It is safe for concurrent use. Concurrent waits add up: each moves the
// time by its own length, so measure one request's schedule at a time.
type Clock struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
	funcs []*clockFunc
}

type clockFunc struct {
	at      time.Time
	f       func()
	stopped bool
}

// NewClock returns a [Clock] whose time starts at the system's time now, so
// deadlines of contexts made with the time package stay meaningful.
func NewClock() *Clock { return &Clock{now: time.Now()} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer fires at once: the channel already holds the time d from now,
// which is the clock's time from then on.
func (c *Clock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	due := c.advanceLocked(max(d, 0))
	now := c.now
	c.mu.Unlock()
	run(due)
	ch := make(chan time.Time, 1)
	ch <- now
	return ch, func() bool { return false }
}

// AfterFunc calls f in its own goroutine once the clock's time reaches d
// from now.
func (c *Clock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	cf := &clockFunc{at: c.now.Add(d), f: f}
	c.funcs = append(c.funcs, cf)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if cf.stopped || cf.f == nil {
			return false
		}
		cf.stopped = true
		return true
	}
}

// Advance moves the clock's time forward by d, firing the AfterFunc calls
// it passes.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	due := c.advanceLocked(max(d, 0))
	c.mu.Unlock()
	run(due)
}

// Waits returns every wait asked of the clock (NewTimer), in order.
func (c *Clock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

// advanceLocked moves the time and takes out the functions now due, in
// the order of their times.
func (c *Clock) advanceLocked(d time.Duration) []func() {
	c.now = c.now.Add(d)
	sort.SliceStable(c.funcs, func(i, j int) bool { return c.funcs[i].at.Before(c.funcs[j].at) })
	var due []func()
	rest := c.funcs[:0]
	for _, cf := range c.funcs {
		switch {
		case cf.stopped:
		case !cf.at.After(c.now):
			due = append(due, cf.f)
			cf.f = nil // fired: stop reports false
		default:
			rest = append(rest, cf)
		}
	}
	c.funcs = rest
	return due
}

func run(fs []func()) {
	for _, f := range fs {
		go f()
	}
}
