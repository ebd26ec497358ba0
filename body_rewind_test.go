package retryhttp

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wireServer answers 503 to the first fails requests and 200 after, and
// records each body and Content-Length it received.
type wireServer struct {
	*httptest.Server
	mu      sync.Mutex
	bodies  [][]byte
	lengths []int64
}

func newWireServer(t *testing.T, fails int, readBody bool) *wireServer {
	ws := &wireServer{}
	var n atomic.Int32
	ws.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if int(n.Add(1)) <= fails {
			if readBody {
				b, _ := io.ReadAll(r.Body)
				ws.record(b, r.ContentLength)
			} else {
				ws.record(nil, r.ContentLength)
			}
			w.WriteHeader(503)
			return
		}
		b, _ := io.ReadAll(r.Body)
		ws.record(b, r.ContentLength)
		w.Write([]byte(strconv.Itoa(len(b))))
	}))
	t.Cleanup(ws.Close)
	return ws
}

func (ws *wireServer) record(b []byte, n int64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.bodies = append(ws.bodies, b)
	ws.lengths = append(ws.lengths, n)
}

func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// plainReader hides every interface but io.Reader.
type plainReader struct{ r io.Reader }

func (p *plainReader) Read(b []byte) (int, error) { return p.r.Read(b) }

// seekBody is a ReadSeekCloser that counts closes.
type seekBody struct {
	*bytes.Reader
	closed atomic.Int32
}

func (s *seekBody) Close() error { s.closed.Add(1); return nil }

func fastRetries() []Option {
	return []Option{WithBackoff(time.Millisecond, time.Millisecond), WithJitter(0)}
}

func TestBodiesReachTheServerIdenticalOnEveryAttempt(t *testing.T) {
	data := payload(200 << 10)
	cases := []struct {
		name string
		body func() io.Reader
	}{
		{"GetBody (bytes.Reader)", func() io.Reader { return bytes.NewReader(data) }},
		{"io.Seeker", func() io.Reader { return &seekBody{Reader: bytes.NewReader(data)} }},
		{"plain reader, buffered", func() io.Reader { return &plainReader{bytes.NewReader(data)} }},
	}
	for _, c := range cases {
		for _, serverReads := range []bool{true, false} {
			t.Run(c.name+" server reads="+strconv.FormatBool(serverReads), func(t *testing.T) {
				ws := newWireServer(t, 2, serverReads)
				rt := New(nil, fastRetries()...)
				defer rt.CloseIdleConnections()
				req := post(t, ws.URL, c.body())
				resp, err := rt.RoundTrip(req)
				require.NoError(t, err)
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				assert.Equal(t, strconv.Itoa(len(data)), string(got))
				assert.Equal(t, 3, Attempts(resp))
				want := sha256.Sum256(data)
				ws.mu.Lock()
				defer ws.mu.Unlock()
				last := ws.bodies[len(ws.bodies)-1]
				assert.Equal(t, want, sha256.Sum256(last), "final attempt body")
				if serverReads {
					for i, b := range ws.bodies {
						assert.Equal(t, want, sha256.Sum256(b), "attempt %d body", i+1)
					}
				}
				for i, n := range ws.lengths {
					if n >= 0 {
						assert.Equal(t, int64(len(data)), n, "attempt %d Content-Length", i+1)
					}
				}
			})
		}
	}
}

func TestSeekerRewindsToWhereTheBodyStarted(t *testing.T) {
	body := &seekBody{Reader: bytes.NewReader([]byte("skip:payload"))}
	body.Seek(5, io.SeekStart)
	mock, bodies := scripted(t, step{status: 503}, step{status: 503}, step{status: 200})
	req := post(t, "https://api.test/x", body)
	resp, err := New(mock, WithClock(autoClock())).RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, []string{"payload", "payload", "payload"}, bodies())
	assert.Equal(t, int32(1), body.closed.Load(), "the caller's body is closed once, at the end")
}

func TestGetBodyFirstAttemptSendsTheCallersBody(t *testing.T) {
	var first io.ReadCloser
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		first = req.Body
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}, nil
	})
	req := post(t, "https://api.test/x", strings.NewReader("abc"))
	resp, err := New(base).RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.True(t, req.Body == first, "no copy, no wrapper")
}

func TestBodyOverTheCapIsSentOnceAndSaysWhy(t *testing.T) {
	mock, bodies := scripted(t, step{status: 503}, step{status: 200})
	req := post(t, "https://api.test/x", &plainReader{strings.NewReader(strings.Repeat("z", 100))})
	resp, err := New(mock, WithClock(autoClock()), WithMaxBufferedBody(10)).RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, 503, resp.StatusCode)
	assert.Equal(t, 1, Attempts(resp))
	assert.Equal(t, []string{strings.Repeat("z", 100)}, bodies(), "sent whole, once")
	e := CheckResponse(resp, nil).(*Error)
	assert.Contains(t, e.StopReason, "WithMaxBufferedBody")
	assert.True(t, e.Retryable, "the failure itself was transient")
}

