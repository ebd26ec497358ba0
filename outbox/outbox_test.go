package outbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp"
	bolt "go.etcd.io/bbolt"
)

func TestDoDefersTransientFailureWithoutCredentials(t *testing.T) {
	u := newUpstream(t, status(503))
	store, path := openBolt(t)
	ob, now := newTestOutbox(t, store, u, nil)

	req := post(t, u.URL+"/orders", `{"sku":42}`)
	req.Header.Set("Authorization", "Bearer sk-secret-token-1")
	req.Header.Set("Cookie", "session=secret-cookie-2")
	req.Header.Set("X-Api-Key", "secret-key-3")
	req.Header.Set("Api-Key", "secret-key-4")
	req.Header.Set("Content-Type", "application/json")
	resp, err := ob.Do(req)
	if resp != nil {
		t.Fatalf("deferred Do returned a response: %d", resp.StatusCode)
	}
	var de *DeferredError
	if !errors.Is(err, ErrDeferred) || !errors.As(err, &de) {
		t.Fatalf("err = %v, want ErrDeferred", err)
	}
	if !errors.Is(err, retryhttp.ErrRetriesExhausted) {
		t.Errorf("the cause is lost: %v", err)
	}
	if want := "The system was briefly congested; we received your request safely and are retrying it automatically."; de.UserMessage() != want {
		t.Errorf("UserMessage = %q", de.UserMessage())
	}
	arr := u.Arrivals()
	if len(arr) != 3 {
		t.Fatalf("upstream saw %d attempts, want 3 (the transport's own retries)", len(arr))
	}
	if arr[0].Key == "" || arr[1].Key != arr[0].Key || arr[0].Body != `{"sku":42}` || arr[2].Body != `{"sku":42}` {
		t.Fatalf("attempts: %+v", arr)
	}

	e, err := ob.Get(context.Background(), de.ID)
	if err != nil {
		t.Fatal(err)
	}
	if e.State != Pending || e.Attempts != 1 || e.LastStatus != 503 || e.IdempotencyKey != arr[0].Key {
		t.Errorf("entry: %+v", e)
	}
	if !e.NextAt.Equal(now.Now().Add(time.Minute)) {
		t.Errorf("NextAt = %v, want a minute after now", e.NextAt.Sub(now.Now()))
	}
	if string(e.Body) != `{"sku":42}` || e.Header.Get("Content-Type") != "application/json" {
		t.Errorf("request not kept whole: %q %v", e.Body, e.Header)
	}
	for _, h := range credentialHeaders {
		if e.Header.Get(h) != "" {
			t.Errorf("%s saved", h)
		}
	}
	// Nothing of the credentials reaches the file.
	store.Close()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"sk-secret-token-1", "secret-cookie-2", "secret-key-3", "secret-key-4"} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("the file holds %q", secret)
		}
	}
}

// stubTransport answers every request with err.
type stubTransport struct{ err error }

func (s stubTransport) RoundTrip(*http.Request) (*http.Response, error) { return nil, s.err }

func TestDoClassifies(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		saved bool
	}{
		{"rate limited", &retryhttp.Error{Err: retryhttp.ErrRateLimited, Retryable: true}, true},
		{"circuit open", &retryhttp.Error{Err: retryhttp.ErrCircuitOpen, Retryable: true}, true},
		{"past deadline", &retryhttp.Error{Err: retryhttp.ErrPastDeadline, Retryable: true}, true},
		{"deadline", &retryhttp.Error{Err: context.DeadlineExceeded}, true},
		{"caller canceled", &retryhttp.Error{Err: context.Canceled}, false},
		{"body not replayable", &retryhttp.Error{Err: retryhttp.ErrBodyNotReplayable}, false},
		{"not retryable", &retryhttp.Error{Err: errors.New("x509: bad certificate")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &countingStore{Store: memStore(t)}
			ob, _ := newTestOutbox(t, store, newUpstream(t, status(200)), func(o *Options) { o.Transport = stubTransport{tc.err} })
			_, err := ob.Do(post(t, "http://api.test/x", "b"))
			if got := errors.Is(err, ErrDeferred); got != tc.saved {
				t.Fatalf("deferred = %v, want %v (err %v)", got, tc.saved, err)
			}
			if !tc.saved && !errors.Is(err, tc.err.(*retryhttp.Error).Err) {
				t.Errorf("err = %v, want the original", err)
			}
			if store.puts.Load() != map[bool]int64{true: 1}[tc.saved] {
				t.Errorf("%d puts", store.puts.Load())
			}
		})
	}
}

