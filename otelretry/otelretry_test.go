package otelretry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/retryhttp/retryhttp"
)

// 503, 503, 200: one logical span with two backoff waits, three client
// spans under it with their resend counts, the trace context on every
// attempt, and the metrics counting each attempt by outcome.
func TestTransientFailuresThenSuccess(t *testing.T) {
	h := newHarness(t, statuses([]int{503, 503, 200}, nil))
	resp, err := h.get(context.Background(), "/v1/messages?api_key=SECRETKEY&model=m")
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, 3, retryhttp.Attempts(resp), "retryhttp's own accessors still work on the response")

	logical := h.ended("retryhttp GET")
	require.Len(t, logical, 1)
	l := logical[0]
	assert.Equal(t, trace.SpanKindInternal, l.SpanKind())
	la := attrs(l.Attributes())
	assert.Equal(t, "success", la["retryhttp.verdict"])
	assert.Equal(t, "3", la["retryhttp.attempts"])
	assert.Equal(t, "200", la["http.response.status_code"])
	assert.Equal(t, "GET", la["http.request.method"])
	assert.Equal(t, h.upstream(), la["retryhttp.upstream"])
	assert.Equal(t, "127.0.0.1", la["server.address"])
	assert.NotContains(t, la, "retryhttp.stop_reason")
	assert.NotContains(t, la, "error.type")
	assert.Equal(t, codes.Unset, l.Status().Code)

	w := waits(l)
	require.Len(t, w, 2, "one wait before each retry")
	for i, e := range w {
		assert.Equal(t, "backoff", e["retryhttp.wait.kind"])
		assert.Equal(t, "503 Service Unavailable", e["retryhttp.wait.reason"])
		assert.Equal(t, fmt.Sprint(i+2), e["retryhttp.attempt"])
	}
	assert.Equal(t, "1", w[0]["retryhttp.wait.duration"], "the default backoff: 1s, then 2s")
	assert.Equal(t, "2", w[1]["retryhttp.wait.duration"])

	attempts := h.ended("GET")
	require.Len(t, attempts, 3)
	parents := h.traceparents()
	require.Len(t, parents, 3)
	for i, s := range attempts {
		a := attrs(s.Attributes())
		assert.Equal(t, trace.SpanKindClient, s.SpanKind())
		assert.Equal(t, spanID(l), s.Parent().SpanID(), "attempt %d is a child of the logical span", i+1)
		assert.Equal(t, l.SpanContext().TraceID(), s.SpanContext().TraceID())
		assert.Equal(t, []string{"503", "503", "200"}[i], a["http.response.status_code"])
		if i == 0 {
			assert.NotContains(t, a, "http.request.resend_count", "the first attempt is no resend")
		} else {
			assert.Equal(t, fmt.Sprint(i), a["http.request.resend_count"])
		}
		assert.NotContains(t, a["url.full"], "SECRETKEY", "url.full is retryhttp's redacted URL")
		assert.Contains(t, a["url.full"], "/v1/messages")
		assert.Contains(t, a["url.full"], "model=m")
		want := fmt.Sprintf("00-%s-%s-01", s.SpanContext().TraceID(), s.SpanContext().SpanID())
		assert.Equal(t, want, parents[i], "attempt %d carries its own span as the W3C parent", i+1)
	}
	assert.NotContains(t, la["url.full"], "SECRETKEY")

	m := h.collect()
	assert.Equal(t, 2.0, value(m[MetricAttempts], map[string]string{"retryhttp.outcome": "transient", "retryhttp.reason": "overloaded", "retryhttp.upstream": h.upstream(), "http.request.method": "GET"}))
	assert.Equal(t, 1.0, value(m[MetricAttempts], map[string]string{"retryhttp.outcome": "success", "retryhttp.reason": "ok"}))
	assert.Equal(t, 3.0, value(m["http.client.request.duration"], nil), "the standard metric, per attempt")
	assert.Equal(t, 2.0, value(m["http.client.request.duration"], map[string]string{"http.response.status_code": "503", "retryhttp.upstream": h.upstream()}))
	assert.Equal(t, 2.0, value(m[MetricRetryDelay], map[string]string{"retryhttp.wait.kind": "backoff"}))
	assert.Equal(t, 3.0, value(m[MetricQueueDuration], map[string]string{"retryhttp.wait.kind": "none"}), "every attempt, none of them queued")
	assert.Equal(t, 1.0, value(m[MetricRequestDuration], map[string]string{"retryhttp.verdict": "success"}))
	assert.Zero(t, value(m[MetricGivenUp], nil))
	assert.Equal(t, 1.0, value(m[MetricBreakerStatus], map[string]string{"retryhttp.breaker.state": "closed"}))
	assert.Zero(t, value(m[MetricBreakerStatus], map[string]string{"retryhttp.breaker.state": "open"}))
	assert.Zero(t, value(m[MetricQueued], nil))

	var sum float64
	for _, p := range points(m[MetricRetryDelay]) {
		sum += p.sum
	}
	assert.Equal(t, 3.0, sum, "1s + 2s of backoff")
}