// failingReader yields its data, then err.
type failingReader struct {
	data []byte
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

func TestBodyThatFailsWhileReadIsNeverResent(t *testing.T) {
	boom := errors.New("disk on fire")
	mock, bodies := scripted(t, step{status: 200})
	req := post(t, "https://api.test/x", &failingReader{data: []byte("partial"), err: boom})
	resp, err := New(mock, WithClock(autoClock())).RoundTrip(req)
	require.Nil(t, resp)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, 1, e.Attempts)
	assert.Equal(t, 1, mock.GetTotalCallCount(), "never sent again short")
	assert.Empty(t, bodies(), "the mock saw the read fail")
	assert.Contains(t, err.Error(), "failed while being read")
	assert.False(t, e.Retryable, "the request's own failure: final, never retried")
	assert.Empty(t, e.StopReason, "nothing stopped early: the outcome was final")
}

func TestBodyShorterThanContentLengthIsNotReplayed(t *testing.T) {
	mock, _ := scripted(t, step{status: 503}, step{status: 200})
	req := post(t, "https://api.test/x", &plainReader{strings.NewReader("12345")})
	req.ContentLength = 10
	resp, err := New(mock, WithClock(autoClock())).RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, 1, Attempts(resp))
	assert.Contains(t, CheckResponse(resp, nil).(*Error).StopReason, "ContentLength")
}

func TestGetBodyFailureStopsWithTypedError(t *testing.T) {
	mock, bodies := scripted(t, step{status: 503}, step{status: 200})
	req := post(t, "https://api.test/x", strings.NewReader("abc"))
	req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("gone") }
	resp, err := New(mock, WithClock(autoClock())).RoundTrip(req)
	require.Nil(t, resp)
	assert.ErrorIs(t, err, ErrBodyNotReplayable)
	assert.Equal(t, []string{"abc"}, bodies())
}

func TestSeekFailureStopsWithTypedError(t *testing.T) {
	mock, _ := scripted(t, step{status: 503}, step{status: 200})
	body := &badSeeker{Reader: strings.NewReader("abc")}
	resp, err := New(mock, WithClock(autoClock())).RoundTrip(post(t, "https://api.test/x", body))
	require.Nil(t, resp)
	assert.ErrorIs(t, err, ErrBodyNotReplayable)
}

type badSeeker struct {
	*strings.Reader
	seeks int
}

func (b *badSeeker) Close() error { return nil }

func (b *badSeeker) Seek(off int64, whence int) (int64, error) {
	b.seeks++
	if b.seeks > 1 {
		return 0, errors.New("cannot seek a pipe")
	}
	return b.Reader.Seek(off, whence)
}

// lateReader is a base transport that answers 503 at once and reads the
// request body afterwards, from another goroutine, as net/http may.
type lateReader struct {
	wg    sync.WaitGroup
	calls atomic.Int32
	mu    sync.Mutex
	got   []string
	errs  []error
}

func (l *lateReader) RoundTrip(req *http.Request) (*http.Response, error) {
	if l.calls.Add(1) == 1 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			time.Sleep(5 * time.Millisecond)
			_, err := io.ReadAll(req.Body)
			l.mu.Lock()
			l.errs = append(l.errs, err)
			l.mu.Unlock()
			req.Body.Close()
		}()
		return &http.Response{StatusCode: 503, Header: http.Header{}, Body: http.NoBody}, nil
	}
	b, _ := io.ReadAll(req.Body)
	req.Body.Close()
	l.mu.Lock()
	l.got = append(l.got, string(b))
	l.mu.Unlock()
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}, nil
}

func TestSupersededAttemptCannotReadTheSharedBody(t *testing.T) {
	for _, body := range []func() io.Reader{
		func() io.Reader { return &plainReader{strings.NewReader("payload")} },
		func() io.Reader { return &seekBody{Reader: bytes.NewReader([]byte("payload"))} },
	} {
		base := &lateReader{}
		resp, err := New(base, WithClock(autoClock())).RoundTrip(post(t, "https://api.test/x", body()))
		require.NoError(t, err)
		resp.Body.Close()
		base.wg.Wait()
		assert.Equal(t, []string{"payload"}, base.got)
		require.Len(t, base.errs, 1)
		assert.ErrorIs(t, base.errs[0], errBodyDetached)
	}
}

func TestCallersRequestIsNeverMutated(t *testing.T) {
	mock, _ := scripted(t, step{status: 503}, step{status: 503}, step{status: 200})
	body := &plainReader{strings.NewReader("payload")}
	req := post(t, "https://api.test/x?q=1", body)
	req.Header.Set("X-Custom", "v")
	before := *req
	headerBefore := req.Header.Clone()
	resp, err := New(mock, WithClock(autoClock()), WithIdempotencyKey(), WithAttemptTimeout(time.Minute)).RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, headerBefore, req.Header)
	assert.True(t, before.Body == req.Body)
	assert.Nil(t, req.GetBody)
	assert.Equal(t, before.ContentLength, req.ContentLength)
	assert.Equal(t, "https://api.test/x?q=1", req.URL.String())
	assert.True(t, before.Context() == req.Context())
}

func TestRefusedRequestBodyIsClosed(t *testing.T) {
	body := &seekBody{Reader: bytes.NewReader([]byte("x"))}
	req := post(t, "https://api.test/x", body)
	req.URL.Scheme = "ftp"
	_, err := New(roundTripFunc(func(*http.Request) (*http.Response, error) {
		t.Fatal("must not be sent")
		return nil, nil
	})).RoundTrip(req)
	require.ErrorIs(t, err, ErrInvalidRequest)
	assert.Equal(t, int32(1), body.closed.Load())
}
