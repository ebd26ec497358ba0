package retryhttp

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Server signals. Parsers here read what a server said about when to come
// back; they never fail: what cannot be read is ignored, and the transport
// falls back to its own backoff.

// epochFloor is 2001-09-09, the first instant whose Unix time has ten digits.
// A Retry-After of that size is a timestamp sent by mistake, not a wait of
// three decades (see ParseRetryAfter).
const epochFloor = 1_000_000_000

// maxServerWait caps parsed waits so arithmetic on them cannot overflow; any
// real limit (WithMaxRetryAfter) is far below it.
const maxServerWait = 100 * 365 * 24 * time.Hour

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
func ParseRetryAfter(h http.Header, now time.Time) (wait time.Duration, ok bool) {
	if d, ok := parseRetryAfterMs(h.Get("Retry-After-Ms")); ok {
		return d, true
	}
	return parseRetryAfterValue(h.Get("Retry-After"), now)
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
	if n >= epochFloor && looksLikeEpoch(n, now) {
		return untilTime(time.Unix(n, 0), now)
	}
	return clampWait(float64(n) * float64(time.Second))
}

// looksLikeEpoch reports whether seconds is a Unix time within a year of now.
func looksLikeEpoch(seconds int64, now time.Time) bool {
	const year = 366 * 24 * 3600
	d := seconds - now.Unix()
	return d > -year && d < year
}

// parseGoDuration accepts a duration with an explicit unit ("20ms", "6m0s").
// A bare number is not a duration here.
func parseGoDuration(v string) (time.Duration, bool) {
	if v == "" || isDigits(v) || v[0] == '-' {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		if looksLikeHugeDuration(v) {
			return maxServerWait, true
		}
		return 0, false
	}
	if d < 0 {
		return 0, false
	}
	return min(d, maxServerWait), true
}

// looksLikeHugeDuration reports whether v is digits followed by a single
// duration unit that time.ParseDuration rejected only for overflowing.
func looksLikeHugeDuration(v string) bool {
	i := 0
	for i < len(v) && v[i] >= '0' && v[i] <= '9' {
		i++
	}
	if i == 0 {
		return false
	}
	switch v[i:] {
	case "ns", "us", "\u00b5s", "\u03bcs", "ms", "s", "m", "h": // both micro signs, as time.ParseDuration
		return true
	}
	return false
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

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseShouldRetry reads x-should-retry, with which the Anthropic and OpenAI
// APIs override status-code classification. Only "true" and "false" count.
func parseShouldRetry(h http.Header) (retry, ok bool) {
	switch strings.ToLower(strings.TrimSpace(h.Get("X-Should-Retry"))) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// requestID returns the provider's request id, if the response carries one.
func requestID(h http.Header) string {
	for _, k := range [...]string{"Request-Id", "X-Request-Id", "X-Amzn-Requestid", "X-Github-Request-Id"} {
		if v := h.Get(k); v != "" {
			return v
		}
	}
	return ""
}
