package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/retryhttp/retryhttp"
)

// kind is what an attempt ended with, as the client saw it. The chart and
// the table count attempts by kind.
type kind int

const (
	kindOK        kind = iota // a 2xx whose body arrived whole
	kindThrottled             // 429, or a 403 that says the rate limit is used up
	kind5xx                   // 500-599, 529 included
	kindNoAnswer              // no response (reset, timeout) or a body cut short
	kindOther                 // any other status (4xx that no policy retries)
	numKinds
)

// requestTrace is the life of one logical request: when it started and
// ended, each attempt it made, and how it ended. The recorder fills in the
// attempts; the sender fills in the rest.
type requestTrace struct {
	id int

	// mu guards the fields below: the recorder appends attempts on the
	// goroutine that sends, a run that is cut short finishes the trace on
	// another, and the summary reads it on a third.
	mu         sync.Mutex
	start, end time.Time
	attempts   []attempt
	sent       bool
	ok         bool
	reason     string // why it failed; "" when ok
}

// attempt is one try of a request, from when it went to the base transport
// until its response headers (or its error) came back.
type attempt struct {
	start, end time.Time
	kind       kind
	status     int // 0 when no response came back
}

// traceKey carries a *requestTrace in a request's context, so the recorder
// under any client (retryhttp or a hand-written loop) can find the request
// an attempt belongs to.
type traceKey struct{}

func withTrace(ctx context.Context, tr *requestTrace) context.Context {
	return context.WithValue(ctx, traceKey{}, tr)
}

// recorder is the base transport of every client in a run: it times each
// attempt and notes its outcome in the request's trace. Measuring below the
// retry layer, rather than through its hooks, gives the same numbers for
// retryhttp and for the hand-written loops.
type recorder struct {
	next http.RoundTripper
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	tr, _ := req.Context().Value(traceKey{}).(*requestTrace)
	start := time.Now()
	resp, err := r.next.RoundTrip(req)
	if tr != nil {
		a := attempt{start: start, end: time.Now(), kind: kindNoAnswer}
		if err == nil {
			a.status, a.kind = resp.StatusCode, kindOfResponse(resp)
		}
		tr.mu.Lock()
		tr.attempts = append(tr.attempts, a)
		tr.mu.Unlock()
	}
	return resp, err
}

// CloseIdleConnections forwards to the pooled transport, so a finished run
// leaves no connection behind.
func (r *recorder) CloseIdleConnections() {
	if c, ok := r.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// kindOfResponse sorts a response by status. A 403 counts as a rate limit
// only when it says so (GitHub's form), as retryhttp itself decides.
func kindOfResponse(resp *http.Response) kind {
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		return kindOK
	case s == http.StatusTooManyRequests,
		s == http.StatusForbidden && resp.Header.Get("X-Ratelimit-Remaining") == "0":
		return kindThrottled
	case s >= 500 && s <= 599:
		return kind5xx
	}
	return kindOther
}

// finish records how request tr ended, once the sender has returned resp
// and err and the caller has read the body. A body cut short turns the last
// attempt into one with no (whole) answer.
func (tr *requestTrace) finish(resp *http.Response, err, bodyErr error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.end = time.Now()
	switch {
	case err != nil:
		tr.reason = errorReason(err)
	case bodyErr != nil:
		tr.reason = "body cut short"
		if n := len(tr.attempts); n > 0 {
			tr.attempts[n-1].kind = kindNoAnswer
		}
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		tr.ok = true
	default:
		tr.reason = statusReason(resp.StatusCode)
	}
}

// errorReason names a transport error for the failure list.
func errorReason(err error) string {
	switch {
	case errors.Is(err, retryhttp.ErrCircuitOpen):
		return "circuit open (not sent)"
	case errors.Is(err, retryhttp.ErrRateLimited):
		return "local rate limit (not sent)"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline exceeded"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	}
	return "network error"
}

// statusReason names a final status for the failure list.
func statusReason(status int) string {
	if status == retryhttp.StatusOverloaded {
		return "529 Overloaded"
	}
	if text := http.StatusText(status); text != "" {
		return strconv.Itoa(status) + " " + text
	}
	return strconv.Itoa(status)
}

// waited is how long the request spent waiting in the client: its life
// outside its attempts. That is the wait before its first attempt (pacing,
// a breaker), the waits between attempts (backoff, Retry-After) and, for a
// request that ended while waiting (its deadline), that last wait. Reading
// a body is counted too, which on loopback is negligible. The caller holds
// tr.mu.
func (tr *requestTrace) waited() time.Duration {
	var w time.Duration
	for _, iv := range tr.waits() {
		w += iv.to.Sub(iv.from)
	}
	return w
}

// interval is a span of real time.
type interval struct{ from, to time.Time }

// waits lists the spans the request spent waiting in the client. The
// caller holds tr.mu.
func (tr *requestTrace) waits() []interval {
	if !tr.sent {
		return nil
	}
	var out []interval
	prev := tr.start
	for _, a := range tr.attempts {
		if a.start.After(prev) {
			out = append(out, interval{prev, a.start})
		}
		prev = a.end
	}
	if tr.end.After(prev) {
		out = append(out, interval{prev, tr.end})
	}
	return out
}