// A 429 with Retry-After: the wait is the server's, and the attempt counts
// as rate limited. A Retry-After beyond the limit gives up at once.
func TestRateLimitedWithRetryAfter(t *testing.T) {
	h := newHarness(t, statuses([]int{429, 200}, func(i int, hd http.Header) {
		if i == 0 {
			hd.Set("Retry-After", "2")
		}
	}))
	_, err := h.get(context.Background(), "/x")
	require.NoError(t, err)

	l := h.ended("retryhttp GET")
	require.Len(t, l, 1)
	w := waits(l[0])
	require.NotEmpty(t, w)
	assert.Equal(t, "server", w[0]["retryhttp.wait.kind"])
	assert.Equal(t, "2", w[0]["retryhttp.wait.duration"])
	assert.Equal(t, "429 Too Many Requests", w[0]["retryhttp.wait.reason"])
	assert.Equal(t, "success", attrs(l[0].Attributes())["retryhttp.verdict"])

	m := h.collect()
	assert.Equal(t, 1.0, value(m[MetricAttempts], map[string]string{"retryhttp.outcome": "transient", "retryhttp.reason": "rate_limited"}))
	assert.Equal(t, 1.0, value(m[MetricRetryDelay], map[string]string{"retryhttp.wait.kind": "server"}))
	require.Contains(t, m, MetricHoldRemaining)
	assert.Zero(t, value(m[MetricHoldRemaining], map[string]string{"retryhttp.upstream": h.upstream()}), "the hold is over")
	require.Contains(t, m, MetricPaceRate)
}

func TestServerWaitTooLongGivesUp(t *testing.T) {
	h := newHarness(t, statuses([]int{429}, func(_ int, hd http.Header) { hd.Set("Retry-After", "3600") }))
	resp, err := h.get(context.Background(), "/x")
	require.NoError(t, err)
	assert.Equal(t, 429, resp.StatusCode)

	l := h.ended("retryhttp GET")
	require.Len(t, l, 1)
	la := attrs(l[0].Attributes())
	assert.Equal(t, "gave_up", la["retryhttp.verdict"])
	assert.Equal(t, "server_wait_too_long", la["retryhttp.stop_reason"])
	assert.Equal(t, "429", la["error.type"])
	assert.Equal(t, "1", la["retryhttp.attempts"])
	assert.Equal(t, codes.Error, l[0].Status().Code)
	assert.Contains(t, l[0].Status().Description, "longer than the limit")
	assert.Empty(t, waits(l[0]))

	m := h.collect()
	assert.Equal(t, 1.0, value(m[MetricGivenUp], map[string]string{"retryhttp.stop_reason": "server_wait_too_long", "retryhttp.upstream": h.upstream()}))
	assert.Equal(t, 1.0, value(m[MetricRequestDuration], map[string]string{"retryhttp.verdict": "gave_up"}))
	held := value(m[MetricHoldRemaining], map[string]string{"retryhttp.upstream": h.upstream()})
	assert.InDelta(t, 60, held, 1, "the 429 holds the upstream, within the 60s bound")
}

