package retryhttp

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// quickBase is a base transport that answers with the responses of next in
// turn (a 200 with body "ok" once they run out) and records the requests it
// was sent.
type quickBase struct {
	mu   sync.Mutex
	sent []*http.Request
	next []func(*http.Request) (*http.Response, error)
}

func (r *quickBase) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.sent = append(r.sent, req)
	var f func(*http.Request) (*http.Response, error)
	if len(r.next) > 0 {
		f, r.next = r.next[0], r.next[1:]
	}
	r.mu.Unlock()
	if f == nil {
		return reply(http.StatusOK, nil, "ok")(req)
	}
	return f(req)
}

// calls is how many requests r was sent.
func (r *quickBase) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sent)
}

// then queues the answers to the next requests.
func (r *quickBase) then(fs ...func(*http.Request) (*http.Response, error)) {
	r.mu.Lock()
	r.next = append(r.next, fs...)
	r.mu.Unlock()
}

// reply is a response with status, header and body.
func reply(status int, h http.Header, body string) func(*http.Request) (*http.Response, error) {
	return func(req *http.Request) (*http.Response, error) {
		if h == nil {
			h = http.Header{}
		}
		return &http.Response{StatusCode: status, Header: h.Clone(), Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
	}
}

// quickTransport returns a transport over r whose upstream https://api.test
// is known and free, so that the next requests to it take the quick path.
// (Its first request is the upstream's probe; the loop's admit stage finds
// it free on the second.)
func quickTransport(t *testing.T, r *quickBase, opts ...Option) *RetryTransport {
	t.Helper()
	rt := New(r, append([]Option{WithClock(autoClock()), WithJitter(0)}, opts...)...)
	require.True(t, rt.cfg.quick, "the configuration allows the quick path")
	for i := 0; i < 2; i++ {
		resp, err := rt.RoundTrip(newGet(t, context.Background()))
		require.NoError(t, err)
		drain(t, resp)
	}
	require.NotNil(t, rt.quickUpstream(newGet(t, context.Background())), "the next request takes the quick path")
	return rt
}

func newGet(t *testing.T, ctx context.Context) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.test/v1", nil)
	require.NoError(t, err)
	return req
}

func drain(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return string(b)
}

// The quick path counts a request and its attempt, sends the caller's
// request itself, holds the attempt's slot in the adaptive limit until its
// body is read to EOF or closed, and returns a response of ours:
// Attempts(resp) is 1.
func TestQuickPathCountsAndReleases(t *testing.T) {
	r := &quickBase{}
	rt := quickTransport(t, r)

	req := newGet(t, context.Background())
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	assert.Same(t, req, r.sent[len(r.sent)-1], "the caller's request goes out as it is")
	assert.Same(t, req, resp.Request)
	assert.Equal(t, 1, Attempts(resp))
	s := rt.Stats()[0]
	assert.EqualValues(t, 3, s.Requests, "two to warm up, and this one")
	assert.EqualValues(t, 3, s.Attempts)
	assert.Equal(t, 1, s.InFlight, "in flight until its body is read")
	assert.Equal(t, "ok", drain(t, resp))
	assert.Equal(t, 0, rt.Stats()[0].InFlight, "released at EOF")
	assert.Equal(t, 1, Attempts(resp), "still ours once read")

	// Closed unread: released at Close.
	resp, err = rt.RoundTrip(newGet(t, context.Background()))
	require.NoError(t, err)
	assert.Equal(t, 1, rt.Stats()[0].InFlight)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, 0, rt.Stats()[0].InFlight, "released at Close")

	// A bodiless answer is released at once.
	r.then(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusNoContent, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
	})
	resp, err = rt.RoundTrip(newGet(t, context.Background()))
	require.NoError(t, err)
	assert.Equal(t, 0, rt.Stats()[0].InFlight, "nothing to read: released at once")
	assert.Equal(t, 1, Attempts(resp))

	s = rt.Stats()[0]
	assert.EqualValues(t, 5, s.Requests)
	assert.EqualValues(t, 5, s.Attempts)
	assert.Zero(t, s.Retries)
	assert.Equal(t, 5, r.calls())
}

