package retryhttp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp/internal/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// switchable is an upstream that answers 503 until it is told to recover.
type switchable struct {
	up       atomic.Bool
	attempts atomic.Int64
	status   int // what it answers while down; 503 if 0
	header   http.Header
	downFor  int64 // when > 0, it recovers after this many attempts
}

func (s *switchable) RoundTrip(req *http.Request) (*http.Response, error) {
	n := s.attempts.Add(1)
	if s.up.Load() || (s.downFor > 0 && n > s.downFor) {
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
	}
	status := s.status
	if status == 0 {
		status = http.StatusServiceUnavailable
	}
	h := s.header.Clone()
	if h == nil {
		h = http.Header{}
	}
	return &http.Response{StatusCode: status, Header: h, Body: http.NoBody, Request: req}, nil
}

func getWith(t *testing.T, rt http.RoundTripper, ctx context.Context) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.test/v1", nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	if resp != nil {
		resp.Body.Close()
	}
	return resp, err
}

func TestBreakerOpensOnADeadUpstreamAndFailsFastWhenACallerCannotWait(t *testing.T) {
	up := &switchable{}
	clk := autoClock()
	rt := New(up, WithClock(clk), WithMaxRetries(4), WithJitter(0))

	resp, err := getWith(t, rt, context.Background())
	require.NoError(t, err)
	assert.Equal(t, 503, resp.StatusCode)
	assert.EqualValues(t, 5, up.attempts.Load(), "five failures in a row")
	require.Len(t, rt.Stats(), 1)
	assert.Equal(t, BreakerOpen, rt.Stats()[0].Breaker, "they open the breaker")

	// A caller whose deadline ends before the breaker lets a probe go does
	// not wait, and sends nothing.
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(100*time.Millisecond))
	defer cancel()
	_, err = getWith(t, rt, ctx)
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrCircuitOpen))
	var e *Error
	require.True(t, errors.As(err, &e))
	assert.True(t, e.Retryable)
	assert.Equal(t, 0, e.Attempts)
	assert.Equal(t, clk.Now().Add(200*time.Millisecond), e.RetryAt,
		"when the breaker lets a probe go for a caller that waits (ProbeInterval, sooner than OpenFor)")
	assert.Equal(t, "The service is temporarily unavailable. Please try again in a few seconds.", e.UserMessage())
	assert.EqualValues(t, 5, up.attempts.Load())
}

func TestAnOpenBreakerMakesCallersWaitForTheProbe(t *testing.T) {
	up := &switchable{}
	clk := fakeclock.New(testStart)
	rt := New(up, WithClock(clk), WithMaxRetries(0), WithJitter(0))
	for i := 0; i < 5; i++ {
		getWith(t, rt, context.Background())
	}
	require.Equal(t, BreakerOpen, rt.Stats()[0].Breaker)

	const waiters = 8
	var wg sync.WaitGroup
	codes := make(chan int, waiters)
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := getWith(t, rt, context.Background())
			if assert.NoError(t, err) {
				codes <- resp.StatusCode
			}
		}()
	}
	require.True(t, clk.WaitForTimers(waiters, 5*time.Second), "every caller waits for the breaker")
	assert.EqualValues(t, 5, up.attempts.Load(), "nothing is sent while it is open")
	assert.Equal(t, waiters, rt.Stats()[0].Queued)

	up.up.Store(true)
	clk.Advance(500 * time.Millisecond) // one probe goes, and succeeds
	require.Eventually(t, func() bool { return rt.Stats()[0].Breaker == BreakerClosed }, 5*time.Second, time.Millisecond)
	// The others are spread over the next 250ms rather than sent at once.
	for i := 0; i < 25; i++ {
		clk.WaitForTimers(1, 10*time.Millisecond)
		clk.Advance(10 * time.Millisecond)
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		assert.Equal(t, 200, c)
	}
	assert.EqualValues(t, 5+waiters, up.attempts.Load(), "each waiter sent exactly one attempt")
}

