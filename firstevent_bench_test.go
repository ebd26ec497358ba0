package retryhttp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What the first-event check costs the caller: the time from calling
// RoundTrip to holding the stream's first bytes, with the check on (the
// default) and off, over four stub base transports that stream Anthropic's
// events:
//
//   - memory: the body is in memory; every byte is there at once, so what is
//     measured is the transport's own work (the check's goroutine, timer
//     and parse against none);
//   - pipe: the events come through an io.Pipe from a goroutine of the
//     stub's, one Write per event, as an HTTP/2 body's bytes come from its
//     connection's reader;
//   - loopback: an httptest server on 127.0.0.1 writes and flushes each
//     event; the base is a pooled http.Transport (connections reused);
//   - loopback-h2: the same over HTTP/2 with TLS, as LLM APIs are served:
//     the body's bytes come from the connection's reader through a pipe.
//
// Each iteration reads the whole stream and closes it; the first-byte time
// is reported as the metric first-byte-ns/op, next to sec/op for the whole.
//
//	go test -run '^$' -bench '^BenchmarkStreamFirstByte$' -count 10 . > /tmp/fe.txt
//	benchstat -col /check /tmp/fe.txt

// streamStubs are the stub base transports, by name. The loopback ones
// need a server, closed by the returned function.
func streamStub(tb testing.TB, name string) (http.RoundTripper, string, func()) {
	header := func() http.Header { return http.Header{"Content-Type": {"text/event-stream"}} }
	switch name {
	case "memory":
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Header: header(), Body: io.NopCloser(strings.NewReader(anthropicStream)), Request: req}, nil
		}), "https://api.test/v1/messages", func() {}
	case "pipe":
		events := strings.SplitAfter(anthropicStream, "\n\n")
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			pr, pw := io.Pipe()
			go func() {
				for _, ev := range events {
					if _, err := io.WriteString(pw, ev); err != nil {
						return
					}
				}
				pw.Close()
			}()
			return &http.Response{StatusCode: 200, Header: header(), Body: pr, Request: req}, nil
		}), "https://api.test/v1/messages", func() {}
	case "loopback", "loopback-h2":
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			for _, ev := range strings.SplitAfter(anthropicStream, "\n\n") {
				io.WriteString(w, ev)
				w.(http.Flusher).Flush()
			}
		}))
		if name == "loopback" {
			srv.Start()
		} else {
			srv.EnableHTTP2 = true
			srv.StartTLS()
		}
		base := srv.Client().Transport.(*http.Transport).Clone()
		return base, srv.URL + "/v1/messages", func() { base.CloseIdleConnections(); srv.Close() }
	}
	tb.Fatalf("no stub %q", name)
	return nil, "", nil
}

var streamStubNames = []string{"memory", "pipe", "loopback", "loopback-h2"}

func streamCheckTransport(base http.RoundTripper, on bool) *RetryTransport {
	if on {
		return New(base)
	}
	return New(base, WithFirstEventCheck(0, 0))
}

// The benchmark's paths work: both settings hand the exact stream over,
// first attempt, over every stub.
func TestStreamFirstByteStubs(t *testing.T) {
	for _, name := range streamStubNames {
		for _, on := range []bool{false, true} {
			base, url, done := streamStub(t, name)
			rt := streamCheckTransport(base, on)
			for range 3 {
				resp, body := roundTripStream(t, rt, get(t, url))
				assert.Equal(t, anthropicStream, body, "%s, check %v", name, on)
				assert.Equal(t, 1, Attempts(resp))
				if want, ok := map[string]int{"loopback": 1, "loopback-h2": 2}[name]; ok {
					assert.Equal(t, want, resp.ProtoMajor, "%s: the protocol", name)
				}
			}
			done()
		}
	}
}

func BenchmarkStreamFirstByte(b *testing.B) {
	for _, name := range streamStubNames {
		for _, on := range []bool{false, true} {
			b.Run("stub="+name+"/check="+map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) {
				base, url, done := streamStub(b, name)
				defer done()
				rt := streamCheckTransport(base, on)
				req, err := http.NewRequest(http.MethodGet, url, nil)
				require.NoError(b, err)
				buf := make([]byte, 32<<10)
				var firstByte time.Duration
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					start := time.Now()
					resp, err := rt.RoundTrip(req)
					if err != nil {
						b.Fatal(err)
					}
					n, err := resp.Body.Read(buf)
					for n == 0 && err == nil {
						n, err = resp.Body.Read(buf)
					}
					firstByte += time.Since(start)
					if n == 0 {
						b.Fatal("no first byte: ", err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				b.ReportMetric(float64(firstByte.Nanoseconds())/float64(b.N), "first-byte-ns/op")
			})
		}
	}
}
