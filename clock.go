package retryhttp

import "time"

// Clock is the source of time for waits, timeouts and rate arithmetic.
//
// The default is the system clock. Tests inject their own (see [WithClock]) so
// that a schedule of 1s, 2s, 4s... waits is checked exactly without sleeping
// through it. The methods use only standard types so a fake clock needs no
// import of this package.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a channel that receives once d has passed, and a stop
	// function that reports whether it stopped the timer before it fired.
	NewTimer(d time.Duration) (c <-chan time.Time, stop func() bool)
	// AfterFunc calls f in its own goroutine once d has passed, unless the
	// returned stop function is called first.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// systemClock is the Clock backed by the time package.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

func (systemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}
