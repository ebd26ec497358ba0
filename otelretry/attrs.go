package otelretry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"

	"go.opentelemetry.io/otel/attribute"

	"github.com/retryhttp/retryhttp"
)

// The attributes this package adds. Every value is from a short fixed list,
// except the upstream, which is Stats' Key: "scheme://host[:port]" or a
// fingerprint of a WithKeyFunc value, never a path, a query or a credential.
const (
	// UpstreamKey is the upstream, as retryhttp's Stats names it.
	UpstreamKey = attribute.Key("retryhttp.upstream")
	// OutcomeKey is an attempt's outcome: success, transient or final.
	OutcomeKey = attribute.Key("retryhttp.outcome")
	// ReasonKey is what an attempt's outcome was, as a category (see reasonOf).
	ReasonKey = attribute.Key("retryhttp.reason")
	// WaitKindKey is what a wait was for: retryhttp.WaitKind, or "none".
	WaitKindKey = attribute.Key("retryhttp.wait.kind")
	// WaitDurationKey is a wait's length in seconds (span events).
	WaitDurationKey = attribute.Key("retryhttp.wait.duration")
	// WaitReasonKey is, for a wait between attempts, the outcome that led
	// to it ("503 Service Unavailable"), redacted (span events).
	WaitReasonKey = attribute.Key("retryhttp.wait.reason")
	// AttemptKey is the attempt a wait came before, from 1 (span events).
	AttemptKey = attribute.Key("retryhttp.attempt")
	// AttemptsKey is how many attempts a request made (logical span).
	AttemptsKey = attribute.Key("retryhttp.attempts")
	// VerdictKey is how a request ended: success, failure, gave_up or
	// canceled.
	VerdictKey = attribute.Key("retryhttp.verdict")
	// StopReasonKey is why retrying stopped early (see stopReason).
	StopReasonKey = attribute.Key("retryhttp.stop_reason")
	// BreakerStateKey is a circuit breaker's state: closed, half_open, open.
	BreakerStateKey = attribute.Key("retryhttp.breaker.state")
	// PacingKey is where an upstream's pace comes from: off, stated,
	// measured or observed (Stats.Pacing).
	PacingKey = attribute.Key("retryhttp.pacing")
	// DimensionKey is what a rate limit counts: requests, tokens,
	// input_tokens or output_tokens.
	DimensionKey = attribute.Key("retryhttp.ratelimit.dimension")
)

// Attribute keys of the OpenTelemetry semantic conventions, as used here.
const (
	methodKey      = attribute.Key("http.request.method")
	methodOrigKey  = attribute.Key("http.request.method.original")
	statusKey      = attribute.Key("http.response.status_code")
	resendCountKey = attribute.Key("http.request.resend_count")
	urlFullKey     = attribute.Key("url.full")
	serverAddrKey  = attribute.Key("server.address")
	serverPortKey  = attribute.Key("server.port")
	errorTypeKey   = attribute.Key("error.type")
)

// Outcomes of an attempt (OutcomeKey).
const (
	outcomeSuccess   = "success"   // a status below 400
	outcomeTransient = "transient" // judged transient: retried, or it would have been
	outcomeFinal     = "final"     // a failure retrying cannot mend (400, 501, a bad certificate)
)

// Verdicts of a request (VerdictKey).
const (
	verdictSuccess  = "success"  // a status below 400
	verdictFailure  = "failure"  // a final failure: an error status, or an error, that was not transient
	verdictGaveUp   = "gave_up"  // retrying stopped while the outcome was transient (StopReasonKey says why)
	verdictCanceled = "canceled" // the caller's context ended
)

// method normalises a method as the semantic conventions ask: the known
// methods as they are, anything else as "_OTHER" (the original goes in
// http.request.method.original on spans), so a caller cannot grow the
// metrics' cardinality with made-up methods.
func method(m string) (string, bool) {
	switch m {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch,
		http.MethodHead, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m, true
	case "":
		return http.MethodGet, true // net/http's meaning of an empty method
	}
	return "_OTHER", false
}

