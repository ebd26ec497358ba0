package retryhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jarcoal/httpmock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each outcome is judged once (outcome.go); these tests hold the stages to
// that one judgement.

func TestFinalServerErrorsDoNotOpenTheBreaker(t *testing.T) {
	// A healthy server that does not implement one path: its 501s are
	// answers it meant, final and never a failure of the upstream.
	rt := New(roundTripFunc(func(req *http.Request) (*http.Response, error) {
		code := http.StatusOK
		if req.URL.Path == "/unimplemented" {
			code = http.StatusNotImplemented
		}
		return &http.Response{StatusCode: code, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
	}), WithClock(autoClock()))
	for range 12 {
		resp, err := rt.RoundTrip(get(t, "https://api.test/unimplemented"))
		require.NoError(t, err)
		assert.Equal(t, http.StatusNotImplemented, resp.StatusCode)
		assert.Equal(t, 1, Attempts(resp), "final: never retried")
		resp.Body.Close()
	}
	s := rt.Stats()
	require.Len(t, s, 1)
	assert.Equal(t, BreakerClosed, s[0].Breaker)
	assert.Zero(t, s[0].Failures)
	resp, err := rt.RoundTrip(get(t, "https://api.test/ok"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestLocalErrorsNeitherCountNorRetry(t *testing.T) {
	boom := errors.New("disk gone")
	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err == nil {
			served.Add(1) // a whole request came in
		}
	}))
	defer srv.Close()
	rt := New(nil, WithBackoff(time.Millisecond, time.Millisecond), WithJitter(0))
	defer rt.CloseIdleConnections()

	t.Run("a body whose Read fails", func(t *testing.T) {
		for range 12 {
			req, _ := http.NewRequest(http.MethodPost, srv.URL, &failingReader{data: []byte("partial"), err: boom})
			_, err := rt.RoundTrip(req)
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.ErrorIs(t, err, boom)
			assert.False(t, e.Retryable)
			assert.Equal(t, 1, e.Attempts)
			assert.Equal(t, userMessages[kindLocal], e.UserMessage())
		}
	})
	t.Run("a Content-Length shorter than the body, with GetBody", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("0123456789"))
		req.ContentLength = 5
		_, err := rt.RoundTrip(req)
		var e *Error
		require.ErrorAs(t, err, &e)
		assert.ErrorIs(t, err, ErrInvalidRequest)
		assert.Equal(t, 1, e.Attempts, "never retried: it can never succeed")
		assert.False(t, e.Retryable)
	})
	assert.Zero(t, served.Load(), "no request reached the server")
	s := rt.Stats()
	require.Len(t, s, 1)
	assert.Zero(t, s[0].Failures, "the upstream did nothing wrong")
	assert.Equal(t, BreakerClosed, s[0].Breaker)
}

func TestCheckResponseReportsTheTransportsVerdict(t *testing.T) {
	mock, _ := scripted(t, step{status: http.StatusConflict, body: `{"error":{"message":"busy"}}`})
	rt := New(mock, WithClock(autoClock()), WithMaxRetries(2),
		WithClassifier(func(resp *http.Response, err error) Verdict {
			if resp != nil && resp.StatusCode == http.StatusConflict {
				return Retry
			}
			return Default
		}))
	resp, err := rt.RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, 3, Attempts(resp))
	var e *Error
	require.ErrorAs(t, CheckResponse(resp, nil), &e)
	assert.True(t, e.Retryable, "the classifier retried it: it is transient")
	assert.Equal(t, "retries exhausted", e.StopReason)
	assert.ErrorIs(t, e, ErrRetriesExhausted)
	assert.NotContains(t, e.Error(), "retries exhausted: retryhttp", "the stop is said once")
}

func TestCheckResponseSaysFinalWhenTheClassifierStopped(t *testing.T) {
	mock, _ := scripted(t, step{status: http.StatusServiceUnavailable})
	rt := New(mock, WithClock(autoClock()),
		WithClassifier(func(*http.Response, error) Verdict { return Stop }))
	resp, err := rt.RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	defer resp.Body.Close()
	var e *Error
	require.ErrorAs(t, CheckResponse(resp, nil), &e)
	assert.False(t, e.Retryable)
	assert.Empty(t, e.StopReason)
}

