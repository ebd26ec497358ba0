package outbox

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

// fakeNow is the clock of the outbox and of its transport in tests: the
// transport's waits pass at once, and the outbox's time moves only through
// them and Advance.
type fakeNow struct{ *retrytest.Clock }

func newFakeNow() *fakeNow { return &fakeNow{retrytest.NewClock()} }

// arrival is a request the upstream received.
type arrival struct {
	Method, Path, Key, Auth, Cookie string
	Body                            string
}

// upstream is a loopback server whose answer the test sets, and which
// records what arrives.
type upstream struct {
	*httptest.Server
	mu       sync.Mutex
	arrivals []arrival
	answer   func(w http.ResponseWriter, r *http.Request)
}

func newUpstream(t testing.TB, answer func(w http.ResponseWriter, r *http.Request)) *upstream {
	u := &upstream{answer: answer}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.arrivals = append(u.arrivals, arrival{r.Method, r.URL.Path, r.Header.Get(retryhttp.IdempotencyKeyHeader),
			r.Header.Get("Authorization"), r.Header.Get("Cookie"), string(b)})
		answer := u.answer
		u.mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) setAnswer(f func(w http.ResponseWriter, r *http.Request)) {
	u.mu.Lock()
	u.answer = f
	u.mu.Unlock()
}

func (u *upstream) Arrivals() []arrival {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]arrival(nil), u.arrivals...)
}

func status(code int) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(code)
		io.WriteString(w, http.StatusText(code)+" from upstream")
	}
}

// testTransport is a RetryTransport whose waits pass at once, retrying
// twice.
func testTransport(base http.RoundTripper, opts ...retryhttp.Option) *retryhttp.RetryTransport {
	return retryhttp.New(base, append([]retryhttp.Option{
		retryhttp.WithClock(retrytest.NewClock()), retryhttp.WithMaxRetries(2)}, opts...)...)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openBolt opens a BoltStore in the test's temporary directory.
func openBolt(t testing.TB) (*BoltStore, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outbox.db")
	s, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

// newTestOutbox is an outbox on store with a fake clock, sending to u
// through a fast RetryTransport, authorizing replays with a test token.
func newTestOutbox(t testing.TB, store Store, u *upstream, edit func(*Options)) (*Outbox, *fakeNow) {
	t.Helper()
	now := newFakeNow()
	o := Options{
		Transport: testTransport(u.Client().Transport, retryhttp.WithClock(now.Clock)),
		Store:     store,
		Authorize: func(r *http.Request) error { r.Header.Set("Authorization", "Bearer replay-token"); return nil },
		Now:       now.Now,
		Logger:    quietLogger(),
	}
	if edit != nil {
		edit(&o)
	}
	ob, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return ob, now
}

func post(t testing.TB, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, stringsReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func stringsReader(s string) io.Reader { return &sr{s: s} }

// sr is a body that is not a *strings.Reader, so that net/http sets no
// GetBody: Do must make the body replayable itself.
type sr struct{ s string }

func (r *sr) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	n := copy(p, r.s)
	r.s = r.s[n:]
	return n, nil
}
