package retryhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// maxErrorBody bounds how much of an error response CheckResponse reads to
// find the provider's message. Error bodies are small; a large one is cut.
// The read is bounded in time as well (peekTimeout, bodypeek.go).
const maxErrorBody = 64 << 10

// maxMessage bounds the provider message kept in an Error.
const maxMessage = 500

// Error is a failed request, as RoundTrip or [CheckResponse] report it. Error()
// is the technical summary for logs; UserMessage is for the people behind the
// client. Neither holds credentials, nor do the text fields (URL, Message,
// ProviderType, RequestID, StopReason):
//
//   - the request's own credentials, the values of its Authorization,
//     Proxy-Authorization, X-Api-Key, Api-Key and Cookie headers (each 6
//     bytes or longer), and the token of an Authorization and each cookie
//     value, are replaced by REDACTED wherever they appear: in Message (a
//     provider may echo the key back), URL, Error() and the cause's text;
//   - so are URL userinfo, Bearer/Basic credentials, well-known API key
//     shapes (sk-..., sk-ant-..., ghp_..., AKIA...) and the values of
//     secret-looking query parameters and key=value pairs: names holding
//     key, token, secret, passw, pwd, signature, credential, auth, session,
//     jwt, hmac or assertion; names with sig, pass, pw or otp as a word
//     ("url_sig", "db_pw"); and code.
//
// Err is the original error, unredacted, so that [errors.Is] and [errors.As]
// reach it: log e.Error(), not e.Err.Error().
type Error struct {
	StatusCode int       // the last status seen; 0 when no response came back
	Attempts   int       // attempts sent (0 when refused locally before any)
	Retryable  bool      // the failure was transient: retrying later may succeed
	RetryAt    time.Time // earliest time a new try is worth making; zero if unknown
	Err        error     // the cause: the transport error, or nil for a status

	Method       string // the request's method
	URL          string // the request's URL, credentials redacted (fragment and userinfo dropped, secret query values hidden)
	ProviderType string // the provider's error type: "overloaded_error", "insufficient_quota", ...
	Message      string // the provider's message, bounded and redacted
	RequestID    string // the provider's request id (request-id, x-request-id)
	StopReason   string // why retrying stopped early, if it did ("retries exhausted", ...)

	// decidedAt is when RetryAt was worked out, on the clock that worked it
	// out (the transport's, which tests may fake), so UserMessage phrases
	// the wait as the transport saw it. Zero: the system clock.
	decidedAt time.Time
	// creds are the request's credentials, for Error() to take out of the
	// cause's text, which is only rendered when asked for.
	creds *credentials
}

// Error returns the technical summary: method, host and path, status,
// provider type and message, attempts, request id, why retrying stopped, and
// the cause, with credentials redacted (see [Error]).
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("retryhttp: ")
	if e.Method != "" {
		// An invalid method is reported quoted, so it cannot break a log line.
		if isToken(e.Method) {
			b.WriteString(e.Method + " ")
		} else {
			b.WriteString(strconv.Quote(e.Method) + " ")
		}
	}
	if hp := hostPath(e.URL); hp != "" {
		b.WriteString(hp + ": ")
	}
	if e.StatusCode != 0 {
		b.WriteString(statusText(e.StatusCode))
	} else {
		b.WriteString("request failed")
	}
	switch {
	case e.ProviderType != "" && e.Message != "":
		b.WriteString(" (" + e.ProviderType + ": " + e.Message + ")")
	case e.ProviderType != "" || e.Message != "":
		b.WriteString(" (" + e.ProviderType + e.Message + ")")
	}
	fmt.Fprintf(&b, " after %d attempt%s", e.Attempts, plural(e.Attempts))
	if e.RequestID != "" {
		b.WriteString("; request id " + e.RequestID)
	}
	if e.StopReason != "" {
		b.WriteString("; stopped: " + e.StopReason)
	}
	if e.Err != nil && !e.onlyStopped() {
		b.WriteString(": " + e.creds.text(e.Err.Error()))
	}
	return e.creds.literal(b.String())
}

