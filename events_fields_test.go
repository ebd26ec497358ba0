package retryhttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp/internal/fakeclock"
)

// The fields hooks need to trace and measure a request without state of
// their own: its context, its upstream's key, what each wait was for, how
// long each attempt took and what the transport made of it, and why
// retrying stopped.

// recorder collects every hook's events.
type recorder struct {
	mu                               sync.Mutex
	attempts, done, retries, giveUps []Event
	breakers                         []BreakerEvent
}

func (r *recorder) hooks() Hooks {
	add := func(to *[]Event) func(Event) {
		return func(e Event) { r.mu.Lock(); *to = append(*to, e); r.mu.Unlock() }
	}
	return Hooks{
		OnAttempt: add(&r.attempts), OnAttemptDone: add(&r.done), OnRetry: add(&r.retries), OnGiveUp: add(&r.giveUps),
		OnBreaker: func(e BreakerEvent) { r.mu.Lock(); r.breakers = append(r.breakers, e); r.mu.Unlock() },
	}
}

func (r *recorder) attemptsCopy() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.attempts...)
}

type ctxKey struct{}

// advancing answers with the steps in order, each after d on clk: an attempt
// that takes d on the transport's clock.
func advancing(clk *fakeclock.Clock, d time.Duration, steps ...step) http.RoundTripper {
	next := sequence(steps...)
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		clk.Advance(d)
		return next.RoundTrip(req)
	})
}

func TestEventsCarryContextKeyWaitKindsAndAttemptOutcomes(t *testing.T) {
	clk := autoClock()
	var rec recorder
	base := advancing(clk, 250*time.Millisecond,
		step{status: 503}, step{status: 429, header: http.Header{"Retry-After": {"3"}}}, step{status: 200})
	rt := New(base, WithClock(clk), WithHooks(rec.hooks()), WithJitter(0))
	ctx := context.WithValue(context.Background(), ctxKey{}, "caller")
	resp, err := rt.RoundTrip(get(t, "https://api.test/v1/x?api_key=SECRET").WithContext(ctx))
	require.NoError(t, err)
	resp.Body.Close()

	all := append(append(append([]Event(nil), rec.attempts...), rec.done...), rec.retries...)
	for _, e := range all {
		assert.Equal(t, "caller", e.Context.Value(ctxKey{}), "the request's context")
		assert.Equal(t, "https://api.test", e.Key, "the upstream, as Stats names it")
	}

	require.Len(t, rec.retries, 2)
	assert.Equal(t, WaitBackoff, rec.retries[0].WaitKind)
	assert.Equal(t, time.Second, rec.retries[0].Wait)
	assert.Equal(t, WaitServer, rec.retries[1].WaitKind, "Retry-After asked for the wait")
	assert.Equal(t, 3*time.Second, rec.retries[1].Wait)

	require.Len(t, rec.done, 3)
	for i, want := range []struct {
		status    int
		retryable bool
		reason    string
	}{{503, true, "503 Service Unavailable"}, {429, true, "429 Too Many Requests"}, {200, false, "200 OK"}} {
		e := rec.done[i]
		assert.Equal(t, i+1, e.Attempt)
		assert.Equal(t, want.status, e.StatusCode)
		assert.Equal(t, want.retryable, e.Retryable, "attempt %d", i+1)
		assert.Equal(t, want.reason, e.Reason)
		assert.Equal(t, 250*time.Millisecond, e.Duration, "the attempt's time on the transport's clock")
		assert.NotContains(t, e.URL, "SECRET")
	}
	require.Len(t, rec.attempts, 3)
	assert.Zero(t, rec.attempts[0].Wait)
	assert.Equal(t, WaitNone, rec.attempts[0].WaitKind, "the first attempt went at once")
	assert.Empty(t, rec.giveUps)
}

func TestOnAttemptDoneReportsErrors(t *testing.T) {
	var rec recorder
	refused := &netErr{"connection refused"}
	rt := New(sequence(step{err: refused}, step{status: 400}), WithClock(autoClock()), WithHooks(rec.hooks()), WithJitter(0))
	resp, err := rt.RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	resp.Body.Close()
	require.Len(t, rec.done, 2)
	assert.ErrorIs(t, rec.done[0].Err, refused)
	assert.True(t, rec.done[0].Retryable)
	assert.Zero(t, rec.done[0].StatusCode)
	assert.Equal(t, 400, rec.done[1].StatusCode)
	assert.False(t, rec.done[1].Retryable, "a 400 is final")
}

// netErr is a net.Error: a connection failure the transport retries.
type netErr struct{ msg string }

func (e *netErr) Error() string   { return e.msg }
func (e *netErr) Timeout() bool   { return false }
func (e *netErr) Temporary() bool { return false }

