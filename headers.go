package retryhttp

// Server signals: what a server said about when to come back. Parsers of
// them never fail: what cannot be read is ignored, and the transport falls
// back to its own backoff.
//
// This file holds what those parsers share (the server's now from the Date
// header, the caps on waits, the readers of digits, epochs and Go
// durations) and the two small signals x-should-retry and the request id.
// The parsers themselves are in headers_retryafter.go (Retry-After,
// retry-after-ms), headers_ratelimit.go (ParseRateLimits: the dispatch over
// the rate-limit header families), one file per family
// (headers_anthropic.go, headers_openai.go, headers_github.go,
// headers_ietf.go), headers_values.go (the counts and resets they share)
// and structuredfield.go (the RFC 9651 list parser the IETF fields use).

import (
	"net/http"
	"strings"
	"time"
)

// maxServerWait caps parsed waits so arithmetic on them cannot overflow; any
// real limit (WithMaxRetryAfter) is far below it.
const maxServerWait = 100 * 365 * 24 * time.Hour

// maxDelaySeconds is the largest number read only as a delay: a number
// beyond a year of seconds that lies within a year of now's Unix time is
// that time (the rule epochFloor states for today's clocks, which also holds
// for a clock that reads earlier, as a test's simulated one may).
const maxDelaySeconds = 366 * 24 * 3600

// maxClockSkew is the largest difference between a response's Date and the
// local clock that is taken for skew; a Date further off is a broken header,
// and the local clock is used instead.
const maxClockSkew = 24 * time.Hour

// ServerNow returns the server's now as the Date header of h gives it, or
// local when h has no Date, an unreadable one, or one more than a day from
// local (a broken header, not a clock). Absolute times a server sends
// (rate-limit resets, Retry-After dates) are on that clock: their distance
// from it, applied to local, is what survives a skew between the two.
func ServerNow(h http.Header, local time.Time) time.Time {
	v := h.Get("Date")
	if v == "" {
		return local
	}
	d, err := http.ParseTime(v)
	if err != nil {
		return local
	}
	if skew := d.Sub(local); skew > maxClockSkew || skew < -maxClockSkew {
		return local
	}
	return d
}

// parseShouldRetry reads x-should-retry, with which the Anthropic and OpenAI
// APIs override status-code classification. Only "true" and "false" count.
func parseShouldRetry(h http.Header) (retry, ok bool) {
	vs := h["X-Should-Retry"] // canonical key: no re-canonicalising per response
	if len(vs) == 0 {
		return false, false
	}
	switch v := strings.TrimSpace(vs[0]); {
	case strings.EqualFold(v, "true"):
		return true, true
	case strings.EqualFold(v, "false"):
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