// A response that is not our own has no attempt count: the quick path's
// Attempts is the wrapper's.
func TestQuickPathAttemptsOfAForeignResponse(t *testing.T) {
	r := &quickBase{}
	rt := quickTransport(t, r)
	resp, err := rt.RoundTrip(newGet(t, context.Background()))
	require.NoError(t, err)
	drain(t, resp)
	foreign, err := r.RoundTrip(newGet(t, context.Background()))
	require.NoError(t, err)
	assert.Equal(t, 0, Attempts(foreign))
	assert.Equal(t, 1, Attempts(resp))
}

// An answer the quick path does not find plain goes to the attempt loop as
// its first attempt, which judges, observes, retries and counts it as it
// would have had it sent it itself.
func TestQuickPathHandsOverToTheLoop(t *testing.T) {
	t.Run("a transient status is retried", func(t *testing.T) {
		r := &quickBase{}
		rt := quickTransport(t, r)
		r.then(reply(http.StatusServiceUnavailable, nil, "busy"))
		resp, err := rt.RoundTrip(newGet(t, context.Background()))
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, 2, Attempts(resp))
		assert.Equal(t, "ok", drain(t, resp))
		s := rt.Stats()[0]
		assert.EqualValues(t, 3, s.Requests)
		assert.EqualValues(t, 4, s.Attempts)
		assert.EqualValues(t, 1, s.Retries)
		assert.EqualValues(t, 1, s.Failures)
		assert.Equal(t, 0, s.InFlight, "the superseded attempt's slot released too")
	})
	t.Run("a final error status keeps its verdict", func(t *testing.T) {
		r := &quickBase{}
		rt := quickTransport(t, r)
		r.then(reply(http.StatusNotFound, nil, "no"))
		resp, err := rt.RoundTrip(newGet(t, context.Background()))
		require.NoError(t, err)
		assert.Equal(t, http.StatusNotFound, resp.StatusCode)
		assert.Equal(t, 1, Attempts(resp))
		var e *Error
		require.ErrorAs(t, CheckResponse(resp, nil), &e)
		assert.False(t, e.Retryable)
		assert.Equal(t, "no", drain(t, resp))
		assert.Equal(t, 0, rt.Stats()[0].InFlight)
	})
	t.Run("a network error is retried", func(t *testing.T) {
		r := &quickBase{}
		rt := quickTransport(t, r)
		r.then(func(*http.Request) (*http.Response, error) { return nil, io.ErrUnexpectedEOF })
		resp, err := rt.RoundTrip(newGet(t, context.Background()))
		require.NoError(t, err)
		assert.Equal(t, 2, Attempts(resp))
		drain(t, resp)
		s := rt.Stats()[0]
		assert.EqualValues(t, 4, s.Attempts)
		assert.EqualValues(t, 1, s.Failures)
		assert.Equal(t, 0, s.InFlight, "the failed attempt's slot released")
	})
	t.Run("the status is remembered for a later error", func(t *testing.T) {
		r := &quickBase{}
		rt := quickTransport(t, r, WithMaxRetries(1))
		r.then(reply(http.StatusServiceUnavailable, nil, "busy"), func(*http.Request) (*http.Response, error) { return nil, io.ErrUnexpectedEOF })
		_, err := rt.RoundTrip(newGet(t, context.Background()))
		var e *Error
		require.ErrorAs(t, err, &e)
		assert.Equal(t, 2, e.Attempts)
		assert.Equal(t, http.StatusServiceUnavailable, e.StatusCode, "the last status seen")
		assert.Equal(t, 0, rt.Stats()[0].InFlight)
	})
	t.Run("neither a response nor an error", func(t *testing.T) {
		r := &quickBase{}
		rt := quickTransport(t, r, WithMaxRetries(0))
		r.then(func(*http.Request) (*http.Response, error) { return nil, nil })
		_, err := rt.RoundTrip(newGet(t, context.Background()))
		var e *Error
		require.ErrorAs(t, err, &e)
		assert.Equal(t, 1, e.Attempts)
		assert.Equal(t, 0, rt.Stats()[0].InFlight)
	})
	t.Run("x-should-retry on a 200 is heeded", func(t *testing.T) {
		r := &quickBase{}
		rt := quickTransport(t, r)
		r.then(reply(http.StatusOK, http.Header{"X-Should-Retry": {"true"}}, "again"))
		resp, err := rt.RoundTrip(newGet(t, context.Background()))
		require.NoError(t, err)
		assert.Equal(t, 2, Attempts(resp))
		assert.Equal(t, "ok", drain(t, resp))
	})
	stream := func(body string) func(*http.Request) (*http.Response, error) {
		return reply(http.StatusOK, http.Header{"Content-Type": {"text/event-stream"}}, body)
	}
	t.Run("a stream that opens well is handed over exactly as it came", func(t *testing.T) {
		r := &quickBase{}
		rt := quickTransport(t, r)
		r.then(stream(anthropicStream))
		resp, err := rt.RoundTrip(newGet(t, context.Background()))
		require.NoError(t, err)
		assert.Equal(t, 1, Attempts(resp))
		assert.Equal(t, anthropicStream, drain(t, resp), "the exact stream, its first event replayed")
		assert.Equal(t, 0, rt.Stats()[0].InFlight)
	})
	t.Run("a stream that opens with an error is retried", func(t *testing.T) {
		r := &quickBase{}
		rt := quickTransport(t, r)
		r.then(stream(overloadedEvent+anthropicStream), stream(anthropicStream))
		resp, err := rt.RoundTrip(newGet(t, context.Background()))
		require.NoError(t, err)
		assert.Equal(t, 2, Attempts(resp))
		assert.Equal(t, anthropicStream, drain(t, resp), "the second stream, exactly")
		s := rt.Stats()[0]
		assert.EqualValues(t, 4, s.Attempts)
		assert.EqualValues(t, 1, s.Retries)
		assert.EqualValues(t, 1, s.Failures, "the overloaded stream counts as the upstream's failure")
		assert.Equal(t, 0, s.InFlight, "the superseded stream's slot released")
	})
	t.Run("a stream whose upstream is paced by the time its first event comes is counted by the pace", func(t *testing.T) {
		// While the stream's first event is awaited, another request
		// draws a 429: the upstream is paced from then on, and the
		// stream's answer, a success, is what the pace counts. Served
		// on the quick path after its peek, it went uncounted.
		r := &quickBase{}
		rt := quickTransport(t, r)
		pr, pw := io.Pipe()
		other := make(chan struct{})
		r.then(func(req *http.Request) (*http.Response, error) {
			go func() { // the other request, then the stream's first event
				if resp, err := rt.RoundTrip(newGet(t, context.Background())); err == nil {
					resp.Body.Close()
				}
				close(other)
				io.WriteString(pw, anthropicStream)
				pw.Close()
			}()
			return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: pr, Request: req}, nil
		}, reply(http.StatusTooManyRequests, http.Header{"Retry-After": {"1"}}, "slow down"))
		u := rt.upstreams.last.Load()
		servedSoFar := func() uint64 { u.mu.Lock(); defer u.mu.Unlock(); return u.served }
		before := servedSoFar()
		resp, err := rt.RoundTrip(newGet(t, context.Background()))
		require.NoError(t, err)
		<-other
		served := servedSoFar() - before
		assert.Equal(t, anthropicStream, drain(t, resp))
		assert.Equal(t, 1, Attempts(resp))
		require.NotEqual(t, paceOff, u.mode, "the 429 paced the upstream")
		assert.EqualValues(t, 2, served, "the other request's retry and the stream, both served while paced")
		assert.Equal(t, 0, rt.Stats()[0].InFlight)
	})
	t.Run("rate-limit headers are observed", func(t *testing.T) {
		r := &quickBase{}
		rt := quickTransport(t, r)
		r.then(reply(http.StatusOK, http.Header{"X-Ratelimit-Limit-Requests": {"100"}, "X-Ratelimit-Remaining-Requests": {"99"}}, "ok"))
		resp, err := rt.RoundTrip(newGet(t, context.Background()))
		require.NoError(t, err)
		assert.Equal(t, 1, Attempts(resp))
		drain(t, resp)
		s := rt.Stats()[0]
		assert.True(t, s.Limits.Known(), "the loop read the headers: %+v", s.Limits)
		assert.False(t, s.LimitsAt.IsZero())
	})
}