func TestOnGiveUpNamesTheStopReason(t *testing.T) {
	for _, tc := range []struct {
		name string
		step step
		opts []Option
		want error
	}{
		{"retries exhausted", step{status: 503}, []Option{WithMaxRetries(1)}, ErrRetriesExhausted},
		{"server wait too long", step{status: 429, header: http.Header{"Retry-After": {"3600"}}}, nil, ErrServerWaitTooLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec recorder
			opts := append([]Option{WithClock(autoClock()), WithHooks(rec.hooks()), WithJitter(0)}, tc.opts...)
			resp, err := New(sequence(tc.step), opts...).RoundTrip(get(t, "https://api.test/x"))
			require.NoError(t, err)
			resp.Body.Close()
			require.Len(t, rec.giveUps, 1)
			e := rec.giveUps[0]
			assert.ErrorIs(t, e.Stop, tc.want)
			assert.Equal(t, tc.step.status, e.StatusCode)
			assert.Zero(t, e.Wait, "it was sent: no wait to be admitted is reported")
		})
	}
}

func TestOnGiveUpOfARefusalReportsTheWaitAndItsKind(t *testing.T) {
	var rec recorder
	clk := autoClock()
	rt := New(sequence(step{status: 200}), WithClock(clk), WithHooks(rec.hooks()),
		WithRateLimit(Limits{RequestsPerMinute: 1}), WithMaxQueueWait(10*time.Second))
	roundTrips(t, rt, 1)
	_, err := rt.RoundTrip(get(t, "https://api.test/x"))
	require.ErrorIs(t, err, ErrRateLimited)
	require.Len(t, rec.giveUps, 1)
	e := rec.giveUps[0]
	assert.ErrorIs(t, e.Stop, ErrRateLimited)
	assert.ErrorIs(t, e.Err, ErrRateLimited)
	assert.Zero(t, e.StatusCode)
	assert.Equal(t, "https://api.test", e.Key)
}

func TestOnAttemptReportsWhatTheAttemptWaitedFor(t *testing.T) {
	t.Run("client-side limit", func(t *testing.T) {
		var rec recorder
		clk := autoClock()
		rt := New(sequence(step{status: 200}), WithClock(clk), WithHooks(rec.hooks()), WithRateLimit(Limits{RequestsPerMinute: 60}))
		roundTrips(t, rt, 2)
		require.Len(t, rec.attempts, 2)
		assert.Equal(t, WaitNone, rec.attempts[0].WaitKind)
		assert.Equal(t, WaitLimit, rec.attempts[1].WaitKind)
		assert.Equal(t, time.Second, rec.attempts[1].Wait, "one a second")
	})
	t.Run("hold", func(t *testing.T) {
		var rec recorder
		clk := autoClock()
		base := sequence(step{status: 429, header: http.Header{"Retry-After": {"5"}}}, step{status: 200})
		rt := New(base, WithClock(clk), WithHooks(rec.hooks()), WithMaxRetries(0), WithJitter(0))
		roundTrips(t, rt, 2) // the 429 ends the first request; it holds the upstream for the second
		require.Len(t, rec.attempts, 2)
		assert.Equal(t, WaitHold, rec.attempts[1].WaitKind)
		assert.Equal(t, 5*time.Second, rec.attempts[1].Wait)
	})
	t.Run("breaker", func(t *testing.T) {
		var rec recorder
		clk := autoClock()
		base := sequence(step{status: 503}, step{status: 503}, step{status: 503}, step{status: 503}, step{status: 503}, step{status: 200})
		rt := New(base, WithClock(clk), WithHooks(rec.hooks()), WithBackoff(time.Millisecond, time.Millisecond), WithJitter(0),
			WithRetryBudget(RetryBudget{Disabled: true}))
		roundTrips(t, rt, 1)
		require.Len(t, rec.attempts, 6)
		assert.Equal(t, WaitBreaker, rec.attempts[5].WaitKind, "the sixth attempt waited for the open breaker")
		assert.Equal(t, CircuitBreaker{}.withDefaults().ProbeInterval-time.Millisecond, rec.attempts[5].Wait,
			"until it let a probe go: at the probe interval, since a caller waits")
		require.Len(t, rec.breakers, 3)
		assert.Equal(t, BreakerOpen, rec.breakers[0].To)
		assert.Equal(t, BreakerClosed, rec.breakers[2].To)
	})
	t.Run("pace", func(t *testing.T) {
		var rec recorder
		h := http.Header{"Ratelimit-Policy": {`"default";q=10;w=1`}, "Ratelimit": {`"default";r=5;t=1`}}
		rt := New(sequence(step{status: 200, header: h}), WithClock(autoClock()), WithHooks(rec.hooks()))
		roundTrips(t, rt, 3) // the upstream states a pace of 10 a second
		var wg sync.WaitGroup
		for i := 0; i < 6; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); roundTrips(t, rt, 1) }()
		}
		wg.Wait()
		paced := 0
		for _, e := range rec.attempts {
			if e.WaitKind == WaitPace {
				paced++
				assert.Positive(t, e.Wait)
			}
		}
		assert.Positive(t, paced, "a burst waits for its paced turns")
	})
	t.Run("probe", func(t *testing.T) {
		var rec recorder
		release := make(chan struct{})
		var calls sync.WaitGroup
		calls.Add(1)
		first := true
		var mu sync.Mutex
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			wasFirst := first
			first = false
			mu.Unlock()
			if wasFirst {
				calls.Done()
				<-release // the probe is out
			}
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
		})
		rt := New(base, WithClock(autoClock()), WithHooks(rec.hooks()))
		done := make(chan struct{})
		go func() { defer close(done); roundTrips(t, rt, 1) }()
		calls.Wait()
		second := make(chan struct{})
		go func() { defer close(second); roundTrips(t, rt, 1) }()
		require.Eventually(t, func() bool { return rt.Stats()[0].Queued == 1 || len(rec.attemptsCopy()) == 2 }, 5*time.Second, time.Millisecond)
		close(release)
		<-done
		<-second
		got := rec.attemptsCopy()
		require.Len(t, got, 2)
		assert.Equal(t, WaitProbe, got[1].WaitKind, "the second request queued behind the first one to a new upstream")
	})
	t.Run("concurrency", func(t *testing.T) {
		var rec recorder
		rt := New(sequence(step{status: 200, body: "x"}), WithClock(autoClock()), WithHooks(rec.hooks()), WithMaxConcurrency(1))
		first, err := rt.RoundTrip(get(t, "https://api.test/x"))
		require.NoError(t, err)
		done := make(chan struct{})
		go func() {
			defer close(done)
			roundTrips(t, rt, 1)
		}()
		require.Eventually(t, func() bool { return len(rt.slots) == 1 }, 5*time.Second, time.Millisecond)
		time.Sleep(10 * time.Millisecond) // the second request is waiting for the slot
		io.Copy(io.Discard, first.Body)
		first.Body.Close()
		<-done
		require.Len(t, rec.attempts, 2)
		assert.Equal(t, WaitConcurrency, rec.attempts[1].WaitKind,
			"it waited in real time, none on the fake clock, and the kind still says so")
	})
}

