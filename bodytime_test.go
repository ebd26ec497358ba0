package retryhttp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The time bounds on draining and peeking at bodies, and the concurrency
// slot of a bodiless response, against real loopback servers.

// stallFor is how long a stalled body stalls at most; promptly is the margin
// a call must return within instead. Draining and peeking take a few hundred
// milliseconds at most; the rest is room for a loaded machine.
const (
	stallFor = 30 * time.Second
	promptly = 3 * time.Second
)

// stallServer starts a loopback server whose handler gets stall, a channel
// that is closed at the test's end (or after stallFor at the latest, so code
// that waits on a stalled body fails the timing check rather than hanging).
// It also returns a RetryTransport on a pooled base with opts, its idle
// connections closed at the end, and release, which ends the stall at once.
func stallServer(t *testing.T, h func(w http.ResponseWriter, r *http.Request, stall <-chan struct{}), opts ...Option) (srv *httptest.Server, rt *RetryTransport, release func()) {
	return stallServerProto(t, false, h, opts...)
}

// stallServerProto is stallServer over HTTP/1.1, or HTTP/2 (TLS) when h2.
func stallServerProto(t *testing.T, h2 bool, h func(w http.ResponseWriter, r *http.Request, stall <-chan struct{}), opts ...Option) (srv *httptest.Server, rt *RetryTransport, release func()) {
	t.Helper()
	stall := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(stall) }) }
	srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h2 && r.ProtoMajor != 2 {
			t.Errorf("request over %s, want HTTP/2", r.Proto)
		}
		h(w, r, stall)
	}))
	var base http.RoundTripper // nil: a pooled transport from go-cleanhttp
	if h2 {
		srv.EnableHTTP2 = true
		srv.StartTLS()
		base = srv.Client().Transport
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	timer := time.AfterFunc(stallFor, release)
	t.Cleanup(func() { timer.Stop(); release() }) // runs before srv.Close, which waits for handlers
	rt = New(base, opts...)
	t.Cleanup(rt.CloseIdleConnections)
	return srv, rt, release
}

// protocols runs f over HTTP/1.1 and HTTP/2: both end a pending Read when
// the body is closed, which is what bounds the drain.
func protocols(t *testing.T, f func(t *testing.T, h2 bool)) {
	t.Run("HTTP/1.1", func(t *testing.T) { f(t, false) })
	t.Run("HTTP/2", func(t *testing.T) { f(t, true) })
}

// writeStalled sends the status, then head, flushed, then waits for stall
// (or the client to go) before sending tail.
func writeStalled(w http.ResponseWriter, r *http.Request, stall <-chan struct{}, status int, head, tail string) {
	w.WriteHeader(status)
	io.WriteString(w, head)
	w.(http.Flusher).Flush()
	select {
	case <-stall:
	case <-r.Context().Done():
		return
	}
	io.WriteString(w, tail)
}

func TestStalledSupersededBodyDoesNotHoldUpTheRetry(t *testing.T) {
	protocols(t, testStalledSupersededBody)
}

func testStalledSupersededBody(t *testing.T, h2 bool) {
	var mu sync.Mutex
	n := 0
	srv, rt, _ := stallServerProto(t, h2, func(w http.ResponseWriter, r *http.Request, stall <-chan struct{}) {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		if first {
			writeStalled(w, r, stall, http.StatusServiceUnavailable, "overloa", "ded")
			return
		}
		io.WriteString(w, "ok")
	}, WithBackoff(time.Millisecond, time.Millisecond), WithJitter(0))
	start := time.Now()
	resp, err := rt.RoundTrip(get(t, srv.URL))
	took := time.Since(start)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Less(t, took, promptly, "the stalled 503 body held the retry up")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 2, Attempts(resp))
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "ok", string(b))
}

// A 429 that ends retrying at once is returned as plain net/http would
// return it, without waiting for its body, and the body the caller reads is
// still exact: the bytes the late peek gets come first, then the rest.
func TestStalled429IsReturnedPromptlyWithItsBodyWhole(t *testing.T) {
	protocols(t, testStalled429)
}

func testStalled429(t *testing.T, h2 bool) {
	const head = `{"error":{"type":"insufficient_quota","message":"You exceeded`
	const tail = ` your current quota."}}`
	srv, rt, release := stallServerProto(t, h2, func(w http.ResponseWriter, r *http.Request, stall <-chan struct{}) {
		w.Header().Set("Content-Type", "application/json")
		writeStalled(w, r, stall, http.StatusTooManyRequests, head, tail)
	}, WithMaxRetries(0))
	start := time.Now()
	resp, err := rt.RoundTrip(get(t, srv.URL))
	took := time.Since(start)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Less(t, took, promptly, "the peek at the stalled 429 body held the call up")
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, 1, Attempts(resp))

	// CheckResponse peeks again, bounded too; the body is not there yet, so
	// it reports status and headers alone.
	start = time.Now()
	e := CheckResponse(resp, nil).(*Error)
	assert.Less(t, time.Since(start), promptly, "CheckResponse waited on the stalled body")
	assert.Equal(t, http.StatusTooManyRequests, e.StatusCode)
	assert.Empty(t, e.ProviderType)

	release()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, head+tail, string(b))
}