// reasonOf names an attempt's outcome as a category, for ReasonKey: "ok"
// (a status below 400); for an error status "rate_limited" (429, or a 403
// the transport judged a rate limit), "overloaded" (503, 529), "timeout"
// (408, 504), "server_error" (other 5xx), "client_error" (other 4xx); for
// an error "timeout", "canceled", "tls", "connection", "local" (the
// request's own fault: an invalid request, a body that cannot be sent
// again) or "other".
func reasonOf(status int, err error, retryable bool) string {
	if err != nil {
		return errorReason(err)
	}
	switch {
	case status < 400:
		return "ok"
	case status == http.StatusTooManyRequests, status == http.StatusForbidden && retryable:
		return "rate_limited"
	case status == http.StatusServiceUnavailable, status == retryhttp.StatusOverloaded:
		return "overloaded"
	case status == http.StatusRequestTimeout, status == http.StatusGatewayTimeout:
		return "timeout"
	case status >= 500:
		return "server_error"
	}
	return "client_error"
}

func errorReason(err error) string {
	var ne net.Error
	var cert *tls.CertificateVerificationError
	var unknownAuthority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var record tls.RecordHeaderError
	var alert tls.AlertError
	var errno syscall.Errno
	switch {
	case errors.Is(err, retryhttp.ErrAttemptTimeout), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, retryhttp.ErrInvalidRequest), errors.Is(err, retryhttp.ErrBodyNotReplayable):
		return "local"
	case errors.As(err, &cert), errors.As(err, &unknownAuthority), errors.As(err, &hostname),
		errors.As(err, &invalid), errors.As(err, &record), errors.As(err, &alert):
		return "tls"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.As(err, &ne), errors.As(err, &errno), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "connection"
	}
	return "other"
}

// outcomeOf is an attempt's outcome, for OutcomeKey.
func outcomeOf(status int, err error, retryable bool) string {
	switch {
	case err == nil && status < 400:
		return outcomeSuccess
	case retryable:
		return outcomeTransient
	}
	return outcomeFinal
}

// stopReason names why retrying stopped, for StopReasonKey.
func stopReason(stop error) string {
	switch {
	case stop == nil:
		return ""
	case errors.Is(stop, retryhttp.ErrRetriesExhausted):
		return "retries_exhausted"
	case errors.Is(stop, retryhttp.ErrServerWaitTooLong):
		return "server_wait_too_long"
	case errors.Is(stop, retryhttp.ErrPastDeadline):
		return "past_deadline"
	case errors.Is(stop, retryhttp.ErrRetryBudgetSpent):
		return "retry_budget_spent"
	case errors.Is(stop, retryhttp.ErrBodyNotReplayable):
		return "body_not_replayable"
	case errors.Is(stop, retryhttp.ErrRateLimited):
		return "rate_limited"
	case errors.Is(stop, retryhttp.ErrCircuitOpen):
		return "circuit_open"
	}
	return "other"
}

// waitKind names a wait for WaitKindKey: "none" for no wait.
func waitKind(k retryhttp.WaitKind) string {
	if k == retryhttp.WaitNone {
		return "none"
	}
	return string(k)
}

// breakerState names a breaker state for BreakerStateKey.
func breakerState(s retryhttp.BreakerState) string {
	switch s {
	case retryhttp.BreakerOpen:
		return "open"
	case retryhttp.BreakerHalfOpen:
		return "half_open"
	}
	return "closed"
}

var breakerStates = [...]retryhttp.BreakerState{retryhttp.BreakerClosed, retryhttp.BreakerHalfOpen, retryhttp.BreakerOpen}

// dimensions are the rate-limit dimensions, with their DimensionKey values.
var dimensions = [...]struct {
	d    retryhttp.Dimension
	name string
}{
	{retryhttp.Requests, "requests"},
	{retryhttp.Tokens, "tokens"},
	{retryhttp.InputTokens, "input_tokens"},
	{retryhttp.OutputTokens, "output_tokens"},
}
