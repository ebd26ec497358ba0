package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

// sendScripted sends one request through s to an in-process provider that
// answers by script, under a recorder, and returns the trace and the
// provider's view.
func sendScripted(t *testing.T, script string, s func(http.RoundTripper) sender) (*requestTrace, retrytest.Stats) {
	t.Helper()
	provider := retrytest.NewTransport(retrytest.Config{
		Family: retrytest.Anthropic, Script: retrytest.MustParseScript(script),
	})
	tr := &requestTrace{id: 7}
	sendOne(context.Background(), 5*time.Second, s(&recorder{next: provider}), "https://api.test/v1/messages", tr)
	return tr, provider.Stats()
}

func statuses(tr *requestTrace) []int {
	var out []int
	for _, a := range tr.attempts {
		out = append(out, a.status)
	}
	return out
}

func TestOnceSendsOnce(t *testing.T) {
	tr, st := sendScripted(t, "529, 200", once)
	assert.Equal(t, 1, st.Attempts)
	assert.False(t, tr.ok)
	assert.Equal(t, "529 Overloaded", tr.reason)
	assert.Equal(t, []int{529}, statuses(tr))
}

func TestLoopRetriesTransientFailuresAndIgnoresRetryAfter(t *testing.T) {
	var waits []int
	noWait := func(k int) time.Duration { waits = append(waits, k); return 0 }
	// A 429 asking for an hour: the hand-written loop does not look.
	tr, st := sendScripted(t, "429@1h, 503, reset, 200", func(b http.RoundTripper) sender { return loop(b, 5, noWait) })
	assert.True(t, tr.ok)
	assert.Equal(t, 4, st.Attempts)
	assert.Equal(t, []int{1, 2, 3}, waits, "wait k before retry k")
	assert.Equal(t, []int{429, 503, 0, 200}, statuses(tr))
	assert.Equal(t, []kind{kindThrottled, kind5xx, kindNoAnswer, kindOK},
		[]kind{tr.attempts[0].kind, tr.attempts[1].kind, tr.attempts[2].kind, tr.attempts[3].kind})
	assert.Equal(t, 1, st.DistinctBodies(), "every attempt sent the same body")
}

func TestLoopStopsAtMaxRetriesAndOnPermanentErrors(t *testing.T) {
	noWait := func(int) time.Duration { return 0 }
	tr, st := sendScripted(t, "503, 503, 503, 200", func(b http.RoundTripper) sender { return loop(b, 2, noWait) })
	assert.Equal(t, 3, st.Attempts, "two retries after the first attempt")
	assert.Equal(t, "503 Service Unavailable", tr.reason)

	tr, st = sendScripted(t, "400, 200", func(b http.RoundTripper) sender { return loop(b, 5, noWait) })
	assert.Equal(t, 1, st.Attempts, "a 400 is not retried")
	assert.Equal(t, "400 Bad Request", tr.reason)
	assert.Equal(t, kindOther, tr.attempts[0].kind)
}

func TestLoopWaitEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	provider := retrytest.NewTransport(retrytest.Config{Script: retrytest.MustParseScript("503")})
	s := loop(provider, 5, func(int) time.Duration { return time.Hour })
	start := time.Now()
	resp, err := s(ctx, func(ctx context.Context) (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodGet, "https://api.test/", nil)
	})
	assert.Nil(t, resp)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), time.Second, "the hour-long wait ended at the deadline")
}

func TestRetryhttpPolicyGoesThroughTheRecorder(t *testing.T) {
	tr, st := sendScripted(t, "429@1ms, 529, 200", func(b http.RoundTripper) sender {
		return through(retryhttp.New(b, retryhttp.WithBackoff(time.Millisecond, time.Millisecond), retryhttp.WithJitter(0)))
	})
	assert.True(t, tr.ok)
	assert.Equal(t, 3, st.Attempts)
	assert.Equal(t, []int{429, 529, 200}, statuses(tr), "the recorder under retryhttp sees every attempt")
}

func TestExponential(t *testing.T) {
	ms := time.Millisecond
	var got []time.Duration
	for k := 1; k <= 6; k++ {
		got = append(got, exponential(10*ms, 100*ms, 2, k))
	}
	assert.Equal(t, []time.Duration{10 * ms, 20 * ms, 40 * ms, 80 * ms, 100 * ms, 100 * ms}, got)
	assert.Equal(t, 10*ms, exponential(10*ms, 10*ms, 1, 50), "multiplier 1: a fixed wait")
	assert.Equal(t, 10*ms, exponential(10*ms, ms, 2, 3), "a cap below the base is raised to it")
	assert.Equal(t, time.Hour, exponential(time.Second, time.Hour, 2, 1000), "no overflow")
}