// A stalled 429 that is retried: the peek gives up, then the drain does, and
// the retry goes out.
func TestStalled429PeekAndDrainDoNotHoldUpTheRetry(t *testing.T) {
	var mu sync.Mutex
	n := 0
	srv, rt, _ := stallServer(t, func(w http.ResponseWriter, r *http.Request, stall <-chan struct{}) {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		if first {
			w.Header().Set("Content-Type", "application/json")
			writeStalled(w, r, stall, http.StatusTooManyRequests, `{"error":{"type":"rate_lim`, `it_error"}}`)
			return
		}
		io.WriteString(w, "ok")
	}, WithBackoff(time.Millisecond, time.Millisecond), WithJitter(0), WithMaxRetries(1))
	start := time.Now()
	resp, err := rt.RoundTrip(get(t, srv.URL))
	took := time.Since(start)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Less(t, took, promptly)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 2, Attempts(resp))
}

// CheckResponse on any response, not only ours, does not wait on a stalled
// body, and puts back what it reads late.
func TestCheckResponseOnAStalledBodyReturnsPromptly(t *testing.T) {
	const head, tail = "upstream fell", " over"
	srv, _, release := stallServer(t, func(w http.ResponseWriter, r *http.Request, stall <-chan struct{}) {
		writeStalled(w, r, stall, http.StatusInternalServerError, head, tail)
	})
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	start := time.Now()
	e := CheckResponse(resp, err).(*Error)
	assert.Less(t, time.Since(start), promptly, "CheckResponse waited on the stalled body")
	assert.Equal(t, http.StatusInternalServerError, e.StatusCode)
	assert.True(t, e.Retryable)
	release()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, head+tail, string(b))
}

// A response with no body (HEAD, 204) that the caller never closes does not
// keep its concurrency slot.
func TestBodilessResponseReleasesItsSlot(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/204" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	rt := New(nil, WithMaxConcurrency(1))
	defer rt.CloseIdleConnections()
	for _, c := range []struct{ method, path string }{{http.MethodHead, "/"}, {http.MethodGet, "/204"}, {http.MethodHead, "/"}} {
		ctx, cancel := context.WithTimeout(context.Background(), promptly)
		req, err := http.NewRequestWithContext(ctx, c.method, srv.URL+c.path, nil)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req) // its body is never closed
		cancel()
		require.NoError(t, err, "%s %s waited for the slot of a bodiless response", c.method, c.path)
		assert.Equal(t, http.NoBody, trackedBody(resp).rc, "%s %s", c.method, c.path)
	}
	assert.Len(t, rt.slots, 0)
}

// A late peek hands over exactly what it read, then the rest of the body,
// or the error that ended its read, in order.
func TestLatePeekKeepsTheBodyExact(t *testing.T) {
	t.Run("error after the bytes", func(t *testing.T) {
		pr, pw := io.Pipe()
		resp := &http.Response{StatusCode: 429, Header: http.Header{}, Body: pr}
		go pw.Write([]byte("abc"))
		start := time.Now()
		assert.Nil(t, peekBody(resp, 16), "the peek did not get its bytes in time")
		assert.Less(t, time.Since(start), promptly)
		boom := io.ErrClosedPipe
		go func() { pw.Write([]byte("def")); pw.CloseWithError(boom) }()
		b, err := io.ReadAll(resp.Body)
		assert.Equal(t, "abcdef", string(b))
		assert.ErrorIs(t, err, boom)
	})
	t.Run("longer than the peek", func(t *testing.T) {
		pr, pw := io.Pipe()
		resp := &http.Response{StatusCode: 429, Header: http.Header{}, Body: pr}
		assert.Nil(t, peekBody(resp, 4))
		go func() { io.WriteString(pw, "0123456789"); pw.Close() }()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, "0123456789", string(b))
	})
	t.Run("closed while the peek waits", func(t *testing.T) {
		pr, _ := io.Pipe()
		resp := &http.Response{StatusCode: 429, Header: http.Header{}, Body: pr}
		assert.Nil(t, peekBody(resp, 4))
		require.NoError(t, resp.Body.Close()) // ends the peek's goroutine (goleak checks)
		_, err := resp.Body.Read(make([]byte, 1))
		assert.ErrorIs(t, err, io.ErrClosedPipe)
	})
}
