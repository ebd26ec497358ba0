package retryhttp

// Retry-After and retry-after-ms: how long a server asks the client to wait.
// Retry-After is RFC 9110 section 10.2.3 (delay-seconds or an HTTP-date);
// retry-after-ms (float milliseconds) is no standard but is sent by some LLM
// providers and read first by their official SDKs. The other forms accepted
// (a Unix timestamp, a Go duration) are mistakes seen in the wild. The
// helpers shared with the rate-limit parsers are in headers.go.

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// epochFloor is 2001-09-09, the first instant whose Unix time has ten digits.
// A Retry-After of that size is a timestamp sent by mistake, not a wait of
// three decades (see ParseRetryAfter).
const epochFloor = 1_000_000_000

// ParseRetryAfter returns how long the server asked the client to wait, read
// from the headers of h at time now, and whether it asked at all.
//
// retry-after-ms (float milliseconds, sent by some LLM providers) is read
// first, as the official SDKs do; then Retry-After as delay-seconds or an
// HTTP-date in any of the three forms of RFC 9110 (http.ParseTime). A date
// in the past means "now" (0).
//
// Values seen in the wild are survived rather than trusted blindly: a
// Retry-After of ten or more digits that lies within a year of now is read as
// the Unix timestamp it is, not as a delay of decades; a Go-style duration
// ("1.5s", "484289h") is accepted. Negative, fractional or garbage values are
// ignored (ok is false). Waits are capped at 100 years, so a huge value is
// simply longer than any limit and never overflows.
//
// An HTTP-date or a timestamp is on the server's clock, which may be seconds
// off the client's: it is read against the response's Date header (the
// server's now, see [ServerNow]), so the wait survives the skew. Both are whole
// seconds, so such a wait is good to about a second either way.
func ParseRetryAfter(h http.Header, now time.Time) (wait time.Duration, ok bool) {
	if d, ok := parseRetryAfterMs(h.Get("Retry-After-Ms")); ok {
		return d, true
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if !isDigits(strings.TrimSpace(v)) || len(strings.TrimSpace(v)) >= 10 {
		now = ServerNow(h, now) // a date or a timestamp: on the server's clock
	}
	return parseRetryAfterValue(v, now)
}

func parseRetryAfterMs(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	// Decimal only: "NaN", "Inf" and hex floats parse as floats but are not
	// a wait anyone sent on purpose.
	if !looksNumeric(v) {
		return 0, false
	}
	ms, err := strconv.ParseFloat(v, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	// Out of range is +Inf (a number too large for a float64 is still a
	// number: a wait longer than any limit, as for Retry-After) or 0.
	return clampWait(ms * float64(time.Millisecond)), true
}

// looksNumeric reports whether v starts like a non-negative decimal number,
// and is not NaN, Inf or hex (strconv.ParseFloat judges the rest).
func looksNumeric(v string) bool {
	v = strings.TrimPrefix(v, "+")
	if v == "" || v[0] < '0' && v[0] != '.' || v[0] > '9' {
		return false
	}
	return !strings.ContainsAny(v, "xXnNiI_")
}

func parseRetryAfterValue(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		return parseDelaySeconds(v, now), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return untilTime(t, now), true
	}
	if d, ok := parseGoDuration(v); ok {
		return d, true
	}
	return 0, false
}

// parseDelaySeconds reads a run of digits as delay-seconds, or as a Unix
// timestamp when it is one (see epochFloor).
func parseDelaySeconds(v string, now time.Time) time.Duration {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil { // more digits than int64 holds
		return maxServerWait
	}
	if n >= epochFloor && looksLikeEpoch(n, now) || n > maxDelaySeconds && looksLikeEpoch(n, now) {
		return untilTime(time.Unix(n, 0), now)
	}
	return clampWait(float64(n) * float64(time.Second))
}

func untilTime(t, now time.Time) time.Duration {
	d := t.Sub(now)
	if d < 0 {
		return 0
	}
	return min(d, maxServerWait)
}

func clampWait(ns float64) time.Duration {
	if ns >= float64(maxServerWait) {
		return maxServerWait
	}
	return time.Duration(ns)
}