func TestPoliciesSayWhatTheyAre(t *testing.T) {
	cfg := defaultConfig()
	assert.Equal(t, "no retries", policyFor(cfg, "none").name)
	fixed := policyFor(cfg, "fixed")
	assert.Equal(t, "fixed 1s", fixed.name)
	assert.Contains(t, fixed.about, "up to 5 retries, 1s apart; it ignores Retry-After")
	assert.Contains(t, policyFor(cfg, "exponential").about, "after 1s, growing 2x up to 32s, no jitter")
	assert.Contains(t, policyFor(cfg, "retryhttp").about, "retryhttp.New(nil) with its defaults: 5 retries, 1s doubling to 32s")
	assert.Equal(t, "retryhttp.New(nil, )", policyFor(cfg, "custom").about, "no policy flag: nothing changed")

	for _, p := range contentionPolicies(cfg) {
		assert.Contains(t, p.about, "backoff 10ms doubling to 1s, breaker and budget off", p.name)
	}
}

func TestKindOfResponse(t *testing.T) {
	for _, tc := range []struct {
		status int
		header string
		want   kind
	}{
		{200, "", kindOK}, {204, "", kindOK}, {429, "", kindThrottled},
		{403, "0", kindThrottled}, {403, "", kindOther}, {400, "", kindOther},
		{500, "", kind5xx}, {529, "", kind5xx}, {503, "", kind5xx}, {410, "", kindOther},
	} {
		resp := &http.Response{StatusCode: tc.status, Header: http.Header{}}
		if tc.header != "" {
			resp.Header.Set("X-Ratelimit-Remaining", tc.header)
		}
		assert.Equal(t, tc.want, kindOfResponse(resp), "%d %q", tc.status, tc.header)
	}
}

func TestErrorReason(t *testing.T) {
	wrap := func(err error) error { return &url.Error{Op: "Post", URL: "http://x", Err: err} }
	for _, tc := range []struct {
		err  error
		want string
	}{
		{wrap(fmt.Errorf("read: %w", syscall.ECONNRESET)), "connection reset"},
		{wrap(context.DeadlineExceeded), "deadline exceeded"},
		{wrap(context.Canceled), "canceled"},
		{wrap(io.ErrUnexpectedEOF), "connection closed"},
		{wrap(fmt.Errorf("wrapped: %w", retryhttp.ErrCircuitOpen)), "circuit open (not sent)"},
		{wrap(fmt.Errorf("wrapped: %w", retryhttp.ErrRateLimited)), "local rate limit (not sent)"},
		{errors.New("tls: bad record"), "network error"},
	} {
		assert.Equal(t, tc.want, errorReason(tc.err), "%v", tc.err)
	}
	assert.Equal(t, "529 Overloaded", statusReason(529))
	assert.Equal(t, "429 Too Many Requests", statusReason(429))
	assert.Equal(t, "599", statusReason(599))
}

func TestBodyCutShortIsAFailureOfTheLastAttempt(t *testing.T) {
	tr, _ := sendScripted(t, "truncate", once)
	assert.False(t, tr.ok)
	assert.Equal(t, "body cut short", tr.reason)
	require.Len(t, tr.attempts, 1)
	assert.Equal(t, kindNoAnswer, tr.attempts[0].kind, "the answer never arrived whole")
	assert.Equal(t, 200, tr.attempts[0].status)
}

func TestUnavailableDependsOnlyOnSeedRequestAndAttempt(t *testing.T) {
	hits := 0
	const n = 20000
	for i := range n {
		id := fmt.Sprint(i)
		v := draw(3, id, 0)
		require.Equal(t, v, draw(3, id, 0))
		require.True(t, v >= 0 && v < 1)
		if v < 0.1 {
			hits++
		}
	}
	assert.InDelta(t, 0.1, float64(hits)/n, 0.01, "draws are uniform")
	assert.NotEqual(t, draw(3, "1", 0), draw(4, "1", 0), "another seed, another draw")
	assert.NotEqual(t, draw(3, "1", 0), draw(3, "1", 1), "another attempt, another draw")

	// The handler answers attempt k of a request the same way whatever
	// else arrives in between.
	u := newUnavailable(3, 0.5)
	answer := func(id string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://x/", strings.NewReader("{}"))
		req.Header.Set(requestIDHeader, id)
		rec := &statusRecorder{header: http.Header{}}
		u.ServeHTTP(rec, req)
		return rec.status
	}
	var first []int
	for k := range 6 {
		first = append(first, answer("a"))
		answer(fmt.Sprint("other", k))
	}
	u = newUnavailable(3, 0.5)
	for k := range 6 {
		assert.Equal(t, first[k], answer("a"), "attempt %d", k)
	}
}

// statusRecorder is the least http.ResponseWriter.
type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = 200
	}
	return len(b), nil
}
func (r *statusRecorder) WriteHeader(s int) { r.status = s }
