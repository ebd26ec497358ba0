package retryhttp

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// outcome is one attempt's result and the transport's one judgement of it.
// judge makes it as soon as the attempt returns; every later stage reads it
// instead of judging again: the upstream's state (pacing, holds, the breaker,
// the budget), the wait before the next attempt, the logs and hooks, the
// final error, and CheckResponse, which reports the verdict reached here.
type outcome struct {
	resp *http.Response
	err  error

	// retry: the outcome is transient, another attempt may succeed (the
	// classifier, x-should-retry, the body's word on a 403 or 429, then
	// the status or the error; never for a local error).
	retry bool
	// health is what the outcome says of the upstream (see health).
	health health
	// throttled: the server refused for rate (a 429, or a 403 judged a
	// rate limit).
	throttled bool
	// atCapacity: the upstream's adaptive limit took the refusal as "at
	// capacity", not as a failure (set by observe): the breaker is not
	// told of it, the retry budget is not drawn on, and the retry waits
	// for a slot in the limit's queue instead of a backoff.
	atCapacity bool

	// limits is the response's rate-limit state, read against the
	// upstream's clock; the zero value when it states none.
	limits RateLimits
	// stated is limits.Known(), kept so the quiet path (no rate-limit
	// headers) does not test every dimension of a zero value again.
	stated bool
	// retryAfter is the wait the response names (Retry-After,
	// retry-after-ms), as stated; 0 if none.
	retryAfter time.Duration
	// fineWait is set when retryAfter came from retry-after-ms: the time
	// to the server's next unit to the millisecond, not a whole second.
	fineWait bool
	// saidNow is set when the response names a wait of zero: Retry-After
	// 0, or a date no later than the server's now (a time cut down to its
	// second, which has begun already).
	saidNow bool
	// stream is set when the response is a stream whose first event was a
	// transient error: the outcome is judged as its status (see
	// WithFirstEventCheck), while resp stays the stream itself.
	stream *streamFailure

	// serverWait is how long the server asks the client to wait before
	// the next attempt: retryAfter, or for a rate limit the time until
	// its exhausted quota resets (a minute for a rate-limit 403 naming no
	// time); 0 if it asks nothing. Uncapped: the stages that act on it
	// cap it (holds and the breaker at WithMaxRetryAfter; plan stops).
	serverWait time.Duration
	// spreadByPace is set by the observe stage when the outcome was a
	// quota's refusal and the upstream's pace now spreads the retries by
	// itself (see upstream.spreadsRetries): a retry after a server wait
	// then takes its turn on the pace, and needs no jitter of its own to
	// keep the callers told the same time apart.
	spreadByPace bool
}

// waitKind names the wait before the retry that follows the outcome: the
// server's (Retry-After, a rate limit's reset) when it asked for one, else
// the backoff's.
func (o *outcome) waitKind() WaitKind {
	if o.serverWait > 0 {
		return WaitServer
	}
	return WaitBackoff
}

// status is the attempt's status as judged: a stream whose first event was
// a transient error stands for that error's status; 0 without a response.
func (o *outcome) status() int {
	switch {
	case o.stream != nil:
		return o.stream.status
	case o.resp != nil:
		return o.resp.StatusCode
	}
	return 0
}

// quotaRefusal reports a refusal for a quota: a 429, or a rate-limit 403
// whose reading shows a quota used up (GitHub's primary limit). A
// secondary limit's 403 (quota left, a limit on bursts or concurrency) is
// none: neither a window's learned end nor a pace answers for it.
func (o *outcome) quotaRefusal() bool {
	return o.throttled && (o.status() == http.StatusTooManyRequests || !exhaustedUntil(o.limits).IsZero())
}

// plain reports an answer below 400: it goes to the caller as it is, with
// no verdict for CheckResponse to keep.
func (o *outcome) plain() bool {
	return o.err == nil && o.resp.StatusCode < 400
}

// text names the outcome for logs and hooks: "503 Service Unavailable", the
// error, or the stream's first event.
func (o *outcome) text() string {
	if o.stream != nil {
		return o.stream.String()
	}
	return outcomeText(o.resp, o.err)
}

// health is what one attempt's outcome says about the upstream.
type health int