func TestRetryableAgreesWithRoundTripOnQuotaBodies(t *testing.T) {
	quota := func() *http.Response {
		return &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"error":{"type":"insufficient_quota","message":"You exceeded your current quota"}}`))}
	}
	r := quota()
	assert.False(t, Retryable(r, nil), "an exhausted quota does not come back by waiting")
	body, _ := io.ReadAll(r.Body)
	assert.Contains(t, string(body), "insufficient_quota", "the peeked bytes are put back")

	mock, _ := scripted(t, step{status: http.StatusTooManyRequests, header: http.Header{"Content-Type": {"application/json"}},
		body: `{"error":{"type":"insufficient_quota","message":"You exceeded your current quota"}}`})
	resp, err := New(mock, WithClock(autoClock())).RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, 1, Attempts(resp), "RoundTrip treats it as final too")
}

func TestAttemptsCountWhatWasSent(t *testing.T) {
	calls := 0
	req, _ := http.NewRequest(http.MethodPost, "https://api.test/x", strings.NewReader("hello"))
	req.GetBody = func() (io.ReadCloser, error) {
		calls++
		return nil, errors.New("the file is gone")
	}
	var attempts int
	mock, bodies := scripted(t, step{status: http.StatusServiceUnavailable})
	rt := New(mock, WithClock(autoClock()), WithHooks(Hooks{OnAttempt: func(Event) { attempts++ }}))
	_, err := rt.RoundTrip(req)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.ErrorIs(t, err, ErrBodyNotReplayable)
	assert.Equal(t, 1, calls)
	assert.Len(t, bodies(), 1, "the server saw one attempt")
	assert.Equal(t, 1, e.Attempts)
	assert.Equal(t, 1, attempts, "OnAttempt")
	assert.Equal(t, uint64(1), rt.Stats()[0].Attempts)
	assert.Equal(t, userMessages[kindLocal], e.UserMessage(), "a local failure is not blamed on a busy service")
	assert.False(t, e.Retryable)
}

func TestStopReasonsAreSentinels(t *testing.T) {
	cases := []struct {
		name  string
		steps []step
		opts  []Option
		ctx   func() (context.Context, context.CancelFunc)
		want  error
	}{
		{"retries exhausted on a status", []step{{status: 503}}, []Option{WithMaxRetries(1)}, nil, ErrRetriesExhausted},
		{"retries exhausted on an error", []step{{err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}}}, []Option{WithMaxRetries(1)}, nil, ErrRetriesExhausted},
		{"server wait too long", []step{{status: 503, header: http.Header{"Retry-After": {"120"}}}}, nil, nil, ErrServerWaitTooLong},
		{"past the deadline", []step{{status: 503, header: http.Header{"Retry-After": {"30"}}}}, []Option{WithClock(nil)}, // the deadline is on the system clock
			func() (context.Context, context.CancelFunc) {
				return context.WithDeadline(context.Background(), time.Now().Add(10*time.Second))
			}, ErrPastDeadline},
		{"retry budget spent", []step{{status: 503}}, []Option{WithMaxRetries(3),
			WithCircuitBreaker(CircuitBreaker{Disabled: true}), WithRetryBudget(RetryBudget{Ratio: -1, MinPerSecond: -1})}, nil, ErrRetryBudgetSpent},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mock, _ := scripted(t, c.steps...)
			rt := New(mock, append([]Option{WithClock(autoClock())}, c.opts...)...)
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if c.ctx != nil {
				ctx, cancel = c.ctx()
			}
			defer cancel()
			resp, err := getWith(t, rt, ctx)
			if err == nil {
				defer resp.Body.Close()
				err = CheckResponse(resp, nil)
			}
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.ErrorIs(t, err, c.want)
			assert.NotEmpty(t, e.StopReason, "the words stay")
			if c.steps[0].err != nil {
				assert.ErrorIs(t, err, c.steps[0].err, "and the last attempt's error is still reached")
			}
		})
	}
}

func TestErrorsThatAreNotTheNetworksAreRetriedOnce(t *testing.T) {
	// httpmock's answer to a URL it has no responder for (a typo in a
	// test): not a network error, so one retry, not the whole schedule.
	mock := httpmock.NewMockTransport()
	clock := autoClock()
	rt := New(mock, WithClock(clock))
	_, err := rt.RoundTrip(get(t, "https://api.test/typo"))
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, 2, e.Attempts)
	assert.Len(t, clock.Sleeps(), 1, "one backoff")
	assert.Zero(t, rt.Stats()[0].Failures, "a mock's refusal is not the upstream's failure")

	t.Run("network errors keep the whole schedule", func(t *testing.T) {
		for _, netErr := range []error{
			&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED},
			io.ErrUnexpectedEOF,
			errors.New("net/http: HTTP/1.x transport connection broken: unexpected EOF"),
			fmt.Errorf("read: %w", syscall.ECONNRESET),
		} {
			assert.True(t, networkError(netErr), "%v", netErr)
		}
		mock, _ := scripted(t, step{err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}})
		_, err := New(mock, WithClock(autoClock()), WithCircuitBreaker(CircuitBreaker{Disabled: true})).RoundTrip(get(t, "https://api.test/x"))
		require.ErrorAs(t, err, &e)
		assert.Equal(t, DefaultMaxRetries+1, e.Attempts)
	})
	t.Run("unless the classifier says retry", func(t *testing.T) {
		mock := httpmock.NewMockTransport()
		rt := New(mock, WithClock(autoClock()), WithMaxRetries(3),
			WithClassifier(func(_ *http.Response, err error) Verdict { return Retry }))
		_, err := rt.RoundTrip(get(t, "https://api.test/typo"))
		require.ErrorAs(t, err, &e)
		assert.Equal(t, 4, e.Attempts)
	})
}

func TestRateLimit403HoldsTheUpstream(t *testing.T) {
	// GitHub's secondary rate limit: a 403 with Retry-After. Its wait is
	// the upstream's, not only the request's: the next request waits too.
	mock, _ := scripted(t,
		step{status: http.StatusForbidden, header: http.Header{"Retry-After": {"2"}},
			body: `{"message":"You have exceeded a secondary rate limit."}`},
		step{status: http.StatusOK})
	clock := autoClock()
	rt := New(mock, WithClock(clock), WithMaxRetries(0))
	resp, err := rt.RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	s := rt.Stats()[0]
	assert.Equal(t, uint64(1), s.RateLimited)
	assert.Equal(t, testStart.Add(2*time.Second), s.HeldUntil, "the upstream is held for the server's wait")
}
