package retryhttp

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp/internal/fakeclock"
)

func get(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	return req
}

func post(t *testing.T, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, body)
	require.NoError(t, err)
	return req
}

func TestNewNilBaseIsPooledCleanhttpTransport(t *testing.T) {
	rt := New(nil)
	base, ok := rt.cfg.base.(*http.Transport)
	require.True(t, ok, "base is %T", rt.cfg.base)
	assert.NotSame(t, http.DefaultTransport, base, "must not share the global transport")
	assert.Greater(t, base.MaxIdleConnsPerHost, http.DefaultMaxIdleConnsPerHost, "pooled settings")
}

func TestDefaultsMatchContract(t *testing.T) {
	p := New(nil).cfg.policy
	assert.Equal(t, 5, p.maxRetries)
	assert.Equal(t, time.Second, p.backoffBase)
	assert.Equal(t, 32*time.Second, p.backoffMax)
	assert.Equal(t, 2.0, p.multiplier)
	assert.Equal(t, time.Second, p.jitter)
	assert.Equal(t, 60*time.Second, p.maxRetryAfter)
	assert.Equal(t, time.Duration(0), p.attemptTimeout)
	assert.GreaterOrEqual(t, p.maxBufferedBody, int64(1<<20))
}

type idleCloser struct {
	http.RoundTripper
	closed atomic.Int32
}

func (c *idleCloser) CloseIdleConnections() { c.closed.Add(1) }

func TestCloseIdleConnectionsIsForwarded(t *testing.T) {
	mock, _ := scripted(t, step{status: 200})
	base := &idleCloser{RoundTripper: mock}
	(&http.Client{Transport: New(base)}).CloseIdleConnections()
	assert.Equal(t, int32(1), base.closed.Load())
	New(mock).CloseIdleConnections() // a base without the method is fine
}

func TestStatusClassification(t *testing.T) {
	for _, code := range []int{408, 429, 500, 502, 503, 504, 529} {
		t.Run("retried "+strconv.Itoa(code), func(t *testing.T) {
			mock, _ := scripted(t, step{status: code}, step{status: 200})
			resp, err := New(mock, WithClock(autoClock())).RoundTrip(get(t, "https://api.test/x"))
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, 2, Attempts(resp))
		})
	}
	for _, code := range []int{200, 201, 204, 301, 304, 400, 401, 403, 404, 409, 413, 422, 501, 505} {
		t.Run("final "+strconv.Itoa(code), func(t *testing.T) {
			mock, _ := scripted(t, step{status: code, body: "final"}, step{status: 200})
			clk := autoClock()
			resp, err := New(mock, WithClock(clk)).RoundTrip(get(t, "https://api.test/x"))
			require.NoError(t, err)
			defer resp.Body.Close()
			assert.Equal(t, code, resp.StatusCode)
			assert.Equal(t, 1, Attempts(resp))
			assert.Empty(t, clk.Sleeps())
		})
	}
}

func TestShouldRetryHeaderOverridesStatus(t *testing.T) {
	yes := http.Header{"X-Should-Retry": {"true"}}
	no := http.Header{"X-Should-Retry": {"false"}}
	mock, _ := scripted(t, step{status: 400, header: yes}, step{status: 200})
	resp, err := New(mock, WithClock(autoClock())).RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 2, Attempts(resp))

	mock, _ = scripted(t, step{status: 503, header: no}, step{status: 200})
	resp, err = New(mock, WithClock(autoClock())).RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 503, resp.StatusCode)
	assert.Equal(t, 1, Attempts(resp))
}