const (
	// noVerdict: the outcome says nothing of the upstream: the caller's
	// context ended, or the request failed here (a body that cannot be
	// read or replayed, a Content-Length that does not match the body, an
	// invalid request), or the failure is not one of load (a certificate,
	// a host that does not exist).
	noVerdict health = iota
	// serving: the upstream answered with a status that is not a
	// transient failure of its own (any 2xx-4xx, a 429 included, and the
	// final 5xx such as 501 and 505).
	serving
	// failing: a transient 5xx (500, 502, 503, 504, 529), an attempt
	// timeout or a connection error.
	failing
)

func (h health) String() string {
	switch h {
	case serving:
		return "serving"
	case failing:
		return "failing"
	}
	return "no verdict"
}

// judge makes the attempt's outcome in *o, which must be the zero outcome:
// one classification, one reading of the headers (scan: resp's, read once).
func (c *call) judge(o *outcome, a *admission, resp *http.Response, err error, scan *headerScan) {
	if err != nil {
		o.err = err
		c.judgeError(o)
		return
	}
	if c.policy.firstEventTimeout > 0 && scan.mayBeEventStream() && isEventStream(resp) {
		if f := c.checkFirstEvent(resp); f != nil {
			c.judgeStream(o, a, f, scan)
			return
		}
	}
	c.judgeResponse(o, a, resp, scan)
}

// quiet reports an answer that judge and observe would find plain and
// silent, and then counts it as they would: below 400 with no word on
// retrying (no X-Should-Retry, no classifier) and no rate-limit headers,
// not a stream to check, from a free upstream to an attempt that is not a
// probe, with no hook to tell. The outcome judge would make says nothing
// the call keeps: the response goes to the caller as it is. Most requests
// end here, without an outcome to build.
func (c *call) quiet(a *admission, resp *http.Response, scan *headerScan) bool {
	u := a.pass.u
	if resp.StatusCode >= 400 || scan.rateLimit || scan.shouldRetry || u == nil || a.pass.probe ||
		c.policy.classifier != nil || c.policy.firstEventTimeout > 0 && scan.mayBeEventStream() ||
		c.t.cfg.hooks.OnAttemptDone != nil || !u.free.Load() {
		return false
	}
	c.served(u, a)
	if a.pass.sent > 0 { // let go by the schedule: counted back (most were not)
		a.pass.answeredFree(c.t.cfg.clock.Now())
	}
	return true
}

// headerScan is what one pass over a response's header keys finds. The
// quiet path, a response with no rate-limit headers, then iterates the map
// once and looks nothing up in it.
type headerScan struct {
	rateLimit   bool     // a key of a rate-limit family (see isRateLimitKey)
	shouldRetry bool     // an X-Should-Retry key
	contentType []string // the Content-Type values
}

// scanHeader reads the keys of h once. Keys are matched in canonical form,
// as http.Header.Get and the parsers do.
//
// A small header (a minimal server's Content-Type, Content-Length and
// Date) is first accounted for by looking those keys up: when they are
// all the keys it has, it has none of the others, and no iteration is
// started (starting one costs more than a few lookups: it draws random
// numbers for its order).
func scanHeader(h http.Header) headerScan {
	var s headerScan
	if n := len(h); n == 0 {
		return s
	} else if n <= len(plainKeys)+1 {
		found := 0
		if v, ok := h["Content-Type"]; ok {
			if s.contentType, found = v, 1; n == 1 {
				return s // the commonest small header: no further lookup
			}
		}
		for _, k := range plainKeys {
			if _, ok := h[k]; ok {
				if found++; found == n {
					return s
				}
			}
		}
		s.contentType = nil // found again below
	}
	for k, v := range h {
		switch {
		case len(k) == len("Content-Type") && k == "Content-Type":
			s.contentType = v
		case len(k) == len("X-Should-Retry") && k == "X-Should-Retry":
			s.shouldRetry = true
		case !s.rateLimit && isRateLimitKey(k):
			s.rateLimit = true
		}
	}
	return s
}

// plainKeys are keys besides Content-Type that a minimal response has and
// that scanHeader has nothing to note of (see scanHeader).
var plainKeys = [...]string{"Content-Length", "Date"}

