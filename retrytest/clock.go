package retrytest

import (
	"time"

	"github.com/retryhttp/retryhttp/internal/fakeclock"
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
	c *fakeclock.Clock
}

// NewClock returns a Clock whose time starts at the system's time now, so
// deadlines of contexts made with the time package stay meaningful.
func NewClock() *Clock { return &Clock{c: fakeclock.NewAuto(time.Now())} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return c.c.Now() }

// NewTimer fires at once: the channel already holds the time d from now,
// which is the clock's time from then on.
func (c *Clock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) { return c.c.NewTimer(d) }

// AfterFunc calls f in its own goroutine once the clock's time reaches d
// from now.
func (c *Clock) AfterFunc(d time.Duration, f func()) func() bool { return c.c.AfterFunc(d, f) }

// Advance moves the clock's time forward by d, firing the AfterFunc calls
// it passes.
func (c *Clock) Advance(d time.Duration) { c.c.Advance(d) }

// Waits returns every wait asked of the clock (NewTimer), in order.
func (c *Clock) Waits() []time.Duration { return c.c.Sleeps() }
