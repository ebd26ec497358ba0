package retryhttp

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-cleanhttp"
)

// RetryTransport is an [http.RoundTripper] that retries transient failures of
// the RoundTripper it wraps. It is safe for concurrent use; make one with [New]
// and share it, as you would an [http.Transport].
//
// The zero value is ready to use, as New(nil) with the defaults, set up on
// first use: &http.Client{Transport: &retryhttp.RetryTransport{}} works. A
// RetryTransport must not be copied after first use.
type RetryTransport struct {
	setup     sync.Once
	cfg       config
	upstreams upstreamTable
	slots     slots
}

// New returns a [RetryTransport] that sends requests through base, configured by
// opts. A nil base gets a pooled transport from go-cleanhttp (its own
// connection pool, no shared global state).
func New(base http.RoundTripper, opts ...Option) *RetryTransport {
	t := &RetryTransport{}
	t.setup.Do(func() { t.configure(base, opts) })
	return t
}

// configure sets the transport up: the defaults, then opts.
func (t *RetryTransport) configure(base http.RoundTripper, opts []Option) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&cfg)
		}
	}
	if base == nil {
		base = cleanhttp.DefaultPooledTransport()
	}
	cfg.base = base
	t.cfg, t.slots = cfg, newSlots(cfg.maxConcurrency)
	t.cfg.quick = t.cfg.quickAllowed(t.slots)
}

// ready sets up a zero RetryTransport with the defaults on its first use.
func (t *RetryTransport) ready() {
	t.setup.Do(t.configureDefaults) // a method value, not a closure: ready inlines
}

// configureDefaults is configure for a zero RetryTransport.
func (t *RetryTransport) configureDefaults() { t.configure(nil, nil) }