// The quick path sends nothing the loop would refuse or send otherwise: an
// invalid request to the known host is refused before anything is sent, a
// request to another host, or with a body, or with request options, takes
// the loop.
func TestQuickPathLeavesTheRestToTheLoop(t *testing.T) {
	r := &quickBase{}
	rt := quickTransport(t, r)
	sent := r.calls()

	req := newGet(t, context.Background())
	req.Header.Set("X-A", "a\nb")
	_, err := rt.RoundTrip(req)
	assert.ErrorIs(t, err, ErrInvalidRequest)
	req = newGet(t, context.Background())
	req.Host = "bad host"
	_, err = rt.RoundTrip(req)
	assert.ErrorIs(t, err, ErrInvalidRequest)
	req = newGet(t, context.Background())
	req.Method = "BAD METHOD"
	_, err = rt.RoundTrip(req)
	assert.ErrorIs(t, err, ErrInvalidRequest)
	assert.Equal(t, sent, r.calls(), "nothing sent")

	// Valid headers pass, and the request goes out as it is.
	req = newGet(t, context.Background())
	req.Header.Set("Authorization", "Bearer x")
	req.Header.Set("X-Trace", "1")
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	drain(t, resp)
	assert.Same(t, req, r.sent[len(r.sent)-1])

	// Request options apply: NoRetry sends one attempt only.
	r.then(reply(http.StatusServiceUnavailable, nil, "busy"))
	resp, err = rt.RoundTrip(newGet(t, NoRetry(context.Background())))
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, 1, Attempts(resp))
	drain(t, resp)

	// Request options that change the attempt apply: with an attempt
	// timeout it goes out as a copy, with the attempt's own context.
	req = newGet(t, ContextWithOptions(context.Background(), AttemptTimeout(time.Minute)))
	resp, err = rt.RoundTrip(req)
	require.NoError(t, err)
	drain(t, resp)
	out := r.sent[len(r.sent)-1]
	assert.NotSame(t, req, out)
	assert.NotEqual(t, req.Context(), out.Context(), "the attempt has its timeout")

	// A body that cannot be read again goes out whole on every attempt:
	// the loop keeps it for a retry.
	req, err = http.NewRequest(http.MethodPost, "https://api.test/v1", nil)
	require.NoError(t, err)
	req.Body = io.NopCloser(strings.NewReader("payload"))
	var got []string
	readBody := func(status int) func(*http.Request) (*http.Response, error) {
		return func(req *http.Request) (*http.Response, error) {
			b, _ := io.ReadAll(req.Body)
			got = append(got, string(b))
			return reply(status, nil, "")(req)
		}
	}
	r.then(readBody(http.StatusServiceUnavailable), readBody(http.StatusOK))
	resp, err = rt.RoundTrip(req)
	require.NoError(t, err)
	drain(t, resp)
	assert.Equal(t, []string{"payload", "payload"}, got)

	// Another host: its own upstream.
	req, err = http.NewRequest(http.MethodGet, "https://other.test/v1", nil)
	require.NoError(t, err)
	resp, err = rt.RoundTrip(req)
	require.NoError(t, err)
	drain(t, resp)
	keys := []string{}
	for _, s := range rt.Stats() {
		keys = append(keys, s.Key)
	}
	assert.Equal(t, []string{"https://api.test", "https://other.test"}, keys)
}