func TestDoReturnsFinalFailuresUnsaved(t *testing.T) {
	for _, code := range []int{400, 401, 404, 422, 501} {
		u := newUpstream(t, status(code))
		store := &countingStore{Store: memStore(t)}
		ob, _ := newTestOutbox(t, store, u, nil)
		resp, err := ob.Do(post(t, u.URL, "b"))
		if err != nil || resp == nil || resp.StatusCode != code {
			t.Fatalf("%d: resp %v, err %v", code, resp, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "from upstream") {
			t.Errorf("%d: body %q not readable", code, b)
		}
		if store.puts.Load() != 0 {
			t.Errorf("%d: saved", code)
		}
	}
}

func TestDoWithCredentialsAndNoAuthorizeIsNotSaved(t *testing.T) {
	u := newUpstream(t, status(503))
	store := &countingStore{Store: memStore(t)}
	ob, _ := newTestOutbox(t, store, u, func(o *Options) { o.Authorize = nil })
	req := post(t, u.URL, "b")
	req.Header.Set("Authorization", "Bearer x")
	resp, err := ob.Do(req)
	if err != nil || resp == nil || resp.StatusCode != 503 || store.puts.Load() != 0 {
		t.Fatalf("resp %v err %v puts %d", resp, err, store.puts.Load())
	}
	resp.Body.Close()
}

func TestStoreThatCannotWriteReturnsTheOriginalFailure(t *testing.T) {
	_, path := openBolt(t)
	readOnly := func(t *testing.T) Store {
		// The file made by openBolt, closed there at cleanup: open a copy.
		db, err := bolt.Open(path+".ro", 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NewBoltStore(db); err != nil {
			t.Fatal(err)
		}
		db.Close()
		db, err = bolt.Open(path+".ro", 0o600, &bolt.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewBoltStore(db)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	for name, mk := range map[string]func(t *testing.T) Store{
		"failing Put":    func(t *testing.T) Store { return failingStore{memStore(t)} },
		"read-only file": readOnly,
	} {
		t.Run(name, func(t *testing.T) {
			u := newUpstream(t, status(503))
			ob, _ := newTestOutbox(t, mk(t), u, nil)
			resp, err := ob.Do(post(t, u.URL, "b"))
			if err != nil || resp == nil || resp.StatusCode != 503 {
				t.Fatalf("resp %v, err %v: want the original 503", resp, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "Service Unavailable from upstream" {
				t.Errorf("body %q", b)
			}
		})
	}
	t.Run("transport error", func(t *testing.T) {
		cause := &retryhttp.Error{Err: retryhttp.ErrCircuitOpen, Retryable: true}
		ob, _ := newTestOutbox(t, failingStore{memStore(t)}, newUpstream(t, status(200)), func(o *Options) { o.Transport = stubTransport{cause} })
		_, err := ob.Do(post(t, "http://api.test/", "b"))
		if err != cause {
			t.Fatalf("err = %v, want the transport's own", err)
		}
	})
}

func TestBodyTooLarge(t *testing.T) {
	u := newUpstream(t, status(200))
	ob, _ := newTestOutbox(t, memStore(t), u, func(o *Options) { o.MaxBodyBytes = 4 })
	if _, err := ob.Do(post(t, u.URL, "12345")); !errors.Is(err, ErrBodyTooLarge) {
		t.Fatalf("err = %v", err)
	}
	if len(u.Arrivals()) != 0 {
		t.Fatal("sent")
	}
}