func TestClassifierDecidesFirstAndCanDefer(t *testing.T) {
	classifier := func(resp *http.Response, err error) Verdict {
		switch {
		case resp != nil && resp.StatusCode == http.StatusConflict:
			return Retry
		case resp != nil && resp.StatusCode == http.StatusBadGateway:
			return Stop
		}
		return Default
	}
	cases := []struct {
		first    int
		attempts int
	}{{409, 2}, {502, 1}, {503, 2}, {400, 1}}
	for _, c := range cases {
		mock, _ := scripted(t, step{status: c.first}, step{status: 200})
		resp, err := New(mock, WithClock(autoClock()), WithClassifier(classifier)).RoundTrip(get(t, "https://api.test/x"))
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, c.attempts, Attempts(resp), "first status %d", c.first)
	}
}

func TestNetworkErrorClassification(t *testing.T) {
	certErr := x509.UnknownAuthorityError{}
	dnsMissing := &net.DNSError{Err: "no such host", Name: "nope.test", IsNotFound: true}
	dnsTemporary := &net.DNSError{Err: "server misbehaving", Name: "api.test", IsTemporary: true}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	cases := []struct {
		name      string
		err       error
		retryable bool
	}{
		{"untyped unexpected EOF", io.ErrUnexpectedEOF, true},
		{"untyped text error", errors.New("http: server closed idle connection"), true},
		{"connection refused", refused, true},
		{"connection reset", reset, true},
		{"temporary DNS failure", dnsTemporary, true},
		{"unknown host", dnsMissing, false},
		{"certificate", fmt.Errorf("tls: %w", certErr), false},
		{"context canceled without the caller's context", context.Canceled, false},
		{"deadline exceeded", context.DeadlineExceeded, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mock, _ := scripted(t, step{err: c.err}, step{status: 200})
			resp, err := New(mock, WithClock(autoClock())).RoundTrip(get(t, "https://api.test/x"))
			if c.retryable {
				require.NoError(t, err)
				resp.Body.Close()
				assert.Equal(t, 2, Attempts(resp))
				return
			}
			require.Nil(t, resp)
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, 1, e.Attempts)
			assert.False(t, e.Retryable)
			assert.ErrorIs(t, err, c.err)
		})
	}
}

func TestExhaustedTransportErrorIsTypedAndWrapsCause(t *testing.T) {
	mock, _ := scripted(t, step{err: io.ErrUnexpectedEOF})
	clk := autoClock()
	client := &http.Client{Transport: New(mock, WithClock(clk), WithJitter(0))}
	resp, err := client.Get("https://api.test/x")
	require.Nil(t, resp)
	var e *Error
	require.ErrorAs(t, err, &e, "through http.Client's url.Error")
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	assert.Equal(t, 6, e.Attempts)
	assert.Equal(t, 0, e.StatusCode)
	assert.True(t, e.Retryable)
	assert.Equal(t, "retries exhausted", e.StopReason)
	assert.Equal(t, []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}, clk.Sleeps())
}

func TestMaxRetriesCountsRetriesAfterTheFirstAttempt(t *testing.T) {
	for _, n := range []int{0, 1, 3} {
		mock, _ := scripted(t, step{status: 503})
		resp, err := New(mock, WithClock(autoClock()), WithMaxRetries(n)).RoundTrip(get(t, "https://api.test/x"))
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, n+1, Attempts(resp))
		assert.Equal(t, n+1, mock.GetTotalCallCount())
	}
}

// countingBody records how a response body was used.
type countingBody struct {
	r      io.Reader
	read   atomic.Int64
	closed atomic.Int32
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read.Add(int64(n))
	return n, err
}
func (b *countingBody) Close() error { b.closed.Add(1); return nil }

// bodyTransport answers with the given statuses in order, each with a body
// of size bytes, and keeps the bodies it handed out.
type bodyTransport struct {
	mu       sync.Mutex
	statuses []int
	size     int
	bodies   []*countingBody
}

func (b *bodyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	code := b.statuses[min(len(b.bodies), len(b.statuses)-1)]
	body := &countingBody{r: strings.NewReader(strings.Repeat("x", b.size-3) + strconv.Itoa(code))}
	b.bodies = append(b.bodies, body)
	return &http.Response{StatusCode: code, Header: http.Header{}, Body: body, Request: req}, nil
}

