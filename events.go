package retryhttp

import (
	"context"
	"log/slog"
	"net/http"
	"time"
)

// Event describes one step of a request's life, for hooks. Its URL, error
// text and reason are redacted as [Error]'s are: no credentials reach a hook.
//
// Durations (Wait, Duration) are measured on the transport's [Clock].
type Event struct {
	// Context is the request's context: a tracer finds the caller's span
	// in it, and a hook can tell the requests of one caller apart.
	Context context.Context
	// Key names the upstream, as [Stats] does (credentials fingerprinted).
	Key        string
	Method     string
	URL        string // redacted
	Attempt    int    // the attempt this event is about, from 1
	StatusCode int    // the attempt's status; 0 if none came back; for a stream whose first event was a transient error, the status it stands for (see WithFirstEventCheck)
	Err        error  // the attempt's error, its message redacted
	// Wait is, for OnRetry, the wait before the next attempt; for OnAttempt,
	// how long this attempt waited to be admitted (0: it did not wait);
	// for OnGiveUp of a request refused before it was sent ([ErrRateLimited],
	// [ErrCircuitOpen]), how long it waited before it was refused.
	Wait time.Duration
	// [WaitKind] says what Wait was for: [WaitBackoff] or [WaitServer] on
	// OnRetry; on OnAttempt and OnGiveUp, what held the attempt back the
	// longest ([WaitHold], [WaitPace], [WaitProbe], [WaitLimit], [WaitBreaker],
	// [WaitConcurrency]), or [WaitNone].
	WaitKind WaitKind
	// Duration is, for OnAttemptDone, how long the attempt took: from the
	// moment it was handed to the base transport until its response
	// headers or its error came back.
	Duration time.Duration
	// Retryable is, for OnAttemptDone, the transport's verdict on the
	// attempt: its outcome is transient, and another attempt may succeed
	// (whether one is made is for the policy: OnRetry or OnGiveUp follows).
	Retryable bool
	// Stop is, for OnGiveUp, why retrying stopped, as a sentinel for
	// [errors.Is]: [ErrRetriesExhausted], [ErrServerWaitTooLong], [ErrPastDeadline],
	// [ErrRetryBudgetSpent], [ErrBodyNotReplayable], [ErrRateLimited] or
	// [ErrCircuitOpen]. Reason says the same in words, with the figures.
	Stop error
	// Reason is, for OnRetry and OnAttemptDone, the attempt's outcome in
	// words ("503 Service Unavailable", or the error); for OnGiveUp, why
	// retrying stopped.
	Reason string
}

// WaitKind names what a request waited for. Its values are few and fixed,
// fit for a metric's attribute.
type WaitKind string

const (
	// WaitNone: the attempt did not wait.
	WaitNone WaitKind = ""
	// WaitBackoff: the backoff schedule's wait between attempts.
	WaitBackoff WaitKind = "backoff"
	// WaitServer: a wait between attempts that the server asked for
	// (Retry-After, retry-after-ms, the reset of an exhausted rate limit).
	WaitServer WaitKind = "server"
	// WaitHold: the upstream was held by an earlier 429 or a used-up quota.
	WaitHold WaitKind = "hold"
	// WaitPace: the attempt waited for its paced turn (the rate the
	// upstream allows).
	WaitPace WaitKind = "pace"
	// WaitProbe: the attempt queued behind the probe that slow start sends
	// first to an upstream that is new or back from a hold.
	WaitProbe WaitKind = "probe"
	// WaitLimit: the client-side limits ([WithRateLimit], a shared quota)
	// had no room yet.
	WaitLimit WaitKind = "limit"
	// WaitBreaker: the upstream's circuit breaker was open or probing.
	WaitBreaker WaitKind = "breaker"
	// WaitConcurrency: every [WithMaxConcurrency] slot was taken.
	WaitConcurrency WaitKind = "concurrency"
)

// Hooks are called synchronously as a request progresses, so they should be
// quick: count in your metrics, do not block. A nil hook is skipped.
type Hooks struct {
	// OnAttempt is called before each attempt is sent, once it has been
	// admitted; Wait and [WaitKind] say how long it waited for that, and why.
	OnAttempt func(Event)
	// OnAttemptDone is called after each attempt sent, once its response
	// headers or its error came back and the transport judged it: status or
	// error, Duration, Retryable.
	OnAttemptDone func(Event)
	OnRetry       func(Event) // when a retry is scheduled, with its wait and WaitKind
	// OnGiveUp is called when retrying stops early while the outcome is
	// still transient: retries exhausted, a server wait or a deadline too
	// far, the retry budget spent, or a request refused before its first
	// attempt ([ErrRateLimited], [ErrCircuitOpen]). A final outcome (a 400, a
	// success) and the caller's own cancellation are not give-ups.
	OnGiveUp func(Event)
	// OnBreaker is called when an upstream's circuit breaker changes
	// state, after the change.
	OnBreaker func(BreakerEvent)
	// OnLimit is called when an upstream's adaptive concurrency limit (see
	// [AdaptiveConcurrency]) changes much: it is first learned, it moves by
	// a quarter or more since the last call, or it is dropped.
	OnLimit func(LimitEvent)
}