func TestStatsKeepTheLastStatedLimits(t *testing.T) {
	clk := autoClock()
	h := http.Header{
		"X-Ratelimit-Limit-Requests":     {"10"},
		"X-Ratelimit-Remaining-Requests": {"7"},
		"X-Ratelimit-Reset-Requests":     {"6s"},
		"X-Ratelimit-Remaining-Tokens":   {"900"},
	}
	rt := New(sequence(step{status: 200}, step{status: 200, header: h}), WithClock(clk))
	roundTrips(t, rt, 1)
	s := rt.Stats()[0]
	assert.False(t, s.Limits.Known(), "nothing stated yet")
	assert.True(t, s.LimitsAt.IsZero())
	roundTrips(t, rt, 1)
	s = rt.Stats()[0]
	assert.Equal(t, int64(7), s.Limits.Requests.Remaining)
	assert.Equal(t, int64(10), s.Limits.Requests.Limit)
	assert.Equal(t, int64(900), s.Limits.Tokens.Remaining)
	assert.False(t, s.Limits.InputTokens.Known())
	assert.Equal(t, clk.Now(), s.LimitsAt)
	assert.Equal(t, clk.Now(), s.At, "the snapshot's time, on the transport's clock")
}

func TestErrAttemptTimeoutIsExported(t *testing.T) {
	var rec recorder
	clk := fakeclock.New(testStart)
	base := &blockingTransport{slow: map[int32]bool{1: true}}
	rt := New(base, WithClock(clk), WithAttemptTimeout(time.Second), WithMaxRetries(0), WithHooks(rec.hooks()))
	done := make(chan error, 1)
	go func() {
		_, err := rt.RoundTrip(get(t, "https://api.test/x"))
		done <- err
	}()
	require.True(t, clk.WaitForTimers(1, 5*time.Second))
	clk.Advance(time.Second)
	err := <-done
	assert.ErrorIs(t, err, ErrAttemptTimeout)
	require.Len(t, rec.done, 1)
	assert.ErrorIs(t, rec.done[0].Err, ErrAttemptTimeout, "the hook sees why the attempt failed")
	assert.Equal(t, time.Second, rec.done[0].Duration)
	assert.True(t, errors.Is(rec.done[0].Err, ErrAttemptTimeout))
}