func TestLastResponseReturnedIntactAndSupersededDrained(t *testing.T) {
	base := &bodyTransport{statuses: []int{503, 503, 500}, size: 1000}
	resp, err := New(base, WithClock(autoClock()), WithMaxRetries(2)).RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	require.Len(t, base.bodies, 3)
	for i, b := range base.bodies[:2] {
		assert.Equal(t, int64(1000), b.read.Load(), "superseded body %d drained", i)
		assert.Equal(t, int32(1), b.closed.Load(), "superseded body %d closed", i)
	}
	last := base.bodies[2]
	assert.Equal(t, int64(0), last.read.Load(), "last body unread")
	assert.Equal(t, int32(0), last.closed.Load())
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Len(t, got, 1000)
	assert.True(t, strings.HasSuffix(string(got), "500"))
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, int32(1), last.closed.Load())
	assert.Equal(t, 3, Attempts(resp))
	e := CheckResponse(resp, nil).(*Error)
	assert.Equal(t, "retries exhausted", e.StopReason)
}

func TestDrainIsBounded(t *testing.T) {
	base := &bodyTransport{statuses: []int{503, 200}, size: 10 << 20}
	resp, err := New(base, WithClock(autoClock())).RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, int64(maxDrain), base.bodies[0].read.Load())
	assert.Equal(t, int32(1), base.bodies[0].closed.Load())
}

func TestAttemptsIsZeroForForeignResponses(t *testing.T) {
	assert.Equal(t, 0, Attempts(nil))
	assert.Equal(t, 0, Attempts(&http.Response{Body: http.NoBody}))
}

func TestNilResponseBodyFromBaseIsReplaced(t *testing.T) {
	base := roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 204, Header: http.Header{}}, nil
	})
	resp, err := New(base).RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Empty(t, b)
	assert.Equal(t, 1, Attempts(resp))
}

func TestBaseReturningNothingIsAnErrorNotAPanic(t *testing.T) {
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, nil })
	resp, err := New(base, WithClock(autoClock())).RoundTrip(get(t, "https://api.test/x"))
	require.Nil(t, resp)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, 1, e.Attempts)
	assert.False(t, e.Retryable)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestServerWaitIsAFloor(t *testing.T) {
	date := testStart.Add(7 * time.Second).Format(http.TimeFormat)
	cases := []struct {
		name   string
		header http.Header
		want   time.Duration
	}{
		{"delay-seconds", http.Header{"Retry-After": {"3"}}, 3 * time.Second},
		{"http-date", http.Header{"Retry-After": {date}}, 7 * time.Second},
		{"retry-after-ms first", http.Header{"Retry-After-Ms": {"1500.5"}, "Retry-After": {"9"}}, 1500*time.Millisecond + 500*time.Microsecond},
		{"epoch sent as delay", http.Header{"Retry-After": {strconv.FormatInt(testStart.Unix()+5, 10)}}, 5 * time.Second},
		{"garbage falls back to backoff", http.Header{"Retry-After": {"soon"}}, time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, jitter := range []time.Duration{0, 500 * time.Millisecond} {
				mock, _ := scripted(t, step{status: 429, header: c.header}, step{status: 200})
				clk := autoClock()
				resp, err := New(mock, WithClock(clk), WithJitter(jitter)).RoundTrip(get(t, "https://api.test/x"))
				require.NoError(t, err)
				resp.Body.Close()
				require.Len(t, clk.Sleeps(), 1)
				assert.GreaterOrEqual(t, clk.Sleeps()[0], c.want, "never earlier than asked")
				assert.Less(t, clk.Sleeps()[0], c.want+jitter+1, "at most the jitter later")
			}
		})
	}
}

