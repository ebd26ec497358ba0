// Per-request overhead: what retryhttp costs per request compared with the
// bare transport and the peers, against a stub base transport.

package bench

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/retryhttp/retryhttp"
)

const (
	getURL   = "https://api.test/v1/models"
	postURL  = "https://api.test/v1/messages"
	respText = `{"ok":true}`
)

// payload is the 64 KiB POST body: about the size of a long LLM prompt.
// It is filled with a pattern, not zeros, so a body that arrives shifted or
// truncated does not compare equal by accident.
var payload = func() []byte {
	p := make([]byte, 64<<10)
	for i := range p {
		p[i] = byte(i*7 + i>>8)
	}
	return p
}()

// stub is the base transport. Like a real transport it reads the request body
// to the end and closes it (so a wrapper that copies or wraps the body pays
// for that here), and it returns a fresh response with headers and a small
// body. sink receives the body; nil discards it.
type stub struct {
	sink *bytes.Buffer
	seen *http.Request // the last request, for the correctness test
}

func (s *stub) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		var w io.Writer = io.Discard
		if s.sink != nil {
			w = s.sink
		}
		if _, err := io.Copy(w, req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
	}
	if s.sink != nil {
		s.seen = req
	}
	body := &respBody{}
	body.r.Reset(respText)
	return &http.Response{
		Status:        "200 OK",
		StatusCode:    http.StatusOK,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          body,
		ContentLength: int64(len(respText)),
		Request:       req,
	}, nil
}

// respBody stands in for net/http's response body. It deliberately has no
// WriteTo method (net/http's bodies have none), so io.Copy takes the same
// path through every wrapper.
type respBody struct{ r strings.Reader }

func (b *respBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *respBody) Close() error               { return nil }

// contender is one way of sending a request through base.
type contender struct {
	name string
	rt   http.RoundTripper
}

// contenders wraps base in each library with its default policy (failsafe-go
// gets retryhttp's backoff and retry count, since its builder has no
// backoff by default; resty and rehttp the setup of peers_test.go, resty
// through the adapter that lets it stand in for a RoundTripper). No retry
// happens in these runs: the stub answers 200.
func contenders(base http.RoundTripper) []contender {
	rc := retryablehttp.NewClient()
	rc.Logger = nil // its default logger writes a line per request to stderr
	rc.HTTPClient = &http.Client{Transport: base}

	fs := failsafehttp.NewRetryPolicyBuilder().
		WithBackoff(retryhttp.DefaultBackoffBase, retryhttp.DefaultBackoffMax).
		WithMaxRetries(retryhttp.DefaultMaxRetries).
		Build()

	return []contender{
		{"bare", base},
		{"retryhttp", retryhttp.New(base)},
		{"retryablehttp", &retryablehttp.RoundTripper{Client: rc}},
		{"failsafe", failsafehttp.NewRoundTripper(base, fs)},
		{"resty", newResty(base)},
		{"rehttp", newRehttp(base)},
	}
}

func newGET() *http.Request {
	req, err := http.NewRequest(http.MethodGet, getURL, nil)
	if err != nil {
		panic(err)
	}
	return req
}

// newPOST builds the request the way most callers (and the LLM SDKs) do:
// http.NewRequest over a bytes.Reader, which sets GetBody and ContentLength.
func newPOST() *http.Request {
	req, err := http.NewRequest(http.MethodPost, postURL, bytes.NewReader(payload))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

// run sends b.N requests through rt and reads and closes every response, as
// a caller would. The request is built inside the loop because a body can be
// sent only once; every contender pays the same for that.
func run(b *testing.B, rt http.RoundTripper, newReq func() *http.Request) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := rt.RoundTrip(newReq())
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// The sub-benchmarks are named impl=<contender> so that
// `benchstat -col /impl` puts the contenders side by side, bare first.

func BenchmarkGET(b *testing.B) {
	for _, c := range contenders(&stub{}) {
		b.Run("impl="+c.name, func(b *testing.B) { run(b, c.rt, newGET) })
	}
}

func BenchmarkPOST64K(b *testing.B) {
	for _, c := range contenders(&stub{}) {
		b.Run("impl="+c.name, func(b *testing.B) { run(b, c.rt, newPOST) })
	}
}

// TestStubRoundTrip checks that every contender's path through the stub works,
// so the benchmarks cannot silently measure a broken one: 200 comes back with
// its body, and the POST body reaches the stub whole and byte-identical.
func TestStubRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		newReq  func() *http.Request
		method  string
		reqBody []byte
	}{
		{"GET", newGET, http.MethodGet, nil},
		{"POST64K", newPOST, http.MethodPost, payload},
	} {
		s := &stub{sink: new(bytes.Buffer)}
		for _, c := range contenders(s) {
			t.Run(tc.name+"/"+c.name, func(t *testing.T) {
				s.sink.Reset()
				s.seen = nil
				start := time.Now()
				resp, err := c.rt.RoundTrip(tc.newReq())
				if err != nil {
					t.Fatalf("RoundTrip: %v", err)
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatalf("reading the response body: %v", err)
				}
				if resp.StatusCode != http.StatusOK || string(got) != respText {
					t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, got, respText)
				}
				// A retry would wait at least a second: this proves none happened.
				if d := time.Since(start); d > 500*time.Millisecond {
					t.Fatalf("round trip took %v: a retry happened", d)
				}
				if s.seen == nil {
					t.Fatal("the stub was not called")
				}
				if s.seen.Method != tc.method {
					t.Errorf("stub saw method %q, want %q", s.seen.Method, tc.method)
				}
				if !bytes.Equal(s.sink.Bytes(), tc.reqBody) {
					t.Errorf("stub received %d body bytes, want %d identical ones", s.sink.Len(), len(tc.reqBody))
				}
				if tc.reqBody != nil && s.seen.ContentLength != int64(len(tc.reqBody)) {
					t.Errorf("stub saw ContentLength %d, want %d", s.seen.ContentLength, len(tc.reqBody))
				}
			})
		}
	}
}