// LimitEvent is a large change of an upstream's adaptive concurrency limit.
type LimitEvent struct {
	Key      string // the upstream, as Stats names it
	From, To int    // the limit before and after; 0: no limit
	Reason   string // what moved it: "refused", "latency rose", "grew while accepted", ...
}

// BreakerEvent is a change of an upstream's circuit breaker.
type BreakerEvent struct {
	Key      string // the upstream, as Stats names it
	From, To BreakerState
}

// WithHooks installs hooks for metrics: count attempts, retries and give-ups.
func WithHooks(h Hooks) Option {
	return Option{func(c *config) { c.hooks = h }}
}

// event describes the call's last attempt; reason is redacted for it.
func (c *call) event(status int, err error, reason string) Event {
	creds := c.creds()
	if c.keyName == "" {
		c.keyName = c.key.String() // once: a WithKeyFunc key is hashed
	}
	e := Event{Context: c.ctx, Key: c.keyName, Method: methodOf(c.req), URL: creds.url(c.req.URL), Attempt: c.attempts, Reason: creds.text(reason)}
	e.StatusCode = status
	if err != nil {
		e.Err = redactedError{err, creds}
	}
	return e
}

// creds are the credentials of the caller's request, to keep out of what
// is written about it. They are gathered only when something is written.
func (c *call) creds() *credentials { return credentialsOf(c.req) }

func (c *call) logAttempt() {
	cfg := &c.t.cfg
	if cfg.hooks.OnAttempt != nil {
		e := c.event(0, nil, "")
		e.Wait, e.WaitKind = c.admitted.total, c.admitted.kind
		cfg.hooks.OnAttempt(e)
	}
	if cfg.logger != nil && cfg.logger.Enabled(c.ctx, slog.LevelDebug) {
		cfg.logger.LogAttrs(c.ctx, slog.LevelDebug, "retryhttp: attempt",
			slog.String("method", methodOf(c.req)), slog.String("url", c.creds().url(c.req.URL)),
			slog.Int("attempt", c.attempts))
	}
}

// logAttemptDone calls OnAttemptDone with the attempt's outcome, if it is
// set; send noted in c.sentAt when the attempt was handed to the base
// transport.
func (c *call) logAttemptDone(o *outcome) {
	h := c.t.cfg.hooks.OnAttemptDone
	if h == nil {
		return
	}
	e := c.event(o.status(), o.err, o.text())
	e.Duration = c.t.cfg.clock.Now().Sub(c.sentAt)
	e.Retryable = o.retry
	h(e)
}

func (c *call) logRetry(o *outcome, wait time.Duration) {
	cfg := &c.t.cfg
	if cfg.hooks.OnRetry == nil && cfg.logger == nil {
		return
	}
	e := c.event(o.status(), o.err, o.text())
	e.Wait, e.WaitKind = wait, o.waitKind()
	if cfg.hooks.OnRetry != nil {
		cfg.hooks.OnRetry(e)
	}
	c.log(slog.LevelInfo, "retryhttp: retrying", e)
}

// logGiveUp reports that retrying stopped early; stop is the sentinel
// that says why. refused: the attempt was refused before it was sent, after
// the wait to be admitted that the event reports.
func (c *call) logGiveUp(status int, err error, stop error, why string, refused bool) {
	cfg := &c.t.cfg
	if cfg.hooks.OnGiveUp == nil && cfg.logger == nil {
		return
	}
	e := c.event(status, err, why)
	e.Stop = stop
	if refused {
		e.Wait, e.WaitKind = c.admitted.total, c.admitted.kind
	}
	if cfg.hooks.OnGiveUp != nil {
		cfg.hooks.OnGiveUp(e)
	}
	c.log(slog.LevelWarn, "retryhttp: giving up", e)
}

func (c *call) log(level slog.Level, msg string, e Event) {
	l := c.t.cfg.logger
	if l == nil || !l.Enabled(c.ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("method", e.Method), slog.String("url", e.URL),
		slog.Int("attempt", e.Attempt),
	}
	if e.StatusCode != 0 {
		attrs = append(attrs, slog.Int("status", e.StatusCode))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	if e.Wait > 0 {
		attrs = append(attrs, slog.Duration("wait", e.Wait))
	}
	attrs = append(attrs, slog.String("reason", e.Reason))
	l.LogAttrs(c.ctx, level, msg, attrs...)
}

// outcomeText names an attempt's outcome for logs: "503 Service
// Unavailable" or the error's text, which event redacts.
func outcomeText(resp *http.Response, err error) string {
	if err != nil {
		return err.Error()
	}
	if resp == nil {
		return ""
	}
	return statusText(resp.StatusCode)
}
