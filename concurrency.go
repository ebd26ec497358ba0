package retryhttp

import "context"

// WithMaxConcurrency caps the attempts in flight at once through the
// transport. A slot is taken just before an attempt is sent and held until
// its response body is closed or read to EOF (a stream counts as in flight
// for as long as it is read), or at once when the attempt fails or its
// response has no body (http.NoBody: HEAD, 204, 304). It is not
// held during waits between attempts. 0, the default, sets no cap. Waiting
// for a slot is first come, first served, and bounded by the request context.
func WithMaxConcurrency(n int) Option {
	return Option{func(c *config) { c.maxConcurrency = max(n, 0) }}
}

// slots is a counting semaphore; a nil slots admits everyone.
type slots chan struct{}

func newSlots(n int) slots {
	if n <= 0 {
		return nil
	}
	return make(slots, n)
}

// acquire takes a slot, or returns the context's error.
func (s slots) acquire(ctx context.Context) error {
	if s == nil {
		return nil
	}
	select {
	case s <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tryAcquire takes a slot if one is free now. A request that finds none
// waits in acquire; slots freed meanwhile go to the waiters first, so
// trying first does not jump the queue.
func (s slots) tryAcquire() bool {
	if s == nil {
		return true
	}
	select {
	case s <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s slots) release() {
	if s != nil {
		<-s
	}
}

// release frees what an admitted attempt holds, when it failed before a
// response body could carry the release.
func (t *RetryTransport) release(a *admission) {
	if a.hasSlot {
		t.slots.release()
	}
	if l := a.limitSlot(); l != nil {
		l.release(a.limit.epoch)
	}
}

// limitSlot is the adaptive limit the attempt holds a slot in, nil if none.
func (a *admission) limitSlot() *concurrencyLimit {
	if !a.limit.held {
		return nil
	}
	return a.pass.u.limit
}

// releaser combines the attempt's own release (its timeout context) with
// its concurrency slot, to run once when the attempt is done with. (Its
// slot in the adaptive limit is released by the response body itself, or
// by release when the attempt fails: no closure to allocate.)
func (t *RetryTransport) releaser(a *admission, timer func()) func() {
	if !a.hasSlot {
		return timer
	}
	if timer == nil {
		return t.slots.release
	}
	return func() {
		timer()
		t.slots.release()
	}
}
