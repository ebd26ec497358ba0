package retryhttp

import "errors"

// Why retrying stopped early while the outcome was still transient. The
// [*Error] of such a call wraps one of these ([errors.Is] works on it, whether
// the call ended on a response, through [CheckResponse], or on a transport
// error, where errors.Is reaches that error too); Error.StopReason says the
// same in words, with the figures.
var (
	// ErrRetriesExhausted: every attempt [WithMaxRetries] allows was made.
	ErrRetriesExhausted = errors.New("retryhttp: retries exhausted")
	// ErrServerWaitTooLong: the server asked for a wait longer than
	// [WithMaxRetryAfter] allows.
	ErrServerWaitTooLong = errors.New("retryhttp: server asked to wait longer than allowed")
	// ErrPastDeadline: the next attempt would start after the request's
	// deadline, so it is not waited for.
	ErrPastDeadline = errors.New("retryhttp: next attempt would start after the deadline")
	// ErrRetryBudgetSpent: the upstream's retry budget refused the retry
	// (see [WithRetryBudget]).
	ErrRetryBudgetSpent = errors.New("retryhttp: retry budget spent")
)

// ErrBodyNotReplayable (body_rewind.go) is a stop reason too: the request
// body cannot be sent again.

// stopReason is why retrying stopped early: the sentinel for errors.Is and
// the words for Error.StopReason.
type stopReason struct {
	err  error
	text string
}

// stopError is the Err of an *Error whose retrying stopped early: errors.Is
// reaches both the stop reason and the last attempt's error, if any. Its
// text is the cause's; Error.StopReason already says why it stopped.
type stopError struct {
	reason error
	cause  error // nil when the call ended on a response
}

func (e *stopError) Error() string {
	if e.cause != nil {
		return e.cause.Error()
	}
	return e.reason.Error()
}

func (e *stopError) Unwrap() []error {
	if e.cause != nil {
		return []error{e.reason, e.cause}
	}
	return []error{e.reason}
}
