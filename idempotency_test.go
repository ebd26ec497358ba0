package retryhttp

import (
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// keyRecorder answers 503 twice, then 200, recording Idempotency-Key.
type keyRecorder struct {
	mu   sync.Mutex
	keys []string
}

func (k *keyRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keys = append(k.keys, req.Header.Get(IdempotencyKeyHeader))
	code := 503
	if len(k.keys) == 3 {
		code = 200
	}
	return &http.Response{StatusCode: code, Header: http.Header{}, Body: http.NoBody}, nil
}

func TestIdempotencyKeyIsStampedOnceForAllAttempts(t *testing.T) {
	rec := &keyRecorder{}
	rt := New(rec, WithClock(autoClock()), WithIdempotencyKey())
	resp, err := rt.RoundTrip(post(t, "https://api.test/x", strings.NewReader("{}")))
	require.NoError(t, err)
	resp.Body.Close()
	require.Len(t, rec.keys, 3)
	assert.Regexp(t, uuidV4, rec.keys[0])
	assert.Equal(t, rec.keys[0], rec.keys[1])
	assert.Equal(t, rec.keys[0], rec.keys[2])

	again := &keyRecorder{}
	resp, err = New(again, WithClock(autoClock()), WithIdempotencyKey()).RoundTrip(post(t, "https://api.test/x", nil))
	require.NoError(t, err)
	resp.Body.Close()
	assert.NotEqual(t, rec.keys[0], again.keys[0], "each request gets its own key")
}

func TestIdempotencyKeyKeepsTheCallersAndSkipsSafeMethods(t *testing.T) {
	rec := &keyRecorder{}
	req := post(t, "https://api.test/x", nil)
	req.Header.Set(IdempotencyKeyHeader, "mine")
	resp, err := New(rec, WithClock(autoClock()), WithIdempotencyKey()).RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, []string{"mine", "mine", "mine"}, rec.keys)

	rec = &keyRecorder{}
	resp, err = New(rec, WithClock(autoClock()), WithIdempotencyKey()).RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, []string{"", "", ""}, rec.keys)
}

func TestIdempotencyGuard(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	cases := []struct {
		name     string
		method   string
		key      string
		first    step
		attempts int
	}{
		{"POST 500 may have run", http.MethodPost, "", step{status: 500}, 1},
		{"POST 502 may have run", http.MethodPost, "", step{status: 502}, 1},
		{"PATCH 504 may have run", http.MethodPatch, "", step{status: 504}, 1},
		{"POST reset after send", http.MethodPost, "", step{err: reset}, 1},
		{"POST 429 was refused", http.MethodPost, "", step{status: 429}, 2},
		{"POST 503 was refused", http.MethodPost, "", step{status: 503}, 2},
		{"POST 529 was refused", http.MethodPost, "", step{status: 529}, 2},
		{"POST connection refused", http.MethodPost, "", step{err: refused}, 2},
		{"POST with key is safe", http.MethodPost, "k1", step{status: 500}, 2},
		{"PUT is idempotent", http.MethodPut, "", step{status: 500}, 2},
		{"GET is idempotent", http.MethodGet, "", step{status: 502}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mock, _ := scripted(t, c.first, step{status: 200})
			req, err := http.NewRequest(c.method, "https://api.test/x", strings.NewReader("{}"))
			require.NoError(t, err)
			if c.key != "" {
				req.Header.Set(IdempotencyKeyHeader, c.key)
			}
			resp, err := New(mock, WithClock(autoClock()), WithIdempotencyGuard()).RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			assert.Equal(t, c.attempts, mock.GetTotalCallCount())
		})
	}
}

func TestGuardWithStampedKeyRetriesFreely(t *testing.T) {
	mock, _ := scripted(t, step{status: 500}, step{status: 200})
	resp, err := New(mock, WithClock(autoClock()), WithIdempotencyGuard(), WithIdempotencyKey()).
		RoundTrip(post(t, "https://api.test/x", strings.NewReader("{}")))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 2, Attempts(resp))
}

func TestDefaultRetriesPOSTLikeTheSDKs(t *testing.T) {
	mock, _ := scripted(t, step{status: 500}, step{status: 200})
	resp, err := New(mock, WithClock(autoClock())).RoundTrip(post(t, "https://api.test/x", strings.NewReader("{}")))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 2, Attempts(resp))
}
