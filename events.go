package retryhttp

import (
	"log/slog"
	"net/http"
	"time"
)

// Event describes one step of a request's life, for hooks. Its URL, error
// text and reason are redacted as Error's are: no credentials reach a hook.
type Event struct {
	Method     string
	URL        string        // redacted
	Attempt    int           // the attempt this event is about, from 1
	StatusCode int           // the attempt's status; 0 if none came back
	Err        error         // the attempt's error, its message redacted
	Wait       time.Duration // OnRetry: the wait before the next attempt
	Reason     string        // OnRetry: what failed; OnGiveUp: why retrying stopped
}

// Hooks are called synchronously as a request progresses, so they should be
// quick: count in your metrics, do not block. A nil hook is skipped.
type Hooks struct {
	OnAttempt func(Event) // before each attempt is sent
	OnRetry   func(Event) // when a retry is scheduled, with its wait
	// OnGiveUp is called when retrying stops early while the outcome is
	// still transient: retries exhausted, a server wait or a deadline too
	// far, the retry budget spent, or a request refused before its first
	// attempt (ErrRateLimited, ErrCircuitOpen). A final outcome (a 400, a
	// success) and the caller's own cancellation are not give-ups.
	OnGiveUp func(Event)
	// OnBreaker is called when an upstream's circuit breaker changes
	// state, after the change.
	OnBreaker func(BreakerEvent)
	// OnLimit is called when an upstream's adaptive concurrency limit (see
	// AdaptiveConcurrency) changes much: it is first learned, it moves by
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
func (c *call) event(resp *http.Response, err error, reason string) Event {
	creds := c.creds()
	e := Event{Method: methodOf(c.req), URL: creds.url(c.req.URL), Attempt: c.attempts, Reason: creds.text(reason)}
	if resp != nil {
		e.StatusCode = resp.StatusCode
	}
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
		cfg.hooks.OnAttempt(c.event(nil, nil, ""))
	}
	if cfg.logger != nil && cfg.logger.Enabled(c.ctx, slog.LevelDebug) {
		cfg.logger.LogAttrs(c.ctx, slog.LevelDebug, "retryhttp: attempt",
			slog.String("method", methodOf(c.req)), slog.String("url", c.creds().url(c.req.URL)),
			slog.Int("attempt", c.attempts))
	}
}

func (c *call) logRetry(resp *http.Response, err error, wait time.Duration) {
	cfg := &c.t.cfg
	if cfg.hooks.OnRetry == nil && cfg.logger == nil {
		return
	}
	e := c.event(resp, err, outcomeText(resp, err))
	e.Wait = wait
	if cfg.hooks.OnRetry != nil {
		cfg.hooks.OnRetry(e)
	}
	c.log(slog.LevelInfo, "retryhttp: retrying", e)
}

func (c *call) logGiveUp(resp *http.Response, err error, why string) {
	cfg := &c.t.cfg
	if cfg.hooks.OnGiveUp == nil && cfg.logger == nil {
		return
	}
	e := c.event(resp, err, why)
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