func TestPacedRateLimitsNeitherTripTheBreakerNorSpendTheBudget(t *testing.T) {
	up := &switchable{status: http.StatusTooManyRequests, header: http.Header{"Retry-After": {"1"}}}
	rt := New(up, WithClock(autoClock()), WithMaxRetries(20), WithJitter(0),
		WithRetryBudget(RetryBudget{Ratio: -1, MinPerSecond: -1}))
	resp, err := getWith(t, rt, context.Background())
	require.NoError(t, err)
	assert.Equal(t, 429, resp.StatusCode)
	assert.EqualValues(t, 21, up.attempts.Load(), "every retry was made: no budget was spent")
	s := rt.Stats()[0]
	assert.Equal(t, BreakerClosed, s.Breaker)
	assert.EqualValues(t, 21, s.RateLimited)
	assert.EqualValues(t, 0, s.Failures)
}

func TestRetryBudgetStopsRetriesAfterUpstreamFailures(t *testing.T) {
	up := &switchable{}
	rt := New(up, WithClock(autoClock()), WithMaxRetries(10), WithJitter(0),
		WithCircuitBreaker(CircuitBreaker{Disabled: true}),
		WithRetryBudget(RetryBudget{Ratio: 0.5, MinPerSecond: -1, Window: time.Hour}))
	// One request deposits 1: half a retry. A second makes one retry.
	_, err := getWith(t, rt, context.Background())
	require.NoError(t, err)
	assert.EqualValues(t, 1, up.attempts.Load(), "no retry: the budget holds half of one")
	_, err = getWith(t, rt, context.Background())
	require.NoError(t, err)
	assert.EqualValues(t, 3, up.attempts.Load(), "one retry, then the budget is spent")
	s := rt.Stats()[0]
	assert.EqualValues(t, 2, s.Requests)
	assert.EqualValues(t, 1, s.Retries)
	assert.Zero(t, s.BudgetLeft)
}

func TestBudgetSpentIsTheStopReason(t *testing.T) {
	up := &switchable{}
	var reason string
	rt := New(up, WithClock(autoClock()), WithMaxRetries(3),
		WithCircuitBreaker(CircuitBreaker{Disabled: true}),
		WithRetryBudget(RetryBudget{Ratio: -1, MinPerSecond: -1}),
		WithHooks(Hooks{OnGiveUp: func(e Event) { reason = e.Reason }}))
	getWith(t, rt, context.Background())
	assert.Equal(t, "the retry budget for this upstream is spent", reason)
}

func TestBreakerStateChangesAreObservable(t *testing.T) {
	up := &switchable{downFor: 6} // five failures open it, the first probe fails too
	var mu sync.Mutex
	var seen []BreakerEvent
	rt := New(up, WithClock(autoClock()), WithMaxRetries(10), WithJitter(0),
		WithHooks(Hooks{OnBreaker: func(e BreakerEvent) { mu.Lock(); seen = append(seen, e); mu.Unlock() }}))
	resp, err := getWith(t, rt, context.Background())
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode)
	assert.EqualValues(t, 7, up.attempts.Load())
	mu.Lock()
	defer mu.Unlock()
	key := "https://api.test"
	assert.Equal(t, []BreakerEvent{
		{key, BreakerClosed, BreakerOpen},
		{key, BreakerOpen, BreakerHalfOpen},
		{key, BreakerHalfOpen, BreakerOpen},
		{key, BreakerOpen, BreakerHalfOpen},
		{key, BreakerHalfOpen, BreakerClosed},
	}, seen)
}

func TestServingUpstreamCountsSuccessesWithoutTheClock(t *testing.T) {
	b := newBreaker(CircuitBreaker{}, nil)
	now := testStart
	b.start(now)
	for i := 0; i < 100; i++ {
		require.True(t, b.countSuccess(0))
	}
	now = now.Add(500 * time.Millisecond)
	for i := 0; i < 10; i++ {
		b.failure(now, 0, 0)
	}
	assert.Equal(t, BreakerClosed, b.state(now), "100 successes in the last second outweigh 10 failures")

	b = newBreaker(CircuitBreaker{}, nil)
	b.start(testStart)
	for i := 0; i < 100; i++ {
		b.countSuccess(0)
	}
	now = testStart.Add(100 * time.Second) // 100 successes over 100s: 1 in the last second
	for i := 0; i < 5; i++ {
		b.failure(now, 0, 0)
	}
	assert.Equal(t, BreakerOpen, b.state(now), "old successes count only for their share of the window")
}

