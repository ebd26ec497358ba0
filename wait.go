package retryhttp

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// ErrAttemptTimeout marks an attempt cut off by [WithAttemptTimeout] before
// its response headers came: [errors.Is] finds it in such an attempt's error
// (Event.Err, and the [*Error] when retrying ends on it). It is transient:
// another attempt may well be faster.
var ErrAttemptTimeout = errors.New("retryhttp: attempt timed out waiting for response headers")

// errAttemptTimeout is ErrAttemptTimeout, by the name the package uses.
var errAttemptTimeout = ErrAttemptTimeout

// nextWait returns the wait before the next attempt. A positive server
// wait (outcome.serverWait) is a floor: the retry leaves no earlier, plus
// jitter (up to a fifth of the wait, never more than WithJitter) so that
// callers told the same time do not all return at the same instant, unless
// the upstream's pace spreads them (spreadByPace, see upstream.spreadsRetries): the
// retry then takes its turn on the pace like any other attempt, and jitter
// would only make it late (a fixed window's refusals told to wait a second,
// rounded up, came back up to 0.2 s into the next window, behind a plain
// loop's). Without a server wait, the backoff schedule applies.
func (p *policy) nextWait(server time.Duration, spreadByPace bool, retry int, prev time.Duration) time.Duration {
	switch {
	case server > 0 && spreadByPace:
		return server
	case server > 0:
		return server + uniform(0, serverJitter(server, p.jitter), rand.Int64N)
	}
	return p.backoff(retry, prev, rand.Int64N)
}

// serverWaitJitter is the share of a server-requested wait that may be
// added to it as jitter: enough to spread callers told the same time, small
// enough that a server asking for 50 ms is not kept waiting a second.
const serverWaitJitter = 5 // a fifth

// serverJitter is the most jitter added to a server's wait d: a fifth of
// it, never more than WithJitter.
func serverJitter(d, jitter time.Duration) time.Duration {
	return min(d/serverWaitJitter, jitter)
}

// rateLimitFallbackWait is the wait after a rate-limit 403 that names no
// time (GitHub's secondary limits): GitHub asks for at least a minute.
const rateLimitFallbackWait = time.Minute

// exhaustedUntil is the latest reset among the quotas that are used up.
func exhaustedUntil(l RateLimits) time.Time {
	var until time.Time
	for _, d := range dimensions {
		if q := l.Quota(d); q.Exhausted() && q.Reset.After(until) {
			until = q.Reset
		}
	}
	return until
}

// sleep waits on the transport's clock for d, or until wake is closed, or
// until the request's context ends, whichever is first: the one wait of the
// transport (between attempts, for a turn, behind a probe, for a breaker).
// Only the context's end is an error. A nil wake never closes; with none,
// a d of zero or less does not wait.
func (c *call) sleep(d time.Duration, wake <-chan struct{}) error {
	if d <= 0 && wake == nil {
		return c.ctx.Err()
	}
	ch, stop := c.t.cfg.clock.NewTimer(d)
	defer stop()
	select {
	case <-ch:
	case <-wake:
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
	return nil
}

// attemptTimer bounds one attempt until its response headers arrive.
type attemptTimer struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   func() bool
}

func startAttemptTimer(parent context.Context, clk Clock, d time.Duration) (context.Context, *attemptTimer) {
	ctx, cancel := context.WithCancelCause(parent)
	t := &attemptTimer{ctx: ctx, cancel: cancel}
	t.stop = clk.AfterFunc(d, func() { cancel(errAttemptTimeout) })
	return ctx, t
}

// headersArrived stops the timer, so reading the body is not timed, and
// returns the function that releases the attempt's context once its body is
// done with. A nil timer returns nil.
func (t *attemptTimer) headersArrived() func() {
	if t == nil {
		return nil
	}
	t.stop()
	return func() { t.cancel(context.Canceled) }
}

// explain marks err as an attempt timeout when the timer, and not the
// caller's context, ended the attempt.
func (t *attemptTimer) explain(parent context.Context, err error) error {
	if t == nil || parent.Err() != nil || !errors.Is(context.Cause(t.ctx), errAttemptTimeout) {
		return err
	}
	return fmt.Errorf("%w: %w", errAttemptTimeout, err)
}