// TestAServerWaitOnAPacedUpstreamGoesOnTime checks that a retry after a
// 429's wait on an upstream whose pace spaces the retries itself (one
// attempt an interval: a header-less upstream after its first 429) leaves
// when the server said, without jitter: its turn on the pace keeps the
// retries apart. With the jitter, a fixed window's refusals told to wait a
// whole second (rounded up) came back up to 0.2 s into the next window,
// and bursts over GitHub windows of 100 a second ended behind a plain loop
// that waits the second exactly (TestRobustnessMatrix). A pace with room
// for a burst would let retries told the same time go as a herd, and a 503
// is no rate: those keep the jitter.
func TestAServerWaitOnAPacedUpstreamGoesOnTime(t *testing.T) {
	openAI := func(remaining string) http.Header {
		return http.Header{
			"Retry-After":                    {"1"},
			"X-Ratelimit-Limit-Requests":     {"10000"},
			"X-Ratelimit-Remaining-Requests": {remaining},
			"X-Ratelimit-Reset-Requests":     {"6s"},
		}
	}
	quotaOfOne := http.Header{ // stated: one a second, one attempt an interval
		"Retry-After":                    {"1"},
		"X-Ratelimit-Limit-Requests":     {"1"},
		"X-Ratelimit-Remaining-Requests": {"0"},
		"X-Ratelimit-Reset-Requests":     {"1s"},
	}
	cases := []struct {
		name     string
		status   int
		header   http.Header
		body     string
		jittered bool
	}{
		{"a header-less 429: one attempt an interval", 429, http.Header{"Retry-After": {"1"}}, "", false},
		{"a 429 from a quota of one", 429, quotaOfOne, "", false},
		{"a 429 from a bucket with room for a burst", 429, openAI("9000"), "", true},
		{"a 429 from a pace too fast to space anything", 429, http.Header{
			"Retry-After":                    {"1"},
			"X-Ratelimit-Limit-Requests":     {"2"},
			"X-Ratelimit-Remaining-Requests": {"0"},
			"X-Ratelimit-Reset-Requests":     {"1us"},
		}, "", true},
		{"a 503 on a pace of one attempt an interval", 503, quotaOfOne, "", true},
		{"a 503 on a paced upstream", 503, openAI("9000"), "", true},
		{"a header-less 503", 503, http.Header{"Retry-After": {"1"}}, "", true},
		// A limit on bursts, not a quota: its minute (the fallback)
		// is no pace's to spread.
		{"a secondary limit's 403", 403, http.Header{}, githubSecondary, true},
		// The observed pace ends 30 s after the last 429: a retry
		// that comes later finds no pace to spread it.
		{"a header-less 429 that outlives the observed pace", 429, http.Header{"Retry-After": {"45"}}, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			jittered := 0
			for i := 0; i < 20; i++ {
				mock, _ := scripted(t, step{status: c.status, header: c.header, body: c.body}, step{status: 200})
				clk := autoClock()
				resp, err := New(mock, WithClock(clk)).RoundTrip(get(t, "https://api.test/x"))
				require.NoError(t, err)
				resp.Body.Close()
				require.Equal(t, 200, resp.StatusCode)
				require.NotEmpty(t, clk.Sleeps())
				wait := clk.Sleeps()[0]
				floor := time.Second
				if c.status == 403 {
					floor = rateLimitFallbackWait
				} else if ra, err := strconv.Atoi(c.header.Get("Retry-After")); err == nil {
					floor = time.Duration(ra) * time.Second
				}
				require.GreaterOrEqual(t, wait, floor, "a server wait is a floor")
				if wait > floor {
					jittered++
				}
			}
			if c.jittered {
				assert.Greater(t, jittered, 10, "retries told the same wait are spread by jitter")
			} else {
				assert.Zero(t, jittered, "the pace spreads the retries: each goes when the server said")
			}
		})
	}
}