// mayBeEventStream is false when the Content-Type cannot make isEventStream
// true: its media type does not start with 't' once leading white space is
// skipped. A byte from 0x80 up may be Unicode white space, which
// strings.TrimSpace removes: the full test decides then.
func (s *headerScan) mayBeEventStream() bool {
	if len(s.contentType) == 0 {
		return false
	}
	ct := s.contentType[0]
	for i := 0; i < len(ct); i++ {
		switch b := ct[i]; b {
		case ' ', '\t', '\n', '\v', '\f', '\r':
			continue
		case 't', 'T':
			return true
		default:
			return b >= 0x80
		}
	}
	return false
}

// judgeStream judges a stream whose first event was a transient error as
// the status the error stands for: the classifier, the breaker, the pacing
// and the budget see that status, with the event's data as the body. The
// outcome's response is the stream itself, which is what the caller gets
// if retrying stops there.
func (c *call) judgeStream(o *outcome, a *admission, f *streamFailure, scan *headerScan) {
	as := *f.resp
	as.StatusCode, as.Status = f.status, statusText(f.status)
	as.Body = io.NopCloser(bytes.NewReader(f.data))
	as.ContentLength = int64(len(f.data))
	c.judgeResponse(o, a, &as, scan)
	o.resp, o.stream = f.resp, f
	c.lastStatus = f.status
}

// judgeResponse judges an attempt that got a response, into *o, the zero
// outcome. scan is resp's header keys read once.
func (c *call) judgeResponse(o *outcome, a *admission, resp *http.Response, scan *headerScan) {
	o.resp = resp
	if resp.StatusCode < 400 && c.policy.classifier == nil && !scan.shouldRetry {
		// Most answers: served and final (what classifyResponse and
		// statusHealth say of them), with nothing to ask of the policy.
		o.health = serving
	} else {
		o.health = statusHealth(resp.StatusCode)
		retry, _ := c.policy.classifyResponse(resp, scan.shouldRetry)
		o.retry = retry && !c.unsafeToRetry(resp, nil)
		// A 429, or a 403 judged a rate limit (GitHub's): the server
		// refused for rate, and its wait holds the whole upstream.
		o.throttled = resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusForbidden && retry
	}
	if u := a.pass.u; u != nil && (o.throttled || scan.rateLimit || a.pass.probe || !u.free.Load()) {
		now := c.t.cfg.clock.Now()
		o.limits = readRateLimits(resp.Header, now, u.serverNow(resp.Header, now))
		o.stated = o.limits.Known()
	}
	if resp.StatusCode >= 400 {
		o.readWaits(c.t.cfg.clock.Now())
	}
}

// judgeError judges an attempt that ended in an error.
//
// An error that is neither a network error nor one net/http makes (see
// networkError) comes from a RoundTripper of the caller's (httpmock's "no
// responder found" for a mistyped URL in a test, a middleware's own
// refusal): it is retried once, in case it was a hiccup, and never counts
// against the upstream, unless the classifier decides otherwise. A typo in
// a test costs one backoff, not the whole schedule.
func (c *call) judgeError(o *outcome) {
	err := o.err
	o.health = c.errorHealth(err)
	if localError(c.ctx, err) {
		return
	}
	retry, byUser := c.policy.classify(nil, err)
	o.retry = retry && !c.unsafeToRetry(nil, err)
	if !byUser && !networkError(err) {
		o.health = noVerdict
		c.foreignErrors++
		o.retry = o.retry && c.foreignErrors <= maxForeignRetries
	}
}

// maxForeignRetries is how often an error that is not a network error is
// retried (see judgeError).
const maxForeignRetries = 1

// networkError reports an error of the network or of net/http's client: a
// net.Error (refused, reset, timed out, DNS), a system call's errno, a TLS
// failure, an attempt timeout, or one of the untyped errors net/http and
// its HTTP/2 code return for a connection that broke ("net/http: ...",
// "http2: ...", an unexpected EOF). A *url.Error counts by what it wraps.
func networkError(err error) bool {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	var errno syscall.Errno
	var record tls.RecordHeaderError
	var alert tls.AlertError
	var cert *tls.CertificateVerificationError
	switch {
	case err == nil:
		return false
	case errors.As(err, &ne), errors.As(err, &errno), errors.As(err, &record), errors.As(err, &alert), errors.As(err, &cert):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, errAttemptTimeout), errors.Is(err, net.ErrClosed):
		return true
	}
	msg := err.Error()
	for _, prefix := range []string{"net/http: ", "http: ", "http2: ", "stream error: ", "connection error: ", "tls: ", "x509: "} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}