func TestBudgetDepositsAreDatedWhenConsulted(t *testing.T) {
	b := newBudget(RetryBudget{Ratio: 0.1, MinPerSecond: -1, Window: 10 * time.Second})
	b.start(testStart)
	for i := 0; i < 100; i++ {
		b.depositLater()
	}
	assert.Equal(t, 10.0, b.left(testStart.Add(5*time.Second)), "100 requests in the window: 10 retries")
	for i := 0; i < 100; i++ {
		b.depositLater()
	}
	assert.Equal(t, 2.0, b.left(testStart.Add(5*time.Second+50*time.Second)),
		"100 more over 50s: only the last 10s's share (20) counts, and the first 100 expired")
}

func TestWhatCountsAsAnUpstreamFailure(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	resp := func(code int) *http.Response { return &http.Response{StatusCode: code} }
	cases := []struct {
		name string
		ctx  context.Context
		resp *http.Response
		err  error
		want health
	}{
		{"500", context.Background(), resp(500), nil, failing},
		{"503", context.Background(), resp(503), nil, failing},
		{"529", context.Background(), resp(529), nil, failing},
		{"429 shows the upstream is up", context.Background(), resp(429), nil, serving},
		{"404", context.Background(), resp(404), nil, serving},
		{"200", context.Background(), resp(200), nil, serving},
		{"attempt timeout", context.Background(), nil, fmt.Errorf("get: %w", errAttemptTimeout), failing},
		{"connection refused", context.Background(), nil, &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, failing},
		{"no such host is not the upstream's load", context.Background(), nil, &net.DNSError{Err: "no such host", IsNotFound: true}, noVerdict},
		{"the caller gave up", canceled, nil, context.Canceled, noVerdict},
		{"501 is an answer the server meant", context.Background(), resp(501), nil, serving},
		{"505 too", context.Background(), resp(505), nil, serving},
		{"a body that failed to read is the request's fault", context.Background(), nil, fmt.Errorf("%w: %w", errBodyFailed, errors.New("disk gone")), noVerdict},
		{"a body that cannot be made again", context.Background(), nil, fmt.Errorf("%w: GetBody: boom", ErrBodyNotReplayable), noVerdict},
		{"a Content-Length that is not the body's", context.Background(), nil, fmt.Errorf("%w: x", ErrInvalidRequest), noVerdict},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			call := &call{ctx: c.ctx}
			got := noVerdict
			if c.resp != nil {
				got = statusHealth(c.resp.StatusCode)
			} else {
				got = call.errorHealth(c.err)
			}
			assert.Equal(t, c.want.String(), got.String())
		})
	}
}

func TestKeysThatHoldCredentialsAreNeverWrittenOut(t *testing.T) {
	secret := "Bearer sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789"
	other := "Bearer sk-ant-api03-zyxwvutsrqponmlkjihgfedcba9876543210"
	a, b := upstreamKey{custom: secret}.String(), upstreamKey{custom: other}.String()
	assert.NotContains(t, a, "sk-ant")
	assert.NotContains(t, a, "abcdefghijklmnop")
	assert.NotEqual(t, a, b, "different keys stay apart")
	assert.Equal(t, a, upstreamKey{custom: secret}.String(), "and the same key names the same upstream")
	assert.Equal(t, fingerprint("tenant-42"), upstreamKey{custom: "tenant-42"}.String(), "a label is fingerprinted as well")
	assert.Equal(t, "https://api.test:8443", upstreamKey{scheme: "https", host: "api.test:8443"}.String())

	rt := New(&switchable{}, WithClock(autoClock()), WithMaxRetries(0),
		WithKeyFunc(func(r *http.Request) string { return r.Header.Get("Authorization") }))
	req, _ := http.NewRequest(http.MethodGet, "https://api.test/v1", nil)
	req.Header.Set("Authorization", secret)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Len(t, rt.Stats(), 1)
	assert.NotContains(t, rt.Stats()[0].Key, "sk-ant")
}
