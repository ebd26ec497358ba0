// Package fakeclock is a manually driven retryhttp.Clock for tests.
//
// Time moves only when the test says so: Advance fires every timer that falls
// due, in deadline order. In auto mode (NewAuto) a timer made with NewTimer
// fires at once and moves the clock to its deadline (firing the AfterFunc
// timers that time passes), which lets a test run a whole retry schedule
// instantly and then read the waits it took from Sleeps.
package fakeclock

import (
	"sort"
	"sync"
	"time"
)

// Clock is a fake clock. The zero value is not usable; call New or NewAuto.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	auto   bool
	timers []*timer
	sleeps []time.Duration
	added  chan struct{}
}

type timer struct {
	c        *Clock
	deadline time.Time
	ch       chan time.Time
	f        func()
	fired    bool
	stopped  bool
}

// New returns a manual clock starting at start.
func New(start time.Time) *Clock {
	return &Clock{now: start, added: make(chan struct{}, 1024)}
}

// NewAuto returns a clock whose NewTimer timers fire immediately, advancing
// the clock to their deadline. AfterFunc timers fire when the clock's time
// passes them: through such waits, or Advance.
func NewAuto(start time.Time) *Clock {
	c := New(start)
	c.auto = true
	return c
}

// Now returns the fake current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Sleeps returns the durations of every NewTimer made so far, in order.
func (c *Clock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// NewTimer implements retryhttp.Clock.
func (c *Clock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	t := &timer{c: c, deadline: c.now.Add(d), ch: make(chan time.Time, 1)}
	if c.auto {
		t.fired = true
		due := c.advanceLocked(laterOf(t.deadline, c.now))
		t.ch <- c.now
		c.mu.Unlock()
		fire(due)
		return t.ch, t.Stop
	}
	c.add(t)
	c.mu.Unlock()
	return t.ch, t.Stop
}

// AfterFunc implements retryhttp.Clock.
func (c *Clock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, deadline: c.now.Add(d), f: f}
	c.add(t)
	return t.Stop
}

func (c *Clock) add(t *timer) {
	c.timers = append(c.timers, t)
	select {
	case c.added <- struct{}{}:
	default:
	}
}

// Pending returns how many timers are waiting to fire.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.fired && !t.stopped {
			n++
		}
	}
	return n
}

// WaitForTimers blocks until at least n timers are pending or the real-time
// limit passes; it reports whether they were.
func (c *Clock) WaitForTimers(n int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for c.Pending() < n {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-c.added:
		case <-time.After(time.Millisecond):
		}
	}
	return true
}

// Advance moves the clock forward by d, firing due timers in deadline order.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	due := c.advanceLocked(c.now.Add(d))
	c.mu.Unlock()
	fire(due)
}

// advanceLocked moves the clock to target and takes out the timers now due,
// in deadline order.
func (c *Clock) advanceLocked(target time.Time) []*timer {
	sort.SliceStable(c.timers, func(i, j int) bool { return c.timers[i].deadline.Before(c.timers[j].deadline) })
	var due []*timer
	rest := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.fired || t.stopped:
		case !t.deadline.After(target):
			t.fired = true
			due = append(due, t)
		default:
			rest = append(rest, t)
		}
	}
	c.timers = rest
	c.now = target
	return due
}

// fire runs due timers' functions, each in its own goroutine, and sends on
// their channels.
func fire(due []*timer) {
	for _, t := range due {
		if t.f != nil {
			go t.f()
		} else {
			t.ch <- t.deadline
		}
	}
}

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.fired || t.stopped {
		return false
	}
	t.stopped = true
	return true
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