// onlyStopped reports an Err that says no more than StopReason does.
func (e *Error) onlyStopped() bool {
	s, ok := e.Err.(*stopError)
	return ok && s.cause == nil && e.StopReason != ""
}

// Unwrap returns Err, so [errors.Is] and [errors.As] reach the cause.
func (e *Error) Unwrap() error { return e.Err }

// UserMessage returns a calm, action-oriented sentence for the people using
// the application: what happened in plain words and what to do about it. It
// holds no status codes, no internals and no credentials.
func (e *Error) UserMessage() string {
	switch k := e.kind(); k {
	case kindRateLimited:
		return "The service is receiving too many requests right now. Please try again " + e.when("in a moment") + "."
	case kindUnavailable:
		return "The service is temporarily unavailable. Please try again " + e.when("in a moment") + "."
	case kindOverloaded:
		return "The service is very busy at the moment. Please try again " + e.when("in a few minutes") + "."
	case kindServer:
		return "The service ran into a temporary problem. Please try again " + e.when("shortly") + "."
	default:
		return userMessages[k]
	}
}

type errorKind int

const (
	kindUnknown errorKind = iota
	kindRateLimited
	kindUnavailable // the circuit breaker is open
	kindQuota
	kindOverloaded
	kindServer
	kindTimeout
	kindCanceled
	kindNetwork
	kindBadRequest
	kindTooLarge
	kindAuth
	kindForbidden
	kindNotFound
	kindLocal
)

var userMessages = map[errorKind]string{
	kindUnknown:    "Something went wrong. Please try again later.",
	kindQuota:      "The usage limit for this account has been reached. Please check the plan or billing settings, then try again.",
	kindTimeout:    "The service took too long to respond. Please try again.",
	kindCanceled:   "The request was stopped before it finished. Please try again if you still need it.",
	kindNetwork:    "We couldn't reach the service. Please check your connection and try again.",
	kindBadRequest: "The request couldn't be processed. Please check what you entered and try again.",
	kindTooLarge:   "The request is too large. Please make it smaller and try again.",
	kindAuth:       "We couldn't sign in to the service. Please check that the access key is set up correctly.",
	kindForbidden:  "This action isn't allowed with the current access rights. Please check the permissions.",
	kindNotFound:   "We couldn't find what was asked for. Please check the name or address and try again.",
	kindLocal:      "Something went wrong while preparing the request. Please try again, and contact support if it keeps happening.",
}

func (e *Error) kind() errorKind {
	// The caller gave up: whatever the server said before, it was not the
	// end of the story. (An attempt timeout also carries context.Canceled.)
	if e.Err != nil && errors.Is(e.Err, context.Canceled) && !errors.Is(e.Err, errAttemptTimeout) {
		return kindCanceled
	}
	if errors.Is(e.Err, ErrRateLimited) {
		return kindRateLimited
	}
	if isLocal(e.Err) && !e.onlyStopped() {
		// The request failed here (a body that could not be read or made
		// again): whatever the server said before, it is not to blame.
		return kindLocal
	}
	if errors.Is(e.Err, ErrCircuitOpen) {
		return kindUnavailable
	}
	if quotaExhausted(e.ProviderType) {
		return kindQuota
	}
	if e.ProviderType == "rate_limit_error" || e.ProviderType == "secondary_rate_limit" {
		return kindRateLimited
	}
	if e.ProviderType == "overloaded_error" {
		return kindOverloaded
	}
	switch {
	case e.StatusCode == http.StatusTooManyRequests:
		return kindRateLimited
	case e.StatusCode == StatusOverloaded || e.StatusCode == http.StatusServiceUnavailable:
		return kindOverloaded
	case e.StatusCode == http.StatusRequestTimeout || e.StatusCode == http.StatusGatewayTimeout:
		return kindTimeout
	case e.StatusCode == http.StatusNotImplemented || e.StatusCode == http.StatusHTTPVersionNotSupported:
		// Permanent: "a temporary problem, try again shortly" would be untrue.
		return kindUnknown
	case e.StatusCode >= 500:
		return kindServer
	case e.StatusCode == http.StatusUnauthorized:
		return kindAuth
	case e.StatusCode == http.StatusForbidden:
		return kindForbidden
	case e.StatusCode == http.StatusNotFound || e.StatusCode == http.StatusGone:
		return kindNotFound
	case e.StatusCode == http.StatusRequestEntityTooLarge:
		return kindTooLarge
	case e.StatusCode >= 400:
		return kindBadRequest
	case e.StatusCode != 0:
		return kindUnknown
	}
	return errKind(e.Err)
}