// errorHealth judges an attempt that ended in an error.
func (c *call) errorHealth(err error) health {
	if localError(c.ctx, err) || !retryableError(err) {
		return noVerdict
	}
	return failing // attempt timeouts, refused and reset connections, ...
}

// statusHealth judges an answer: only a transient 5xx is a failure of the
// upstream; a final one (501 Not Implemented, 505) is an answer it meant.
func statusHealth(code int) health {
	if code >= 500 && retryableStatus(code) {
		return failing
	}
	return serving
}

// readWaits reads the waits an error response names.
func (o *outcome) readWaits(now time.Time) {
	h := o.resp.Header
	if d, ok := ParseRetryAfter(h, now); ok {
		_, o.fineWait = parseRetryAfterMs(h.Get("Retry-After-Ms"))
		o.retryAfter, o.serverWait = d, d // the request's own wait: a floor
		o.saidNow = d == 0
		if !o.fineWait && o.resp.StatusCode == http.StatusTooManyRequests {
			o.retryAfter = finerWait(d, o.limits, now) // the upstream's hold
		}
		return
	}
	code := o.resp.StatusCode
	if code != http.StatusTooManyRequests && code != http.StatusForbidden {
		return
	}
	if until := exhaustedUntil(o.limits); until.After(now) {
		o.serverWait = until.Sub(now)
		return
	}
	if code == http.StatusForbidden && o.retry {
		o.serverWait = rateLimitFallbackWait
	}
}

// finerWait is how long a 429 holds the upstream, for the requests other
// than the refused one, whose own wait stays d (the server's wait is a
// floor for the retry): d, a Retry-After in whole seconds (or a date), or
// sooner when the same answer states finely when each quota it found
// exhausted has a unit again (OpenAI's durations) and d is no more than
// that time rounded up to the second: coarse evidence where the reset is
// exact. A bucket of one at 5 a second that refused an attempt 1 ms early
// said "Retry-After: 1" and "reset: 1ms"; holding every request for the
// second cost five units. (A 503's Retry-After, the breaker's hint, is
// left as it is: readWaits calls this for 429s only.)
func finerWait(d time.Duration, l RateLimits, now time.Time) time.Duration {
	for _, k := range dimensions {
		if q := l.Quota(k); q.Exhausted() && (q.Coarse || q.Reset.IsZero()) {
			return d // a reset no finer than the Retry-After, or none
		}
	}
	until := exhaustedUntil(l)
	w := until.Sub(now)
	if until.IsZero() || d > max(w, 0)+time.Second {
		// Nothing found exhausted, or not that time rounded up to the
		// second: the server holds for another reason (a penalty, a
		// daily quota), and every request waits it out.
		return d
	}
	return min(d, max(w, time.Millisecond))
}

// localError reports an attempt error that comes from the request or the
// caller, not from the upstream: such an error is final and says nothing of
// the upstream's health.
func localError(ctx context.Context, err error) bool {
	switch {
	case ctx.Err() != nil && !errors.Is(err, errAttemptTimeout):
		return true // the caller gave up
	case errors.Is(err, ErrInvalidRequest), errors.Is(err, ErrBodyNotReplayable),
		errors.Is(err, errNoOutcome), errors.Is(err, errBodyFailed):
		return true
	}
	return false
}

// errBodyFailed marks an attempt whose request body failed while being read:
// the request, not the upstream, is at fault, and sending it again would
// send other bytes.
var errBodyFailed = errors.New("retryhttp: request body failed while being read")

// localCause names the request's own fault in an error from the base
// transport, so that it is judged final: the body failed while it was being
// read, or net/http found its length different from ContentLength (sending
// it again cannot mend either).
func (c *call) localCause(err error) error {
	if cause := c.body.readFailure(); cause != nil && !errors.Is(err, errBodyFailed) {
		return fmt.Errorf("%w: %w", errBodyFailed, err)
	}
	if msg := err.Error(); strings.Contains(msg, "http: ContentLength=") && strings.Contains(msg, " with Body length ") {
		return fmt.Errorf("%w: the body's length is not its ContentLength: %w", ErrInvalidRequest, err)
	}
	return err
}