// The breaker opens after five upstream failures, refuses a caller who
// cannot wait, and closes on a successful probe: the transitions are
// counted, the state gauge follows, and the wait for the breaker is on the
// span of the request that waited.
func TestBreakerOpensAndCloses(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(200)
	}, WithRetryOptions(retryhttp.WithMaxRetries(4), retryhttp.WithBackoff(time.Millisecond, time.Millisecond),
		retryhttp.WithRetryBudget(retryhttp.RetryBudget{Disabled: true})))

	resp, err := h.get(context.Background(), "/x")
	require.NoError(t, err)
	assert.Equal(t, 503, resp.StatusCode)
	m := h.collect()
	assert.Equal(t, 1.0, value(m[MetricBreakerTransition], map[string]string{"retryhttp.breaker.state": "open", "retryhttp.upstream": h.upstream()}))
	assert.Equal(t, 1.0, value(m[MetricBreakerStatus], map[string]string{"retryhttp.breaker.state": "open"}))
	assert.Zero(t, value(m[MetricBreakerStatus], map[string]string{"retryhttp.breaker.state": "closed"}))
	assert.Equal(t, 1.0, value(m[MetricGivenUp], map[string]string{"retryhttp.stop_reason": "retries_exhausted"}))
	assert.Equal(t, 5.0, value(m[MetricAttempts], map[string]string{"retryhttp.outcome": "transient", "retryhttp.reason": "overloaded"}))

	// A caller whose deadline comes before the breaker lets a probe go is
	// refused at once.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err = h.get(ctx, "/x")
	cancel()
	require.ErrorIs(t, err, retryhttp.ErrCircuitOpen)
	refused := h.ended("retryhttp GET")[1]
	ra := attrs(refused.Attributes())
	assert.Equal(t, "gave_up", ra["retryhttp.verdict"])
	assert.Equal(t, "circuit_open", ra["retryhttp.stop_reason"])
	assert.Equal(t, "0", ra["retryhttp.attempts"])
	assert.Equal(t, codes.Error, refused.Status().Code)

	failing.Store(false)
	_, err = h.get(context.Background(), "/x")
	require.NoError(t, err)
	last := h.ended("retryhttp GET")[2]
	assert.Equal(t, "success", attrs(last.Attributes())["retryhttp.verdict"])
	w := waits(last)
	require.Len(t, w, 1)
	assert.Equal(t, "breaker", w[0]["retryhttp.wait.kind"])
	assert.Equal(t, "1", w[0]["retryhttp.attempt"])

	m = h.collect()
	for _, st := range []string{"open", "half_open", "closed"} {
		assert.Equal(t, 1.0, value(m[MetricBreakerTransition], map[string]string{"retryhttp.breaker.state": st}), st)
	}
	assert.Equal(t, 1.0, value(m[MetricBreakerStatus], map[string]string{"retryhttp.breaker.state": "closed"}))
	assert.Zero(t, value(m[MetricBreakerStatus], map[string]string{"retryhttp.breaker.state": "open"}))
	assert.Equal(t, 1.0, value(m[MetricGivenUp], map[string]string{"retryhttp.stop_reason": "circuit_open"}))
	assert.Equal(t, 1.0, value(m[MetricQueueDuration], map[string]string{"retryhttp.wait.kind": "breaker"}))
}

