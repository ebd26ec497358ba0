// Package sdktest holds what the tests of the SDK examples share: a clock on
// which every wait passes at once, for the retrying transport and the fake
// provider alike, and the provider and checks both tests use.
//
// The clock is written against retryhttp.Clock's method set, which uses
// only standard types, so it needs no import of retryhttp: a user's own
// tests can copy it as it is.
package sdktest

import (
	"sync"
	"time"
)

// Start is the instant the tests' clocks start from. It is a whole second
// so that the reset instants providers send (RFC 3339 in whole seconds) fall
// exactly where the rate arithmetic puts them.
var Start = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// Clock is a retryhttp.Clock on which every timer fires at once, moving the
// time on to its deadline.
//
// Give the same Clock to the transport (retryhttp.WithClock) and to the
// provider (retrytest.Config.Now): then a Retry-After of one second moves
// both one second on, so the provider's bucket has refilled when the retry
// arrives, its Stats.Arrivals show the wait the client kept, and the test
// takes microseconds instead of a second.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

// NewClock returns a Clock that reads start until a timer moves it.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer records the wait, moves the clock to its deadline and returns a
// channel that already holds the new time. The stop function reports false,
// as for a timer that has fired.
func (c *Clock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	if d > 0 {
		c.now = c.now.Add(d)
	}
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch, func() bool { return false }
}

// AfterFunc never calls f. retryhttp uses it only for attempt timeouts,
// which these tests do not set; firing it at once would cancel every
// attempt as it starts.
func (c *Clock) AfterFunc(d time.Duration, f func()) func() bool {
	return func() bool { return true }
}

// Sleeps returns the waits timed on the clock so far, in order.
func (c *Clock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}
