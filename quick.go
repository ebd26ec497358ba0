package retryhttp

import (
	"net/http"
	"time"
)

// The quick path: most requests are a first attempt, admitted at once by a
// free upstream, that gets a plain answer (below 400, no rate-limit
// headers, no word on retrying; a stream whose first event, checked here,
// is no error). For a transport whose configuration asks
// nothing more of such a request (quickAllowed), RoundTrip sends it and
// checks the answer here, in a few lines, with no call to set up: the
// attempt loop's code stays out of the instruction cache. Anything else
// goes to the loop (roundTrip), which takes over an attempt sent here as
// its first.
//
// What the quick path does is what the loop does for such a request, in
// the same order: admit's fast path (admit), the pass-through attempt
// (send), the first-event check (judge), the quiet answer (quiet). Keep
// them in step.

// quickAllowed reports whether a transport configured as cfg, with slots
// for WithMaxConcurrency, may send requests on the quick path: nothing it
// is configured with needs the call's state on a first attempt. It
// mirrors the conditions the loop tests on the way to quiet: the default
// key (begin), no shared quota and no cap on concurrency (admit), the
// caller's request sent as it is, with no hook or log to tell of it
// (send, attemptRequest), and no classifier to ask (quiet).
func (cfg *config) quickAllowed(slots slots) bool {
	return cfg.keyFunc == nil && !cfg.keyByModel && cfg.quota == nil && slots == nil &&
		cfg.logger == nil && cfg.hooks.OnAttempt == nil && cfg.hooks.OnAttemptDone == nil &&
		!cfg.policy.idempotencyKey && cfg.policy.attemptTimeout == 0 && cfg.policy.classifier == nil
}

// quickUpstream returns the upstream req, a request without a body, may be
// sent to on the quick path, or nil when it must take the loop: req is not
// valid on its face as validateRequest's fast path sees it, or goes
// elsewhere than the upstream found last, or carries request options, or
// the upstream is not free or its breaker not closed.
//
// The upstream found last is a known host: comparing req's scheme and host
// with its key (which, with the default key, is just those) is both the
// validation of the host and the lookup of the upstream.
func (t *RetryTransport) quickUpstream(req *http.Request) *upstream {
	u := t.upstreams.last.Load()
	if u == nil || req.URL == nil {
		return nil
	}
	// One test a line: a single condition of them all made the compiler
	// build each result as a value before testing it. (RoundTrip sends
	// a request with a body to the loop before it gets here.)
	url := req.URL
	if url.Host != u.key.host || url.Scheme != u.key.scheme {
		return nil
	}
	if req.Host != "" && req.Host != url.Host {
		return nil
	}
	if !commonMethod(req.Method) {
		return nil
	}
	if requestOptions(req.Context()) != nil {
		return nil
	}
	if !u.free.Load() || !u.breaker.lets() {
		return nil
	}
	if len(req.Header) != 0 && validHeaders(req.Header) != nil {
		return nil
	}
	return u
}

// quickTrip sends req to u on the quick path, as the first attempt, holding
// tk, its slot in u's adaptive limit. An answer that is not plain goes to
// the loop, as does an error.
func (t *RetryTransport) quickTrip(req *http.Request, u *upstream, tk *limitTicket) (*http.Response, error) {
	if tk.sample {
		tk.sentAt = time.Now() // real time: see awaitLimit
	}
	u.stats.quick.Add(1) // the request and its first attempt, at once
	resp, err := t.cfg.base.RoundTrip(req)
	if err != nil || resp == nil {
		return t.takeOver(req, u, tk, resp, err, nil)
	}
	scan := scanHeader(resp.Header)
	if resp.StatusCode >= 400 || scan.rateLimit || scan.shouldRetry || !u.free.Load() {
		return t.takeOver(req, u, tk, resp, nil, &scan)
	}
	if pol := &t.cfg.policy; pol.firstEventTimeout > 0 && scan.mayBeEventStream() && isEventStream(resp) {
		// A stream that opened with an error goes to the loop, which
		// judges it (its check reads the same event again, from what
		// this one read); so does one whose upstream stopped being
		// free while the first event was awaited (a 429 to another
		// request), for the pace to count it, as the loop's observe
		// would have. (Its check waits once more for a first event
		// that this one gave up on: both are bounded by the timeout.)
		if peekFirstEvent(req.Context(), resp, pol.firstEventTimeout, pol.firstEventMax) != nil || !u.free.Load() {
			return t.takeOver(req, u, tk, resp, nil, &scan)
		}
	}
	if resp.Request == nil {
		resp.Request = req
	}
	if tk.held && resp.Body != nil && resp.Body != http.NoBody && resp.StatusCode != http.StatusSwitchingProtocols {
		// Most answers: wrapResponseBody and served in line, for a body
		// to read and the slot in the adaptive limit to release at its
		// end.
		resp.Body = &responseBody{rc: resp.Body, limit: u.limit, epoch: tk.epoch, state: bodyState(1, nil, u.limit)}
		if !u.limit.servedQuietly(tk) {
			t.learnLimit(u, tk, limitAccepted)
		}
		if !u.breaker.countSuccess(0) {
			t.success(u, 0)
		}
		return resp, nil
	}
	var l *concurrencyLimit
	if tk.held {
		l = u.limit
	}
	wrapResponseBody(resp, 1, nil, l, tk.epoch)
	t.served(u, tk, 0)
	return resp, nil
}

// takeOver hands the quick path's attempt to the loop: its answer was not
// plain (scan is its header, read once), or it failed (err, or neither a
// response nor an error). (Out of quickTrip: a firstAttempt on its stack
// would make every quick request zero it.)
//
//go:noinline
func (t *RetryTransport) takeOver(req *http.Request, u *upstream, tk *limitTicket, resp *http.Response, err error, scan *headerScan) (*http.Response, error) {
	f := firstAttempt{u: u, limit: *tk, resp: resp, err: err}
	if scan != nil {
		f.scan = *scan
	}
	return t.roundTrip(req, &f)
}

// firstAttempt is an attempt the quick path sent that the loop takes over.
type firstAttempt struct {
	u     *upstream
	limit limitTicket // its slot in u's adaptive limit
	resp  *http.Response
	err   error
	scan  headerScan // resp's header, read once; zero without a response
}

// resume makes f the call's first attempt, as admit and send would have
// made it, and returns what send would have: send's end, for an attempt
// that went out as the caller's request, with no timer, no
// WithMaxConcurrency slot and no booking on the client-side limits
// (quickAllowed, quickTrip).
func (c *call) resume(a *admission, f *firstAttempt) (*http.Response, error) {
	c.u, c.attempts = f.u, 1
	a.pass.u, a.quick, a.limit = f.u, true, f.limit
	resp, err := f.resp, f.err
	if err != nil || resp == nil {
		return nil, c.sendFailed(a, nil, nil, err)
	}
	return c.received(a, resp, c.req, nil), nil
}