// CloseIdleConnections closes the idle connections of the base transport, if
// it has that method (as [http.Transport] does). [http.Client.CloseIdleConnections]
// calls it.
func (t *RetryTransport) CloseIdleConnections() {
	t.ready()
	if c, ok := t.cfg.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip sends req, retrying transient failures as the policy allows.
//
// A request passes these stages on every attempt: admit (holds, pacing,
// client-side limits, the circuit breaker, concurrency) → send (a fresh copy
// of the body) → observe (what the headers and the outcome say of the
// upstream) → classify (transient or final) → wait (backoff or the server's
// wait, within the caller's deadline and the upstream's retry budget), or
// return. It returns the last response with its body unread when retries
// end on a response, and an [*Error] when they end on a transport error. The
// caller's request is never modified.
func (t *RetryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.ready()
	if t.cfg.quick && req != nil && (req.Body == nil || req.Body == http.NoBody) { // a body takes the loop
		var tk limitTicket
		if u := t.quickUpstream(req); u != nil && u.limit.takeFast(&tk) {
			return t.quickTrip(req, u, &tk)
		}
	}
	return t.roundTrip(req, nil)
}

// roundTrip is RoundTrip past the quick path: the attempt loop. first is
// the quick path's first attempt, sent already, when it was not a plain
// answer; nil when the loop sends the first attempt itself.
func (t *RetryTransport) roundTrip(req *http.Request, first *firstAttempt) (*http.Response, error) {
	var c call        // on the stack: the happy path allocates only the response wrapper
	if first == nil { // else the quick path found it valid
		if err := validateRequest(req, t.upstreams.lastHost()); err != nil {
			return nil, invalid(req, err)
		}
	}
	t.begin(&c, req)
	if c.body.orig != nil { // nothing to close without a body (most GETs)
		defer c.body.close()
	}
	// a is reused by every attempt and passed by pointer, as is the
	// outcome: some 300 bytes, and copying it between the stages was a
	// measurable share of the per-request cost.
	var a admission
	if first != nil {
		resp, err := c.resume(&a, first)
		if err == nil && c.quiet(&a, resp, &first.scan) {
			return resp, nil
		}
		if resp, err, again := c.decide(&a, resp, err, &first.scan); !again {
			return resp, err
		}
	}
	for {
		if err := c.admit(&a); err != nil {
			return c.refused(err)
		}
		resp, err := c.send(&a)
		var scan headerScan
		if err == nil {
			scan = scanHeader(resp.Header)
			if c.quiet(&a, resp, &scan) {
				return resp, nil // most requests: a plain answer, nothing to learn
			}
		}
		if resp, err, again := c.decide(&a, resp, err, &scan); !again {
			return resp, err
		}
	}
}

// decide judges an attempt that was not a quiet answer (scan is resp's
// header, read once), tells the upstream what it says, and either returns
// what RoundTrip returns (again false) or waits for the next attempt
// (again true).
func (c *call) decide(a *admission, resp *http.Response, err error, scan *headerScan) (_ *http.Response, _ error, again bool) {
	var o outcome
	c.judge(&o, a, resp, err, scan)
	c.observe(a, &o)
	if c.t.cfg.hooks.OnAttemptDone != nil {
		c.logAttemptDone(&o)
	}
	if !o.retry {
		if o.plain() { // most requests: a 2xx or 3xx, no verdict to keep
			return o.resp, nil, false
		}
		resp, err := c.finish(&o, nil)
		return resp, err, false
	}
	if c.ctx.Err() != nil {
		resp, err := c.canceled(o.resp, o.err)
		return resp, err, false
	}
	wait, stop := c.plan(&o)
	if stop != nil {
		resp, err := c.finish(&o, stop)
		return resp, err, false
	}
	c.logRetry(&o, wait)
	discard(o.resp)
	if err := c.sleep(wait, nil); err != nil {
		resp, err := c.canceled(nil, err)
		return resp, err, false
	}
	return nil, nil, true
}

// call is the state of one RoundTrip: the caller's request, the policy that
// applies to it, its replayable body and what its attempts have done so far.
type call struct {
	t          *RetryTransport
	key        upstreamKey
	keyName    string    // key.String(), once an event needed it
	u          *upstream // the upstream's state, once admit has looked it up
	req        *http.Request
	ctx        context.Context
	policy     *policy
	body       requestBody
	header     http.Header // req.Header plus stamped headers; nil: req.Header as is
	attempts   int
	lastStatus int // the last status seen, for errors after it
	prevWait   time.Duration
	retryAt    time.Time // set when retrying stops early for lack of time
	// foreignErrors counts the attempts that ended in an error that is not
	// a network error (see judgeError).
	foreignErrors int
	// admitted is what the attempt being admitted waited for, and sentAt
	// when it was sent: measured only for hooks (see timed).
	admitted admitWait
	sentAt   time.Time

	estimated           bool // inTokens and outTokens hold the estimate
	inTokens, outTokens int
}

// begin prepares the call for req, which validateRequest found valid; c
// must be the zero call.
func (t *RetryTransport) begin(c *call, req *http.Request) {
	// Field by field: c is already zero, and a composite literal would
	// build the whole call aside and copy it over.
	c.t, c.req, c.ctx, c.policy = t, req, req.Context(), &t.cfg.policy
	if t.cfg.keyFunc == nil && !t.cfg.keyByModel {
		c.key.scheme, c.key.host = req.URL.Scheme, req.URL.Host // keyOf's default, in line
	} else {
		t.keyOf(req, &c.key)
	}
	if opts := requestOptions(c.ctx); opts != nil {
		c.policy = t.requestPolicy(opts)
	}
	if req.Body != nil && req.Body != http.NoBody { // else c.body stays the zero one: no body
		c.body = newRequestBody(req, c.policy.maxBufferedBody)
	}
	if c.policy.idempotencyKey { // else no header to stamp, none to copy
		c.header = c.policy.stampHeaders(req)
	}
}

// invalid refuses a request that can never succeed (err says why),
// closing its body as RoundTrip must. (Out of begin, which every request
// runs: cold code in a hot function spreads it over more of the
// instruction cache.)
func invalid(req *http.Request, err error) error {
	if req != nil && req.Body != nil {
		req.Body.Close()
	}
	creds := credentialsOf(req)
	return &Error{Err: err, Method: methodOf(req), URL: creds.url(urlOf(req)), creds: creds}
}

// send makes one attempt. The caller's request goes out untouched when
// nothing about it needs to change; otherwise a shallow copy carries this
// attempt's body, headers and context.
//
// An attempt counts (Error.Attempts, Stats, OnAttempt) once its request is
// built: a body that cannot be made again (GetBody failed) sends nothing.
func (c *call) send(a *admission) (*http.Response, error) {
	if c.t.cfg.hooks.OnAttemptDone != nil {
		// Before the attempt's timer is armed: the attempt's time
		// runs from there.
		c.sentAt = c.t.cfg.clock.Now()
	}
	out, timeout, err := c.attemptRequest()
	if err != nil {
		if a.quick {
			a.pass.u.stats.requests.Add(1) // a request, but no attempt
		}
		c.t.release(a)
		return nil, err
	}
	c.attempts++
	switch {
	case a.quick:
		a.pass.u.stats.quick.Add(1) // the request and its first attempt, at once
	case a.pass.u != nil:
		a.pass.u.stats.attempts.Add(1)
	}
	if cfg := &c.t.cfg; cfg.hooks.OnAttempt != nil || cfg.logger != nil {
		c.logAttempt()
	}
	resp, err := c.t.cfg.base.RoundTrip(out)
	var release func()
	if timeout != nil || a.hasSlot {
		release = c.t.releaser(a, timeout.headersArrived())
	}
	if err != nil || resp == nil {
		return nil, c.sendFailed(a, timeout, release, err)
	}
	return c.received(a, resp, out, release), nil
}

// received ends an attempt that got resp, sent as out (the caller's request
// or a copy of it): the response is the caller's, its status the last seen,
// its usage metered and its body tracked, releasing at its end what the
// attempt holds (release, and its adaptive limit's slot).
func (c *call) received(a *admission, resp *http.Response, out *http.Request, release func()) *http.Response {
	if resp.Request == nil || resp.Request == out {
		resp.Request = c.req // the caller's request, not our per-attempt copy
	}
	c.lastStatus = resp.StatusCode
	if a.pass.settle != nil {
		meterUsage(resp, a.pass.settle)
	}
	wrapResponseBody(resp, c.attempts, release, a.limitSlot(), a.limit.epoch)
	return resp
}

// sendFailed ends an attempt that got no response: err, or errNoOutcome
// for a base transport that returned neither. It releases what the attempt
// holds and returns the error to judge.
func (c *call) sendFailed(a *admission, timeout *attemptTimer, release func(), err error) error {
	if err == nil {
		err = errNoOutcome
	}
	err = c.localCause(timeout.explain(c.ctx, err))
	if release != nil {
		release()
	}
	if l := a.limitSlot(); l != nil {
		l.release(a.limit.epoch)
	}
	return err
}

// attemptRequest builds the request for this attempt.
func (c *call) attemptRequest() (*http.Request, *attemptTimer, error) {
	first := c.attempts == 0
	if first && c.body.passThrough() && c.header == nil && c.policy.attemptTimeout == 0 {
		if c.body.present() {
			c.body.next() // the caller's body goes out as it is
		}
		return c.req, nil, nil
	}
	var body io.ReadCloser
	var getBody func() (io.ReadCloser, error)
	var length int64
	if c.body.present() {
		var err error
		if body, getBody, length, err = c.body.next(); err != nil {
			return nil, nil, err
		}
	}
	ctx, timeout := c.ctx, (*attemptTimer)(nil)
	if c.policy.attemptTimeout > 0 {
		ctx, timeout = startAttemptTimer(c.ctx, c.t.cfg.clock, c.policy.attemptTimeout)
	}
	out := c.req.WithContext(ctx)
	if c.header != nil {
		out.Header = c.header
	}
	if c.body.present() {
		out.Body, out.GetBody, out.ContentLength = body, getBody, length
	}
	return out, timeout, nil
}

// plan decides the wait before the next attempt, or why there is none.
func (c *call) plan(o *outcome) (time.Duration, *stopReason) {
	if c.attempts > c.policy.maxRetries {
		return 0, &stopReason{ErrRetriesExhausted, "retries exhausted"}
	}
	if err := c.body.replayError(); err != nil {
		return 0, &stopReason{ErrBodyNotReplayable, strings.TrimPrefix(err.Error(), "retryhttp: ")}
	}
	now := c.t.cfg.clock.Now()
	if o.serverWait > c.policy.maxRetryAfter {
		c.retryAt = now.Add(o.serverWait)
		return 0, &stopReason{ErrServerWaitTooLong, "server asked to wait " + o.serverWait.String() + ", longer than the limit " + c.policy.maxRetryAfter.String()}
	}
	wait := c.policy.nextWait(o.serverWait, o.spreadByPace, c.attempts, c.prevWait)
	if o.atCapacity && o.serverWait == 0 {
		// Refused at capacity: the retry waits in the adaptive limit's
		// queue for a slot, not through a backoff.
		wait = 0
	}
	if deadline, ok := c.ctx.Deadline(); ok {
		start := later(now.Add(wait), c.paceTurn(o, now))
		if start.After(deadline) {
			c.retryAt = start
			return 0, &stopReason{ErrPastDeadline, "the next attempt (in " + start.Sub(now).String() + ") would start after the request deadline"}
		}
	}
	if !c.spendRetry(now, o) {
		return 0, &stopReason{ErrRetryBudgetSpent, "the retry budget for this upstream is spent"}
	}
	if c.u != nil {
		c.u.stats.retries.Add(1)
	}
	c.prevWait = wait
	return wait, nil
}

// paceTurn is when a retry the server said may go now (o.saidNow) would
// take its turn on the pace that spaces it (o.spreadByPace); zero for any
// other. Its wait is the pace's, not the server's: plan checks the
// deadline against that turn, so the caller gets the 429 at once, as a
// backoff past the deadline gives it, not an error after waiting the
// deadline out.
func (c *call) paceTurn(o *outcome, now time.Time) time.Time {
	if !o.saidNow || !o.spreadByPace || c.u == nil {
		return time.Time{}
	}
	return c.u.nextTurn(now)
}

// finish returns the last outcome: the response itself, or an *Error for a
// transport error. stop is why retrying stopped early, if it did; the
// verdict goes with a response so CheckResponse reports it.
func (c *call) finish(o *outcome, stop *stopReason) (*http.Response, error) {
	var why string
	if stop != nil {
		why = stop.text
		c.logGiveUp(o.status(), o.err, stop.err, why, false)
	}
	if o.err == nil {
		if stop == nil && o.plain() {
			return o.resp, nil // no verdict to keep
		}
		if b := trackedBody(o.resp); b != nil {
			v := &verdict{retryable: o.retry, stopReason: why, retryAt: c.retryAt, decidedAt: c.t.cfg.clock.Now()}
			if stop != nil {
				v.stop = stop.err
			}
			b.verdict = v
		}
		return o.resp, nil
	}
	err := o.err
	if stop != nil {
		err = &stopError{reason: stop.err, cause: o.err}
	}
	e := c.transportError(err, why)
	e.Retryable = o.retry
	return nil, e
}

// refused ends a call that was not admitted: an *Error from the admit stage
// (ErrRateLimited), or the context's error while waiting to be admitted.
func (c *call) refused(err error) (*http.Response, error) {
	if e, ok := err.(*Error); ok {
		c.logGiveUp(0, err, e.Err, e.StopReason, true)
		return nil, e
	}
	return c.canceled(nil, err)
}

// canceled ends the call because the caller's context is done. The error
// matches ctx.Err() with errors.Is.
func (c *call) canceled(resp *http.Response, err error) (*http.Response, error) {
	discard(resp)
	cause := c.ctx.Err()
	if err != nil && err != cause {
		cause = joinErrors(cause, err)
	}
	e := c.transportError(cause, "the request context ended")
	e.Retryable = false
	return nil, e
}