// A burst to an upstream whose headers state a pace of 10 a second: the
// attempts beyond its allowance wait for their turns, which the spans and
// the queue histogram show, and the gauges report the pace and the quota.
func TestPacedBurst(t *testing.T) {
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("RateLimit-Policy", `"default";q=10;w=1`)
		w.Header().Set("RateLimit", `"default";r=5;t=1`)
		w.WriteHeader(200)
	})
	for i := 0; i < 3; i++ {
		_, err := h.get(context.Background(), "/x")
		require.NoError(t, err)
	}
	m := h.collect()
	assert.Equal(t, 5.0, value(m[MetricRateLimitLeft], map[string]string{"retryhttp.ratelimit.dimension": "requests", "retryhttp.upstream": h.upstream()}))
	assert.Equal(t, 10.0, value(m[MetricRateLimitLimit], map[string]string{"retryhttp.ratelimit.dimension": "requests"}))
	assert.Zero(t, value(m[MetricRateLimitLeft], map[string]string{"retryhttp.ratelimit.dimension": "tokens"}), "not stated: not reported")
	assert.Positive(t, value(m[MetricPaceRate], map[string]string{"retryhttp.pacing": "stated"}))

	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := h.get(context.Background(), "/x")
			assert.NoError(t, err)
		}()
	}
	wg.Wait()

	paced := 0
	for _, s := range h.ended("retryhttp GET") {
		for _, w := range waits(s) {
			if w["retryhttp.wait.kind"] == "pace" {
				paced++
				assert.Equal(t, "1", w["retryhttp.attempt"])
			}
		}
	}
	assert.Positive(t, paced, "some of the burst waited for its paced turn")
	m = h.collect()
	assert.Equal(t, float64(paced), value(m[MetricQueueDuration], map[string]string{"retryhttp.wait.kind": "pace"}))
	assert.Equal(t, 9.0, value(m[MetricQueueDuration], nil), "every attempt recorded once")
	assert.Zero(t, value(m[MetricQueued], nil), "nothing waits any more")
	assert.Equal(t, 9.0, value(m[MetricAttempts], map[string]string{"retryhttp.outcome": "success"}))
}

// Hooks of the caller's own are called too, after this package's.
func TestCallersHooksAreCalled(t *testing.T) {
	var attempts, retries, done atomic.Int32
	h := newHarness(t, statuses([]int{500, 200}, nil), WithHooks(retryhttp.Hooks{
		OnAttempt:     func(retryhttp.Event) { attempts.Add(1) },
		OnRetry:       func(retryhttp.Event) { retries.Add(1) },
		OnAttemptDone: func(retryhttp.Event) { done.Add(1) },
	}))
	_, err := h.get(context.Background(), "/x")
	require.NoError(t, err)
	assert.Equal(t, int32(2), attempts.Load())
	assert.Equal(t, int32(1), retries.Load())
	assert.Equal(t, int32(2), done.Load())
	assert.Len(t, h.ended("GET"), 2)
}

// A bodiless answer ends its client span at once and frees its concurrency
// slot at once, as it does without instrumentation.
func TestBodilessResponsesStayBodiless(t *testing.T) {
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) },
		WithRetryOptions(retryhttp.WithMaxConcurrency(1)))
	for i := 0; i < 3; i++ {
		req, err := http.NewRequest(http.MethodGet, h.srv.URL+"/x", nil)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req = req.WithContext(ctx)
		resp, err := h.rt.RoundTrip(req)
		cancel()
		require.NoError(t, err, "the slot of the last one was given back without a Close")
		assert.Same(t, req, resp.Request, "the caller's request, not otelhttp's copy")
	}
	assert.Len(t, h.ended("GET"), 3, "ended without their bodies closed")
}

// A request that fails on the network: the attempts' spans record the error,
// the logical span the verdict.
func TestConnectionErrors(t *testing.T) {
	h := newHarness(t, statuses([]int{200}, nil), WithRetryOptions(retryhttp.WithMaxRetries(1)))
	h.srv.Close()
	_, err := h.get(context.Background(), "/x")
	require.Error(t, err)
	l := h.ended("retryhttp GET")
	require.Len(t, l, 1)
	la := attrs(l[0].Attributes())
	assert.Equal(t, "gave_up", la["retryhttp.verdict"])
	assert.Equal(t, "retries_exhausted", la["retryhttp.stop_reason"])
	assert.Equal(t, "connection", la["error.type"])
	assert.Len(t, h.ended("GET"), 2)
	for _, s := range h.ended("GET") {
		assert.Equal(t, codes.Error, s.Status().Code)
	}
	m := h.collect()
	assert.Equal(t, 2.0, value(m[MetricAttempts], map[string]string{"retryhttp.outcome": "transient", "retryhttp.reason": "connection"}))
}