func errKind(err error) errorKind {
	switch {
	case err == nil:
		return kindUnknown
	case errors.Is(err, ErrRateLimited):
		return kindRateLimited
	case errors.Is(err, errAttemptTimeout), errors.Is(err, context.DeadlineExceeded):
		return kindTimeout
	case errors.Is(err, context.Canceled):
		return kindCanceled
	case isLocal(err):
		return kindLocal
	}
	return kindNetwork
}

// isLocal reports an error of the request's own making.
func isLocal(err error) bool {
	return errors.Is(err, ErrInvalidRequest) || errors.Is(err, ErrBodyNotReplayable) || errors.Is(err, errBodyFailed)
}

// quotaExhausted reports provider error types that mean the account's quota
// or billing is used up: waiting will not help.
func quotaExhausted(t string) bool {
	switch t {
	case "insufficient_quota", "billing_hard_limit_reached", "billing_not_active", "quota_exceeded":
		return true
	}
	return false
}

// when phrases how long until RetryAt for a user, on the scale people
// use: seconds, about a minute, minutes, later; unknown is said as
// unknown would be.
func (e *Error) when(unknown string) string {
	if e.RetryAt.IsZero() {
		return unknown
	}
	now := e.decidedAt
	if now.IsZero() {
		now = time.Now()
	}
	d := e.RetryAt.Sub(now)
	switch {
	case d < 10*time.Second:
		return "in a few seconds"
	case d < 55*time.Second:
		return "in about " + strconv.Itoa(int((d+5*time.Second)/(10*time.Second))*10) + " seconds"
	case d < 90*time.Second:
		return "in about a minute"
	case d < 90*time.Minute:
		return "in about " + strconv.Itoa(int((d+30*time.Second)/time.Minute)) + " minutes"
	}
	return "later"
}

// transportError reports a call that ended on an error rather than a response.
func (c *call) transportError(err error, stop string) *Error {
	creds := c.creds()
	return &Error{
		Err:        err,
		StatusCode: c.lastStatus,
		Attempts:   c.attempts,
		Retryable:  retryableError(err),
		RetryAt:    c.retryAt,
		Method:     methodOf(c.req),
		URL:        creds.url(c.req.URL),
		StopReason: creds.text(stop), // a body's read error may quote anything
		decidedAt:  c.t.cfg.clock.Now(),
		creds:      creds,
	}
}

func joinErrors(outer, inner error) error { return fmt.Errorf("%w: %w", outer, inner) }

// CheckResponse turns the result of an HTTP call into an error: nil when err
// is nil and the status is below 400, otherwise an [*Error]. It works on any
// response, ours or not. It reads at most 64 KiB of an error body to find the
// provider's error type, message and suggested wait (the Anthropic and OpenAI
// JSON shapes, GitHub's, or plain text), and puts those bytes back, so the
// caller can still read the body whole. It waits at most 200 ms for those
// bytes: a body that stalls is classified by status and headers alone, and
// the bytes that come later are still read first from the body. A body
// already read or closed is classified by status and headers alone;
// resp.Request may be nil.
func CheckResponse(resp *http.Response, err error) error {
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return e
		}
		e = &Error{Err: err, Attempts: 1, Retryable: retryableError(err)}
		if resp != nil && resp.Request != nil {
			e.creds = credentialsOf(resp.Request)
			e.Method, e.URL = methodOf(resp.Request), e.creds.url(resp.Request.URL)
		}
		return e
	}
	if resp == nil {
		return &Error{Err: errors.New("retryhttp: no response and no error")}
	}
	if resp.StatusCode < 400 {
		return nil
	}
	return responseError(resp, time.Now())
}