// The quick path's answers count as successes for the circuit breaker:
// five failures in a row after many successes are not half of the
// window's outcomes, and it stays closed.
func TestQuickPathCountsSuccessesForTheBreaker(t *testing.T) {
	r := &quickBase{}
	rt := quickTransport(t, r, WithMaxRetries(0))
	for i := 0; i < 10; i++ {
		resp, err := rt.RoundTrip(newGet(t, context.Background()))
		require.NoError(t, err)
		drain(t, resp)
	}
	for i := 0; i < 5; i++ {
		r.then(reply(http.StatusServiceUnavailable, nil, ""))
		resp, err := rt.RoundTrip(newGet(t, context.Background()))
		require.NoError(t, err)
		drain(t, resp)
	}
	s := rt.Stats()[0]
	assert.EqualValues(t, 5, s.Failures)
	assert.Equal(t, BreakerClosed, s.Breaker, "12 successes, 5 failures")

	// The same failures after the warm-up alone open it: the successes
	// above are what kept it closed.
	r = &quickBase{}
	rt = quickTransport(t, r, WithMaxRetries(0))
	for i := 0; i < 5; i++ {
		r.then(reply(http.StatusServiceUnavailable, nil, ""))
		resp, err := rt.RoundTrip(newGet(t, context.Background()))
		require.NoError(t, err)
		drain(t, resp)
	}
	assert.Equal(t, BreakerOpen, rt.Stats()[0].Breaker, "2 successes, 5 failures")
}

