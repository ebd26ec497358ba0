package otelretry

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/retryhttp/retryhttp"
)

// WaitEventName is the name of the logical span's events that record a
// wait: before an attempt was admitted (a hold, the pace, the breaker, ...)
// or between attempts (backoff, a server's Retry-After).
const WaitEventName = "retryhttp.wait"

// hooks are the retryhttp hooks that feed the spans and the metrics, each
// followed by the caller's own.
func (t *Transport) hooks() retryhttp.Hooks {
	u := t.user
	return retryhttp.Hooks{
		OnAttempt: func(e retryhttp.Event) {
			t.onAttempt(e)
			if u.OnAttempt != nil {
				u.OnAttempt(e)
			}
		},
		OnAttemptDone: func(e retryhttp.Event) {
			t.m.attemptDone(e)
			if u.OnAttemptDone != nil {
				u.OnAttemptDone(e)
			}
		},
		OnRetry: func(e retryhttp.Event) {
			t.onRetry(e)
			if u.OnRetry != nil {
				u.OnRetry(e)
			}
		},
		OnGiveUp: func(e retryhttp.Event) {
			t.onGiveUp(e)
			if u.OnGiveUp != nil {
				u.OnGiveUp(e)
			}
		},
		OnBreaker: func(e retryhttp.BreakerEvent) {
			t.m.breaker(e)
			if u.OnBreaker != nil {
				u.OnBreaker(e)
			}
		},
	}
}

// onAttempt notes the attempt for its client span, and records the wait to
// be admitted, if any, on the logical span.
func (t *Transport) onAttempt(e retryhttp.Event) {
	t.m.attempt(e)
	c := callOf(e.Context)
	if c == nil {
		return
	}
	c.attempt, c.key = e.Attempt, e.Key
	if c.url == "" {
		c.url = e.URL
	}
	if e.WaitKind != retryhttp.WaitNone {
		c.waitEvent(time.Now().Add(-e.Wait), e.WaitKind, e.Wait, e.Attempt, "")
	}
}

func (t *Transport) onRetry(e retryhttp.Event) {
	t.m.retry(e)
	if c := callOf(e.Context); c != nil {
		c.waitEvent(time.Now(), e.WaitKind, e.Wait, e.Attempt+1, e.Reason)
	}
}

func (t *Transport) onGiveUp(e retryhttp.Event) {
	t.m.giveUp(e)
	c := callOf(e.Context)
	if c == nil {
		return
	}
	c.stop, c.stopText, c.key = e.Stop, e.Reason, e.Key
	if c.url == "" {
		c.url = e.URL
	}
	if e.WaitKind != retryhttp.WaitNone {
		// A refusal after a wait: it goes on the span as the wait that was
		// cut short.
		c.waitEvent(time.Now().Add(-e.Wait), e.WaitKind, e.Wait, e.Attempt+1, e.Reason)
	}
}

// waitEvent adds a wait to the logical span, at the time it began (never
// before the span: the transport's clock may be a fake one).
func (c *call) waitEvent(at time.Time, kind retryhttp.WaitKind, d time.Duration, attempt int, reason string) {
	if !c.span.IsRecording() {
		return
	}
	if at.Before(c.start) {
		at = c.start
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, WaitKindKey.String(waitKind(kind)), WaitDurationKey.Float64(d.Seconds()), AttemptKey.Int(attempt))
	if reason != "" {
		attrs = append(attrs, WaitReasonKey.String(reason))
	}
	c.span.AddEvent(WaitEventName, trace.WithTimestamp(at), trace.WithAttributes(attrs...))
}