// TestAWaitOfNowTakesThePacesTurn checks that a 429 whose Retry-After says
// "now" (0, or a date no later than the response's Date: a server that
// cuts its times down to the second) is retried on the upstream's pace,
// which spaces the retries, not after a backoff. A burst at a header-less
// 40 a second bucket whose server runs a second behind ended up to 1.5 s
// late, its last request waiting a backoff of 1-2 s while the bucket had
// room (TestRobustnessMatrix, none/floor/-1s/ra-date/40rps-b4-80c, now and
// then with -race). A 503 paces nothing, and a bucket's pace with room for
// a burst would let the retries go as a herd: "now" there still backs off.
func TestAWaitOfNowTakesThePacesTurn(t *testing.T) {
	now := testStart.Format(http.TimeFormat)
	cases := []struct {
		name    string
		status  int
		header  http.Header
		backoff bool
	}{
		{"a 429 saying Retry-After: 0", 429, http.Header{"Retry-After": {"0"}}, false},
		{"a 429 whose date is the server's now", 429, http.Header{"Retry-After": {now}, "Date": {now}}, false},
		{"a 429 whose date has passed on the server's clock", 429, http.Header{
			"Retry-After": {testStart.Add(-time.Hour).Format(http.TimeFormat)},
			"Date":        {testStart.Add(-time.Hour + time.Second).Format(http.TimeFormat)},
		}, false},
		{"a 503 saying Retry-After: 0", 503, http.Header{"Retry-After": {"0"}}, true},
		// A pace with room for a burst would let such retries go as a
		// herd: they back off, as the jitter spreads them.
		{"a 429 saying Retry-After: 0 from a bucket with room for a burst", 429, http.Header{
			"Retry-After":                    {"0"},
			"X-Ratelimit-Limit-Requests":     {"10000"},
			"X-Ratelimit-Remaining-Requests": {"9000"},
			"X-Ratelimit-Reset-Requests":     {"6s"},
		}, true},
	}
	const backoff = 5 * time.Second
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mock, _ := scripted(t, step{status: c.status, header: c.header}, step{status: 200})
			clk := autoClock()
			rt := New(mock, WithClock(clk), WithBackoff(backoff, time.Minute))
			resp, err := rt.RoundTrip(get(t, "https://api.test/x"))
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, 200, resp.StatusCode)
			waited := clk.Now().Sub(testStart)
			if c.backoff {
				assert.GreaterOrEqual(t, waited, backoff, "no pace spaces these retries: the backoff does")
				return
			}
			assert.Less(t, waited, backoff, "the retry waits for the pace's turn, not a backoff")
			assert.Equal(t, "observed", rt.Stats()[0].Pacing, "the 429 set the pace that spaced the retry")
		})
	}
}

// TestAWaitOfNowPastTheDeadlineReturnsTheRefusalAtOnce checks that a retry
// told "now" whose turn on the pace would come after the request's
// deadline ends retrying at once, with the 429, as a backoff past the
// deadline does: the deadline is checked against the pace's turn, not the
// server's wait of nothing. (Checked against the wait alone, the retry
// waited the deadline out for its turn and failed with ErrRateLimited.)
func TestAWaitOfNowPastTheDeadlineReturnsTheRefusalAtOnce(t *testing.T) {
	start := time.Now()
	clk := fakeclock.NewAuto(start)
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(300*time.Millisecond))
	defer cancel()
	mock, _ := scripted(t, step{status: 429, header: http.Header{"Retry-After": {"0"}}}, step{status: 200})
	resp, err := New(mock, WithClock(clk)).RoundTrip(get(t, "https://api.test/x").WithContext(ctx))
	require.NoError(t, err, "the refusal itself is the answer")
	defer resp.Body.Close()
	assert.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, 1, Attempts(resp))
	assert.Equal(t, start, clk.Now(), "no wait at all")
	e := CheckResponse(resp, nil).(*Error)
	assert.Contains(t, e.StopReason, "deadline")
	assert.True(t, e.RetryAt.After(start.Add(300*time.Millisecond)), "RetryAt is the pace's turn, past the deadline: %v", e.RetryAt.Sub(start))

	// A deadline the turn fits: the retry goes, on its turn.
	clk = fakeclock.NewAuto(start)
	ctx, cancel = context.WithDeadline(context.Background(), e.RetryAt.Add(100*time.Millisecond))
	defer cancel()
	mock, _ = scripted(t, step{status: 429, header: http.Header{"Retry-After": {"0"}}}, step{status: 200})
	resp, err = New(mock, WithClock(clk)).RoundTrip(get(t, "https://api.test/x").WithContext(ctx))
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode, "the turn is within the deadline")
	assert.WithinDuration(t, e.RetryAt, clk.Now(), time.Millisecond, "and the retry went at the turn RetryAt named")
}