// An upstream that is not free (held after a 429) or whose breaker is not
// closed sends its requests through the loop's admit stage.
func TestQuickPathWaitsForAHeldUpstream(t *testing.T) {
	r := &quickBase{}
	clk := autoClock()
	rt := New(r, WithClock(clk), WithJitter(0))
	for i := 0; i < 2; i++ {
		resp, err := rt.RoundTrip(newGet(t, context.Background()))
		require.NoError(t, err)
		drain(t, resp)
	}
	require.NotNil(t, rt.quickUpstream(newGet(t, context.Background())))
	r.then(reply(http.StatusTooManyRequests, http.Header{"Retry-After": {"3"}}, "slow down"))
	resp, err := rt.RoundTrip(newGet(t, context.Background()))
	require.NoError(t, err)
	assert.Equal(t, 2, Attempts(resp))
	drain(t, resp)
	assert.Nil(t, rt.quickUpstream(newGet(t, context.Background())), "not free while paced after a 429")
	waits := clk.Sleeps()
	require.NotEmpty(t, waits)
	assert.GreaterOrEqual(t, waits[len(waits)-1], 3*time.Second, "the retry waited out the Retry-After")
	assert.EqualValues(t, 1, rt.Stats()[0].RateLimited)
}

// The quick path is taken only by a configuration that asks nothing more
// of a first attempt than it does.
func TestQuickAllowedByConfiguration(t *testing.T) {
	base := &quickBase{}
	for _, tc := range []struct {
		name string
		opt  Option
		want bool
	}{
		{"defaults", WithMaxRetries(3), true},
		{"breaker and adaptive limit off", WithAdaptiveConcurrency(AdaptiveConcurrency{Disabled: true}), true},
		{"a rate limit (an upstream never free)", WithRateLimit(Limits{RequestsPerMinute: 60}), true},
		{"a logger", WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), false},
		{"OnAttempt", WithHooks(Hooks{OnAttempt: func(Event) {}}), false},
		{"OnAttemptDone", WithHooks(Hooks{OnAttemptDone: func(Event) {}}), false},
		{"a cap on concurrency", WithMaxConcurrency(4), false},
		{"a key function", WithKeyFunc(func(*http.Request) string { return "k" }), false},
		{"keys by model", WithKeyByModel(), false},
		{"an attempt timeout", WithAttemptTimeout(time.Second), false},
		{"a classifier", WithClassifier(func(*http.Response, error) Verdict { return Default }), false},
		{"idempotency keys", WithIdempotencyKey(), false},
	} {
		assert.Equal(t, tc.want, New(base, tc.opt).cfg.quick, tc.name)
	}
	var zero RetryTransport
	zero.ready()
	assert.True(t, zero.cfg.quick, "the zero RetryTransport")
}

