package retryhttp

// The values of the rate-limit headers, as every family writes them: counts
// (parseRateCount), resets (parseResetAt: delay-seconds, epoch seconds or
// milliseconds told apart by magnitude, Go durations, RFC 3339, HTTP-dates;
// see ParseRateLimits) and IETF policy windows (parseWindow). The families
// that use them are in headers_ratelimit.go and the headers_<family>.go
// files; the readers of digits, epochs and Go durations that Retry-After
// shares too are in headers.go.

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// parseRateCount reads a limit or remaining count: a non-negative decimal
// integer, or the first item of a list ("100, 100;w=60"). Digits beyond
// int64 are a count larger than anything real, read as math.MaxInt64.
func parseRateCount(v string) (int64, bool) {
	for i := 0; i < len(v); i++ {
		if v[i] == ',' || v[i] == ';' {
			v = v[:i]
			break
		}
	}
	v = trimOWS(v)
	if !isDigits(v) {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return math.MaxInt64, true
	}
	return n, true
}

// parseResetAt reads a reset time; see ParseRateLimits for the forms.
// coarse reports an absolute time in whole seconds.
func parseResetAt(v string, now time.Time) (reset time.Time, coarse, ok bool) {
	v = trimOWS(v)
	if v == "" {
		return time.Time{}, false, false
	}
	if intPart, frac, ok := splitDecimal(v); ok {
		t, absolute := resetFromNumber(intPart, frac, now)
		return t, absolute && frac == "", true
	}
	if d, ok := parseGoDuration(v); ok {
		return now.Add(d), false, true
	}
	if v[0] >= '0' && v[0] <= '9' && len(v) >= len("2006-01-02T15:04:05Z") && v[4] == '-' {
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			return clampReset(t, now), t.Nanosecond() == 0, true
		}
	}
	if t, err := http.ParseTime(v); err == nil {
		return clampReset(t, now), true, true
	}
	return time.Time{}, false, false
}

// splitDecimal splits "123" or "123.45" into its integer digits and its
// fraction digits; ok is false for anything else (signs, exponents, NaN).
func splitDecimal(v string) (intPart, frac string, ok bool) {
	intPart, frac, dot := strings.Cut(v, ".")
	if !isDigits(intPart) || dot && !isDigits(frac) {
		return "", "", false
	}
	return intPart, frac, true
}

// resetFromNumber applies the magnitude rule of ParseRateLimits; epochSeconds
// reports a Unix time in seconds (absolute, and whole unless frac says more).
func resetFromNumber(intPart, frac string, now time.Time) (reset time.Time, epochSeconds bool) {
	n, err := strconv.ParseInt(intPart, 10, 64)
	if err != nil { // more digits than int64: no epoch, a delay beyond any cap
		return now.Add(maxServerWait), false
	}
	const yearMs = 366 * 24 * 3600 * 1000
	if n >= 1_000_000_000_000 {
		if d := n - now.UnixMilli(); d > -yearMs && d < yearMs {
			return clampReset(time.UnixMilli(n).Add(fracOf(frac, time.Millisecond)), now), false
		}
	}
	if n > maxDelaySeconds && looksLikeEpoch(n, now) {
		return clampReset(time.Unix(n, int64(fracOf(frac, time.Second))), now), true
	}
	if n >= int64(maxServerWait/time.Second) {
		return now.Add(maxServerWait), false
	}
	return now.Add(min(time.Duration(n)*time.Second+fracOf(frac, time.Second), maxServerWait)), false
}

// fracOf returns the fraction ".frac" of unit, to the nanosecond; digits
// beyond nanoseconds are dropped.
func fracOf(frac string, unit time.Duration) time.Duration {
	var d time.Duration
	scale := unit
	for i := 0; i < len(frac) && scale >= 10; i++ {
		scale /= 10
		d += time.Duration(frac[i]-'0') * scale
	}
	return d
}

// clampReset keeps an absolute reset within [now, now+maxServerWait], in
// now's location so all resets print alike.
func clampReset(t, now time.Time) time.Time {
	if !t.After(now) {
		return now
	}
	if t.Sub(now) >= maxServerWait {
		return now.Add(maxServerWait)
	}
	return t.In(now.Location())
}

// parseWindow reads a policy window in seconds (fraction allowed), capped.
func parseWindow(v string) (time.Duration, bool) {
	intPart, frac, ok := splitDecimal(v)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(intPart, 10, 64)
	if err != nil || n >= int64(maxServerWait/time.Second) {
		return maxServerWait, true
	}
	return min(time.Duration(n)*time.Second+fracOf(frac, time.Second), maxServerWait), true
}

func trimOWS(v string) string {
	for v != "" && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for v != "" && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}