func TestServerWaitAtTheLimitIsHonouredDespiteJitter(t *testing.T) {
	// The default limit is 60s and the default jitter up to 1s: a server
	// asking for exactly 60s is within the limit, whatever jitter adds.
	for i := 0; i < 20; i++ {
		mock, _ := scripted(t, step{status: 503, header: http.Header{"Retry-After": {"60"}}}, step{status: 200})
		clk := autoClock()
		resp, err := New(mock, WithClock(clk)).RoundTrip(get(t, "https://api.test/x"))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
		require.Len(t, clk.Sleeps(), 1)
		assert.GreaterOrEqual(t, clk.Sleeps()[0], 60*time.Second)
	}
}

func TestServerWaitOverLimitStopsAtOnce(t *testing.T) {
	for _, v := range []string{"120", "86400", "484289h", "99999999999999999999999"} {
		mock, _ := scripted(t, step{status: 503, header: http.Header{"Retry-After": {v}}, body: "busy"}, step{status: 200})
		clk := autoClock()
		resp, err := New(mock, WithClock(clk)).RoundTrip(get(t, "https://api.test/x"))
		require.NoError(t, err, v)
		assert.Equal(t, 503, resp.StatusCode, v)
		assert.Equal(t, 1, Attempts(resp), v)
		assert.Empty(t, clk.Sleeps(), "%s: no sleep at all", v)
		e := CheckResponse(resp, nil).(*Error)
		assert.Contains(t, e.StopReason, "longer than the limit", v)
		assert.False(t, e.RetryAt.IsZero(), v)
		b, _ := io.ReadAll(resp.Body)
		assert.Equal(t, "busy", string(b), "body intact")
		resp.Body.Close()
	}
	// A higher limit honours the same wait.
	mock, _ := scripted(t, step{status: 503, header: http.Header{"Retry-After": {"120"}}}, step{status: 200})
	clk := autoClock()
	resp, err := New(mock, WithClock(clk), WithMaxRetryAfter(3*time.Minute), WithJitter(0)).RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, []time.Duration{2 * time.Minute}, clk.Sleeps())
}

func TestNoWaitPastTheDeadline(t *testing.T) {
	start := time.Now()
	clk := fakeclock.NewAuto(start)
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(time.Hour))
	defer cancel()
	mock, _ := scripted(t, step{status: 503})
	rt := New(mock, WithClock(clk), WithBackoff(25*time.Minute, 2*time.Hour), WithJitter(0))
	resp, err := rt.RoundTrip(get(t, "https://api.test/x").WithContext(ctx))
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, []time.Duration{25 * time.Minute}, clk.Sleeps(), "the 50-minute wait would end past the deadline")
	assert.Equal(t, 2, Attempts(resp))
	e := CheckResponse(resp, nil).(*Error)
	assert.Contains(t, e.StopReason, "deadline")
	assert.Equal(t, start.Add(75*time.Minute), e.RetryAt)
}