// With many attempts in flight the quick path's attempts are sampled for
// the adaptive limit's latency watch, and every slot is given back.
func TestQuickPathUnderConcurrency(t *testing.T) {
	const n = 2 * limitSampleFrom
	var block atomic.Bool
	arrived, release := make(chan struct{}, n), make(chan struct{})
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if block.Load() {
			arrived <- struct{}{}
			<-release
		}
		return reply(http.StatusOK, nil, "ok")(req)
	})
	rt := New(base)
	for i := 0; i < 2; i++ {
		resp, err := rt.RoundTrip(newGet(t, context.Background()))
		require.NoError(t, err)
		drain(t, resp)
	}
	require.NotNil(t, rt.quickUpstream(newGet(t, context.Background())))

	block.Store(true)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, "https://api.test/v1", nil)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				errs <- err
				return
			}
			if Attempts(resp) != 1 {
				errs <- errors.New("not one attempt")
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	for i := 0; i < n; i++ {
		<-arrived // every attempt in flight
	}
	assert.Equal(t, n, rt.Stats()[0].InFlight)
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s := rt.Stats()[0]
	assert.Equal(t, 0, s.InFlight)
	assert.EqualValues(t, n+2, s.Requests)
	assert.EqualValues(t, n+2, s.Attempts)
}

// rwBody is an upgraded connection's body: readable and writable.
type rwBody struct {
	io.Reader
	wrote strings.Builder
}

func (b *rwBody) Write(p []byte) (int, error) { return b.wrote.Write(p) }
func (b *rwBody) Close() error                { return nil }

// The quick path's answers keep their body's type and its release: a 101's
// body stays writable, and a transport without the adaptive limit holds
// nothing and still returns responses of its own.
func TestQuickPathBodies(t *testing.T) {
	t.Run("101 Switching Protocols", func(t *testing.T) {
		r := &quickBase{}
		rt := quickTransport(t, r)
		body := &rwBody{Reader: strings.NewReader("hello")}
		r.then(func(req *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusSwitchingProtocols, Header: http.Header{}, Body: body, Request: req}, nil
		})
		resp, err := rt.RoundTrip(newGet(t, context.Background()))
		require.NoError(t, err)
		rwc, ok := resp.Body.(io.ReadWriteCloser)
		require.True(t, ok, "the body stays writable")
		_, err = rwc.Write([]byte("hi"))
		require.NoError(t, err)
		assert.Equal(t, "hi", body.wrote.String())
		assert.Equal(t, 1, Attempts(resp))
		assert.Equal(t, 1, rt.Stats()[0].InFlight)
		assert.Equal(t, "hello", drain(t, resp))
		assert.Equal(t, 0, rt.Stats()[0].InFlight)
	})
	t.Run("no adaptive limit", func(t *testing.T) {
		r := &quickBase{}
		rt := quickTransport(t, r, WithAdaptiveConcurrency(AdaptiveConcurrency{Disabled: true}))
		resp, err := rt.RoundTrip(newGet(t, context.Background()))
		require.NoError(t, err)
		assert.Equal(t, 1, Attempts(resp))
		assert.Equal(t, "ok", drain(t, resp))
		s := rt.Stats()[0]
		assert.EqualValues(t, 3, s.Requests)
		assert.EqualValues(t, 3, s.Attempts)
	})
}

// Read and Close racing release the attempt's slot once.
func TestQuickPathReleasesOnceUnderRacingReadAndClose(t *testing.T) {
	r := &quickBase{}
	rt := quickTransport(t, r)
	for i := 0; i < 50; i++ {
		resp, err := rt.RoundTrip(newGet(t, context.Background()))
		require.NoError(t, err)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); io.Copy(io.Discard, resp.Body) }()
		go func() { defer wg.Done(); resp.Body.Close() }()
		wg.Wait()
		resp.Body.Close()
		require.Equal(t, 0, rt.Stats()[0].InFlight)
	}
}

// A response whose Request the base transport left nil gets the caller's,
// on the quick path and after it.
func TestQuickPathSetsTheResponsesRequest(t *testing.T) {
	r := &quickBase{}
	rt := quickTransport(t, r)
	noRequest := func(status int) func(*http.Request) (*http.Response, error) {
		return func(req *http.Request) (*http.Response, error) {
			resp, err := reply(status, nil, "x")(req)
			resp.Request = nil
			return resp, err
		}
	}
	for _, status := range []int{http.StatusOK, http.StatusNotFound} {
		r.then(noRequest(status))
		req := newGet(t, context.Background())
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, status, resp.StatusCode)
		assert.Same(t, req, resp.Request, "status %d", status)
		drain(t, resp)
	}
}