func responseError(resp *http.Response, now time.Time) *Error {
	creds := credentialsOf(resp.Request) // nil without a request
	e := &Error{
		StatusCode: resp.StatusCode,
		Attempts:   max(Attempts(resp), 1),
		Retryable:  Retryable(resp, nil),
		RequestID:  cleanField(requestID(resp.Header), creds),
		creds:      creds,
	}
	if resp.Request != nil {
		e.Method, e.URL = methodOf(resp.Request), creds.url(resp.Request.URL)
	}
	v := trackedVerdict(resp)
	if v != nil {
		// The transport decided on its own clock; read the headers on it too.
		now = v.decidedAt
		e.StopReason, e.RetryAt = creds.text(v.stopReason), v.retryAt
		if v.stop != nil {
			e.Err = &stopError{reason: v.stop}
		}
	}
	e.decidedAt = now
	if d, ok := ParseRetryAfter(resp.Header, now); ok && e.RetryAt.IsZero() {
		e.RetryAt = now.Add(d)
	}
	p := readProviderError(peekBody(resp, maxErrorBody), resp.Header.Get("Content-Type"), creds)
	e.ProviderType, e.Message = p.Type, p.Message
	if e.RequestID == "" {
		e.RequestID = p.RequestID
	}
	if e.RetryAt.IsZero() && p.RetryIn > 0 {
		e.RetryAt = now.Add(p.RetryIn)
	}
	switch {
	case v != nil:
		e.Retryable = v.retryable // what the transport decided, classifier included
	case quotaExhausted(p.Type):
		e.Retryable = false
	case p.Type == "secondary_rate_limit":
		// GitHub sends its secondary rate limit as a 403: a status-only
		// verdict says "permanent", but waiting is exactly what helps.
		e.Retryable = true
	}
	return e
}

// trackedVerdict is what the transport decided about a response it
// returned; nil for any other response.
func trackedVerdict(resp *http.Response) *verdict {
	if b := trackedBody(resp); b != nil {
		return b.verdict
	}
	return nil
}

// providerError is what a provider's error body says.
type providerError struct {
	Type, Message, RequestID string
	RetryIn                  time.Duration
}

// parseProviderError reads the error shapes of the APIs people call:
//
//	Anthropic {"type":"error","error":{"type":"overloaded_error","message":"…"},"request_id":"req_…"}
//	OpenAI    {"error":{"message":"…","type":"…","param":null,"code":"insufficient_quota"}}
//	GitHub    {"message":"…","documentation_url":"…"}
//
// and, failing those, a short plain-text body. It never fails: what cannot be
// read is left empty.
func parseProviderError(body []byte, contentType string) providerError {
	return readProviderError(body, contentType, nil)
}

// readProviderError is parseProviderError that also redacts the request's
// own credentials from what it keeps, before the message is cut, so a cut
// cannot leave part of one.
func readProviderError(body []byte, contentType string, creds *credentials) providerError {
	var p providerError
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return p
	}
	if body[0] == '{' {
		parseJSONError(body, &p)
	} else if !looksLikeMarkup(body, contentType) {
		p.Message = string(body)
	}
	p.Message = cleanMessage(p.Message, creds)
	p.Type, p.RequestID = cleanField(p.Type, creds), cleanField(p.RequestID, creds)
	if d, ok := retryHint(p.Message); ok {
		p.RetryIn = d
	}
	return p
}