func TestServerWaitPastTheDeadlineStopsAtOnce(t *testing.T) {
	start := time.Now()
	clk := fakeclock.NewAuto(start)
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(10*time.Second))
	defer cancel()
	mock, _ := scripted(t, step{err: io.ErrUnexpectedEOF}, step{status: 429, header: http.Header{"Retry-After": {"30"}}})
	resp, err := New(mock, WithClock(clk), WithJitter(0)).RoundTrip(get(t, "https://api.test/x").WithContext(ctx))
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, []time.Duration{time.Second}, clk.Sleeps())
}

func TestCancelDuringWaitReturnsPromptly(t *testing.T) {
	clk := fakeclock.New(testStart)
	base := &bodyTransport{statuses: []int{503}, size: 10}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		resp, err := New(base, WithClock(clk)).RoundTrip(get(t, "https://api.test/x").WithContext(ctx))
		if resp != nil {
			resp.Body.Close()
		}
		done <- err
	}()
	require.True(t, clk.WaitForTimers(1, 5*time.Second), "the transport should be waiting")
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
		var e *Error
		require.ErrorAs(t, err, &e)
		assert.Equal(t, 1, e.Attempts)
		assert.Equal(t, 503, e.StatusCode, "the last status seen is reported")
	case <-time.After(5 * time.Second):
		t.Fatal("RoundTrip did not return after cancel")
	}
	assert.Equal(t, int32(1), base.bodies[0].closed.Load(), "the superseded body was closed")
}

func TestCanceledContextBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	resp, err := New(nil).RoundTrip(get(t, srv.URL).WithContext(ctx))
	require.Nil(t, resp)
	require.ErrorIs(t, err, context.Canceled)
}

// blockingTransport blocks each attempt listed in slow until its context
// ends, and answers the others with 200.
type blockingTransport struct {
	calls atomic.Int32
	slow  map[int32]bool
}

func (b *blockingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	n := b.calls.Add(1)
	if b.slow[n] {
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), Request: req}, nil
}

func TestAttemptTimeoutIsTransient(t *testing.T) {
	clk := fakeclock.New(testStart)
	base := &blockingTransport{slow: map[int32]bool{1: true}}
	rt := New(base, WithClock(clk), WithAttemptTimeout(5*time.Second), WithJitter(0))
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := rt.RoundTrip(get(t, "https://api.test/x"))
		done <- result{resp, err}
	}()
	require.True(t, clk.WaitForTimers(1, 5*time.Second))
	clk.Advance(5 * time.Second) // the attempt timer fires
	require.True(t, clk.WaitForTimers(1, 5*time.Second), "backoff wait")
	clk.Advance(time.Second)
	r := <-done
	require.NoError(t, r.err)
	assert.Equal(t, 2, Attempts(r.resp))
	// Headers arrived: the timer no longer runs, and the body is not cut.
	clk.Advance(time.Minute)
	b, err := io.ReadAll(r.resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "ok", string(b))
	r.resp.Body.Close()
}

func TestAttemptTimeoutExhaustedIsReported(t *testing.T) {
	clk := fakeclock.New(testStart)
	base := &blockingTransport{slow: map[int32]bool{1: true, 2: true}}
	rt := New(base, WithClock(clk), WithAttemptTimeout(time.Second), WithMaxRetries(1), WithJitter(0))
	done := make(chan error, 1)
	go func() {
		_, err := rt.RoundTrip(get(t, "https://api.test/x"))
		done <- err
	}()
	for _, d := range []time.Duration{time.Second, time.Second, time.Second} {
		require.True(t, clk.WaitForTimers(1, 5*time.Second))
		clk.Advance(d)
	}
	err := <-done
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.True(t, e.Retryable)
	assert.Equal(t, 2, e.Attempts)
	assert.ErrorIs(t, err, errAttemptTimeout)
	assert.Contains(t, e.UserMessage(), "too long")
}

