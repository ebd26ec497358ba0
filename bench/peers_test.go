// The peers that have no retry defaults of their own, resty v2 and rehttp,
// configured as their users typically do: retry transport errors, 429 and
// 5xx, 5 retries (retryhttp's own default count), their own backoff.

package bench

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/PuerkitoBio/rehttp"
	"github.com/go-resty/resty/v2"
	"github.com/hashicorp/go-cleanhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

// peerRetries is the retry count of the peers that have no default one:
// resty's is 0 (no retry until SetRetryCount) and rehttp has none at all.
// 5 is retryhttp's DefaultMaxRetries.
const peerRetries = 5

// newRestyClient is a resty v2 client as a user sets up retries: over base,
// SetRetryCount(5) and one retry condition for 429 and 5xx responses, with
// resty's default backoff (capped exponential with jitter from
// RetryWaitTime 100 ms to RetryMaxWaitTime 2 s, no Retry-After: resty reads
// it only through a RetryAfterFunc the user writes). A condition replaces
// resty's built-in "retry on a transport error" rather than adding to it,
// so the condition keeps that too. Its logger is silenced, as
// go-retryablehttp's is: it writes a line per failed attempt.
func newRestyClient(base http.RoundTripper) *resty.Client {
	return resty.NewWithClient(&http.Client{Transport: base}).
		SetLogger(quietLogger{}).
		SetRetryCount(peerRetries).
		AddRetryCondition(func(r *resty.Response, err error) bool {
			if err != nil {
				return true
			}
			return r != nil && (r.StatusCode() == http.StatusTooManyRequests || r.StatusCode() >= 500)
		})
}

// quietLogger discards resty's log lines.
type quietLogger struct{}

func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Warnf(string, ...any)  {}
func (quietLogger) Debugf(string, ...any) {}

// restyTransport sends a request through a resty client, so resty can sit in
// the harness, which speaks http.Client, like the RoundTripper peers. It does
// what a resty caller does: the method, URL, headers, context and body (as
// bytes, which resty resends on every attempt) go on a resty request; the
// answer comes back as resty keeps it, the body read to the end into memory.
// Resty's last response is returned whatever its status, as resty returns it.
type restyTransport struct{ c *resty.Client }

func (t restyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := t.c.R().SetContext(req.Context())
	for k, v := range req.Header {
		r.Header[k] = append([]string(nil), v...)
	}
	if req.Body != nil && req.Body != http.NoBody {
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		r.SetBody(body)
	}
	resp, err := r.Execute(req.Method, req.URL.String())
	if err != nil {
		return nil, err
	}
	raw := resp.RawResponse
	body := resp.Body()
	raw.Body = io.NopCloser(bytes.NewReader(body))
	raw.ContentLength = int64(len(body))
	return raw, nil
}

// newResty is resty as a contender over base.
func newResty(base http.RoundTripper) http.RoundTripper { return restyTransport{newRestyClient(base)} }

// newRehttp is an rehttp Transport as its users typically configure it: at
// most 5 retries, of temporary network errors and of 429 and 5xx responses,
// with full-jitter exponential backoff from 1 s (capped at 1 min, which 5
// retries never reach: the last wait is drawn from [0, 16 s)). rehttp has no
// Retry-After support: its DelayFn sees the response, but none of its
// ready-made ones reads the header. It buffers a request's body to resend it.
func newRehttp(base http.RoundTripper) http.RoundTripper {
	return rehttp.NewTransport(base,
		rehttp.RetryAll(
			rehttp.RetryMaxRetries(peerRetries),
			rehttp.RetryAny(
				rehttp.RetryTemporaryErr(),
				rehttp.RetryStatuses(http.StatusTooManyRequests),
				rehttp.RetryStatusInterval(500, 600),
			),
		),
		rehttp.ExpJitterDelay(time.Second, time.Minute),
	)
}

// TestPeersRetry checks that resty and rehttp, as set up here, retry what
// they are meant to: a 429 and a 503 are retried, with the same body and the
// caller's headers on every attempt, until the 200; a 404 is not retried.
// rehttp's first two waits are drawn from [0, 1 s) and [0, 2 s), so the test
// takes up to 3 s.
func TestPeersRetry(t *testing.T) {
	for _, c := range []goodputContender{{"resty", newResty}, {"rehttp", newRehttp}} {
		t.Run(c.name, func(t *testing.T) {
			for _, tc := range []struct {
				script   string
				attempts int
				reason   string
			}{
				{"429,503,200", 3, ""},
				{"404", 1, "status 404"},
			} {
				p := retrytest.NewServer(retrytest.Config{
					Family:          retrytest.Anthropic,
					Script:          retrytest.MustParseScript(tc.script),
					RequestIDHeader: requestIDHeader,
					MaxAttempts:     benchFuse,
				})
				base := cleanhttp.DefaultPooledTransport()
				reason := goodputRequest(context.Background(), &http.Client{Transport: c.wrap(base)}, p.URL+messagesPath, 7)
				base.CloseIdleConnections()
				p.Close()
				st := p.Stats()
				if reason != tc.reason {
					t.Errorf("script %s: outcome %q, want %q", tc.script, reason, tc.reason)
				}
				if st.Attempts != tc.attempts || st.Requests["7"].Attempts != tc.attempts || st.DistinctBodies() != 1 {
					t.Errorf("script %s: %d attempts (%d with the caller's request header), %d distinct bodies; want %d, %d, 1",
						tc.script, st.Attempts, st.Requests["7"].Attempts, st.DistinctBodies(), tc.attempts, tc.attempts)
				}
			}
		})
	}
}