// A final 4xx is a failure, not a give-up; the caller's cancellation is its
// own verdict.
func TestFinalFailureAndCancellation(t *testing.T) {
	h := newHarness(t, statuses([]int{404}, nil))
	_, err := h.get(context.Background(), "/x")
	require.NoError(t, err)
	la := attrs(h.ended("retryhttp GET")[0].Attributes())
	assert.Equal(t, "failure", la["retryhttp.verdict"])
	assert.Equal(t, "404", la["error.type"])
	m := h.collect()
	assert.Equal(t, 1.0, value(m[MetricAttempts], map[string]string{"retryhttp.outcome": "final", "retryhttp.reason": "client_error"}))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = h.get(ctx, "/x")
	require.Error(t, err)
	la = attrs(h.ended("retryhttp GET")[1].Attributes())
	assert.Equal(t, "canceled", la["retryhttp.verdict"])
}

// Requests sent through Retry() directly still get client spans and
// metrics, with a URL whose query values are all redacted.
func TestDirectUseOfTheRetryTransport(t *testing.T) {
	h := newHarness(t, statuses([]int{200}, nil))
	req, err := http.NewRequest(http.MethodGet, h.srv.URL+"/x?token=abc", nil)
	require.NoError(t, err)
	resp, err := h.rt.Retry().RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	s := h.ended("GET")
	require.Len(t, s, 1)
	assert.False(t, s[0].Parent().IsValid(), "no logical span")
	u := attrs(s[0].Attributes())["url.full"]
	assert.NotContains(t, u, "abc")
	assert.True(t, strings.HasSuffix(u, "/x?token=REDACTED"), u)
	assert.Equal(t, 1.0, value(h.collect()[MetricAttempts], nil))
}

// The gauges adaptive concurrency needs are reported once Stats has their
// fields, and not before.
func TestConcurrencyGaugesFollowStats(t *testing.T) {
	h := newHarness(t, statuses([]int{200}, nil))
	_, err := h.get(context.Background(), "/x")
	require.NoError(t, err)
	m := h.collect()
	require.Contains(t, m, MetricInFlight)
	require.Contains(t, m, MetricConcurrencyLimit)
	assert.Zero(t, value(m[MetricInFlight], nil), "the attempt's body is closed: nothing in flight")
	assert.Zero(t, value(m[MetricConcurrencyLimit], nil), "a healthy upstream has no limit learned")
}

func TestClassification(t *testing.T) {
	for _, tc := range []struct {
		status    int
		err       error
		retryable bool
		reason    string
		outcome   string
	}{
		{200, nil, false, "ok", "success"},
		{429, nil, true, "rate_limited", "transient"},
		{403, nil, true, "rate_limited", "transient"},
		{403, nil, false, "client_error", "final"},
		{529, nil, true, "overloaded", "transient"},
		{504, nil, true, "timeout", "transient"},
		{500, nil, true, "server_error", "transient"},
		{501, nil, false, "server_error", "final"},
		{0, fmt.Errorf("x: %w", retryhttp.ErrAttemptTimeout), true, "timeout", "transient"},
		{0, context.Canceled, false, "canceled", "final"},
		{0, retryhttp.ErrInvalidRequest, false, "local", "final"},
		{0, errors.New("mock: no responder"), true, "other", "transient"},
	} {
		assert.Equal(t, tc.reason, reasonOf(tc.status, tc.err, tc.retryable), "%d %v", tc.status, tc.err)
		assert.Equal(t, tc.outcome, outcomeOf(tc.status, tc.err, tc.retryable), "%d %v", tc.status, tc.err)
	}
	for _, tc := range []struct {
		stop error
		want string
	}{
		{retryhttp.ErrRetriesExhausted, "retries_exhausted"}, {retryhttp.ErrServerWaitTooLong, "server_wait_too_long"},
		{retryhttp.ErrPastDeadline, "past_deadline"}, {retryhttp.ErrRetryBudgetSpent, "retry_budget_spent"},
		{retryhttp.ErrBodyNotReplayable, "body_not_replayable"}, {retryhttp.ErrRateLimited, "rate_limited"},
		{retryhttp.ErrCircuitOpen, "circuit_open"},
	} {
		assert.Equal(t, tc.want, stopReason(tc.stop))
	}
	m, ok := method("PURGE")
	assert.Equal(t, "_OTHER", m)
	assert.False(t, ok)
}