func parseJSONError(body []byte, p *providerError) {
	// Fields are read one by one, so a field of an unexpected type (a numeric
	// "code", an object "message") loses only itself, not the whole body.
	var doc map[string]json.RawMessage
	if json.Unmarshal(body, &doc) != nil {
		return
	}
	p.Message, p.RequestID = jsonString(doc["message"]), jsonString(doc["request_id"])
	if strings.Contains(jsonString(doc["documentation_url"]), "secondary-rate-limit") {
		p.Type = "secondary_rate_limit"
	}
	var inner map[string]json.RawMessage
	if json.Unmarshal(doc["error"], &inner) == nil && inner != nil {
		if t := jsonString(inner["type"]); t != "" {
			p.Type = t
		}
		if m := jsonString(inner["message"]); m != "" {
			p.Message = m
		}
		// OpenAI puts the precise reason ("insufficient_quota") in code and
		// a broader one in type.
		if code := jsonString(inner["code"]); code != "" {
			p.Type = code
		}
		return
	}
	if s := jsonString(doc["error"]); s != "" && p.Message == "" {
		p.Message = s
	}
}

// jsonString returns raw as a string if it is a JSON string, else "".
func jsonString(raw json.RawMessage) string {
	var s string
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

func looksLikeMarkup(body []byte, contentType string) bool {
	return body[0] == '<' || strings.Contains(contentType, "html")
}

// cleanMessage folds white space, drops invalid UTF-8 and control bytes,
// bounds the length and redacts credentials a provider may echo back, the
// request's own (creds, may be nil) among them.
func cleanMessage(s string, creds *credentials) string { return cleanText(s, maxMessage, creds) }

// maxField bounds the short fields taken from a server (provider error type,
// request id).
const maxField = 128

// cleanField cleans a short server-supplied field, as cleanMessage does.
func cleanField(s string, creds *credentials) string { return cleanText(s, maxField, creds) }

// cleanText makes server-supplied text safe to log: valid UTF-8, no control
// characters, white space folded, credentials (creds among them) redacted,
// at most n runes (plus an ellipsis when cut). Redaction comes before the
// cut, so a credential is never cut to a prefix that no longer looks like
// one; creds are taken out before the folding too, which could change them.
func cleanText(s string, n int, creds *credentials) string {
	if s == "" {
		return ""
	}
	s = strings.ToValidUTF8(creds.literal(s), "")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return ' ' // also folds bidi overrides and zero-width marks
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	s = creds.text(s)
	if utf8.RuneCountInString(s) > n {
		s = string([]rune(s)[:n]) + "…"
	}
	return s
}

var (
	retryHintPattern = regexp.MustCompile(`(?i)try again in ([0-9]{1,12}(?:\.[0-9]{1,9})?(?:ms|s|m|h)(?:[0-9]{1,12}(?:\.[0-9]{1,9})?(?:ms|s|m|h))*)\b`)
	retryWordPattern = regexp.MustCompile(`(?i)try again in ([0-9]{1,12}(?:\.[0-9]{1,9})?) ?(milliseconds?|seconds?|secs?|minutes?|mins?|hours?)\b`)
)

// retryHint finds a suggested wait in a provider message, such as OpenAI's
// "Please try again in 20s", "in 6m0s" or "in 1h2m3s", or in words ("try
// again in 30 seconds").
func retryHint(msg string) (time.Duration, bool) {
	var d time.Duration
	var err error
	if m := retryHintPattern.FindStringSubmatch(msg); m != nil {
		d, err = time.ParseDuration(strings.ToLower(m[1]))
	} else if m := retryWordPattern.FindStringSubmatch(msg); m != nil {
		unit := map[byte]string{'m': "m", 's': "s", 'h': "h"}[strings.ToLower(m[2])[0]]
		if strings.HasPrefix(strings.ToLower(m[2]), "milli") {
			unit = "ms"
		}
		d, err = time.ParseDuration(m[1] + unit)
	} else {
		return 0, false
	}
	if err != nil || d <= 0 {
		return 0, false
	}
	return min(d, maxServerWait), true
}

// hostPath returns "host/path" of a URL string, for the technical summary.
func hostPath(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	return u.Host + u.EscapedPath()
}

func statusText(code int) string {
	if code == StatusOverloaded {
		return "529 Overloaded"
	}
	if t := http.StatusText(code); t != "" {
		return strconv.Itoa(code) + " " + t
	}
	return strconv.Itoa(code)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