func TestNoAttemptTimeoutByDefault(t *testing.T) {
	seen := make(chan bool, 1)
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		_, has := req.Context().Deadline()
		seen <- has
		return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}}, nil
	})
	resp, err := New(base).RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.False(t, <-seen)
}

func TestConnectionsAreReusedAcrossRetries(t *testing.T) {
	var conns atomic.Int32
	var n atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) < 4 {
			w.WriteHeader(503)
			io.WriteString(w, `{"error":{"type":"overloaded"}}`)
			return
		}
		io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	rt := New(nil, WithBackoff(time.Millisecond, time.Millisecond), WithJitter(0))
	defer rt.CloseIdleConnections()
	resp, err := (&http.Client{Transport: rt}).Get(srv.URL)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "ok", string(b))
	assert.Equal(t, 4, Attempts(resp))
	assert.Equal(t, int32(1), conns.Load(), "drained bodies let the connection be reused")
}

func TestSwitchingProtocolsBodyStaysReadWriteCloser(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		line, _ := brw.ReadString('\n')
		brw.WriteString(line)
		brw.Flush()
	}))
	defer srv.Close()
	req := get(t, srv.URL)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	rt := New(nil)
	defer rt.CloseIdleConnections()
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	require.True(t, ok, "body is %T", resp.Body)
	_, err = io.WriteString(rwc, "ping\n")
	require.NoError(t, err)
	buf := make([]byte, 5)
	_, err = io.ReadFull(rwc, buf)
	require.NoError(t, err)
	assert.Equal(t, "ping\n", string(buf))
	assert.Equal(t, 1, Attempts(resp))
	rwc.Close()
}

func TestResponseRequestIsTheCallersRequest(t *testing.T) {
	mock, _ := scripted(t, step{status: 503}, step{status: 200})
	req := post(t, "https://api.test/x", strings.NewReader("abc"))
	resp, err := New(mock, WithClock(autoClock())).RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Same(t, req, resp.Request)
}

func TestConcurrentUseIsSafe(t *testing.T) {
	// Each request (told apart by its body) fails with a network error,
	// then a 503, then succeeds; 50 of them share one transport.
	var mu sync.Mutex
	seen := map[byte]int{}
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		b, _ := io.ReadAll(req.Body)
		req.Body.Close()
		mu.Lock()
		seen[b[0]]++
		n := seen[b[0]]
		mu.Unlock()
		switch n {
		case 1:
			return nil, io.ErrUnexpectedEOF
		case 2:
			return &http.Response{StatusCode: 503, Header: http.Header{}, Body: http.NoBody}, nil
		}
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(b))}, nil
	})
	// The upstream fails 100 times at once: the breaker and the budget
	// would rightly step in (and, on a clock every waiter moves forward,
	// when depends on the scheduler). What is tested here is that the
	// calls do not mix their bodies, so both are off.
	rt := New(base, WithClock(autoClock()),
		WithCircuitBreaker(CircuitBreaker{Disabled: true}), WithRetryBudget(RetryBudget{Disabled: true}))
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := bytes.Repeat([]byte{byte(i)}, 100)
			resp, err := rt.RoundTrip(post(t, "https://api.test/x", io.NopCloser(bytes.NewReader(body))))
			if !assert.NoError(t, err) {
				return
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Equal(t, body, got, "request %d got its own body back", i)
			assert.Equal(t, 3, Attempts(resp))
		}()
	}
	wg.Wait()
}

func TestUserMessagePhrasesTheWaitOnTheTransportsClock(t *testing.T) {
	mock, _ := scripted(t, step{status: 429, header: http.Header{"Retry-After": {"120"}}})
	resp, err := New(mock, WithClock(autoClock())).RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	defer resp.Body.Close()
	e := CheckResponse(resp, nil).(*Error)
	assert.Equal(t, testStart.Add(2*time.Minute), e.RetryAt)
	assert.Contains(t, e.UserMessage(), "in about 2 minutes")
}
