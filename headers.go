package retryhttp

import (
	"errors"
	"math"
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

// maxDelaySeconds is the largest number read only as a delay: a number
// beyond a year of seconds that lies within a year of now's Unix time is
// that time (the rule epochFloor states for today's clocks, which also holds
// for a clock that reads earlier, as a test's simulated one may).
const maxDelaySeconds = 366 * 24 * 3600

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
//
// An HTTP-date or a timestamp is on the server's clock, which may be seconds
// off the client's: it is read against the response's Date header (the
// server's now, see ServerNow), so the wait survives the skew. Both are whole
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

// ParseRateLimits reads the rate-limit state that the headers of one response
// describe, at time now, normalised across the header families servers use.
// It never fails: a value that cannot be read leaves its field unset, and a
// response without rate-limit headers yields the zero RateLimits (one pass
// over the header keys, no allocation). Keys are matched in canonical form,
// as http.Header.Get does.
//
// Families, most specific first. When several describe the same dimension,
// the first in this list that says anything about it supplies that
// dimension's whole Quota (fields are never mixed across families, whose
// windows may differ):
//
//   - Anthropic: anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}.
//   - OpenAI: x-ratelimit-{limit,remaining,reset}-{requests,tokens}, and
//     Azure OpenAI's spelling x-rate-limit-{limit,remaining,reset}-{requests,tokens};
//     per field the x-ratelimit- spelling wins, the other fills gaps.
//   - IETF draft, current: RateLimit: "default";r=50;t=30 with
//     RateLimit-Policy: "default";q=100;w=60 (RFC 9651 lists). An item is
//     matched to its policy by name: r is Remaining, t the delay to Reset,
//     q the Limit, w the Window. A policy whose qu parameter or name says
//     tokens maps to Tokens (InputTokens or OutputTokens if it also says
//     input/prompt or output/completion); qu="requests" or no qu and a plain
//     name map to Requests; other units (content-bytes, concurrent-requests)
//     are ignored. Of several items for one dimension the one with the least
//     remaining (then the later reset) is reported; a policy without an item
//     gives its Limit only if no item covers its dimension. Malformed list
//     members are skipped, not fatal; at most 32 members per field are read.
//   - IETF draft, older: RateLimit-Limit (first number of "100, 100;w=60"),
//     RateLimit-Remaining, RateLimit-Reset, as Requests.
//   - GitHub and most others: X-RateLimit-Limit, -Remaining, -Reset, as
//     Requests; X-RateLimit-Used gives Remaining = Limit - Used when Remaining
//     is missing; X-RateLimit-Reset-After (Discord: delay-seconds) is preferred
//     to X-RateLimit-Reset, being immune to clock skew.
//   - X (Twitter): x-rate-limit-limit, -remaining, -reset, as Requests.
//
// Limit and Remaining are non-negative decimal integers (a list value gives
// its first item; digits beyond int64 read as math.MaxInt64; negative or
// non-integer values are ignored). Remaining above Limit is reported as given.
//
// A reset is read, in this order, as:
//   - a decimal number (fraction allowed): Unix milliseconds if it is at
//     least 1e12 and within a year of now; else Unix seconds if at least 1e9
//     and within a year of now; else delay-seconds. This tells apart the
//     delta, epoch and epoch-millisecond X-RateLimit-Reset values servers
//     send, and survives an epoch sent where a delay was specified (or the
//     reverse);
//   - a Go duration with a unit ("6m0s", "20ms", "1m30.5s"), the delay OpenAI
//     sends;
//   - an RFC 3339 timestamp, with or without fractional seconds (Anthropic);
//   - an HTTP-date in any form http.ParseTime accepts.
//
// Negative values are ignored. A reset in the past is reported as now (the
// window has already refilled as far as the server's clock tells), so a
// non-zero Reset is never before now; resets are capped at 100 years after
// now so arithmetic on them cannot overflow. Window is the IETF policy window
// of the dimension that supplied it (Requests first) and is likewise capped.
// Replenishing is that of the family that supplied Requests (or, without
// Requests, the first dimension known): true for Anthropic and OpenAI, whose
// quotas are token buckets, false for the fixed windows of the others.
//
// Absolute resets (RFC 3339, epoch, HTTP-date) are on the server's clock:
// they are read against the response's Date header (see ServerNow) and the
// distance applied to now, so a server whose clock is seconds off reports
// the same resets as one whose clock agrees. Such a reset has whole-second
// precision, and servers cut it either way (Go's time.Format truncates), so
// Coarse is set: the reset is evidence to about a second, never exact. One
// at or before the server's now means now.
func ParseRateLimits(h http.Header, now time.Time) RateLimits {
	if !hasRateLimitKey(h) {
		return RateLimits{}
	}
	return readRateLimits(h, now, ServerNow(h, now))
}

// readRateLimits is ParseRateLimits with the server's now given: the
// transport passes what it learned of the upstream's clock (serverClock).
func readRateLimits(h http.Header, now, server time.Time) RateLimits {
	if !hasRateLimitKey(h) {
		return RateLimits{}
	}
	l := parseRateLimits(h, server)
	if skew := now.Sub(server); skew != 0 {
		l.shift(skew, now)
	}
	return l
}

// shift moves every reset by skew, from the server's clock to the local
// one; none is before now.
func (r *RateLimits) shift(skew time.Duration, now time.Time) {
	for _, d := range dimensions {
		q := r.Quota(d)
		if q.Reset.IsZero() {
			continue
		}
		q.Reset = later(q.Reset.Add(skew), now)
	}
}

// hasRateLimitKey is the cheap pass every response pays: it only looks at
// the first bytes of each canonical key.
func hasRateLimitKey(h http.Header) bool {
	for k := range h {
		if len(k) < len("Ratelimit") {
			continue
		}
		// Byte tests before string compares: most keys fail on the first
		// or third byte, and X-Request-Id and the like on the fourth.
		switch k[0] {
		case 'R':
			if k[1] == 'a' && k[:9] == "Ratelimit" {
				return true
			}
		case 'X':
			if k[2] == 'R' && k[3] == 'a' &&
				(strings.HasPrefix(k, "X-Ratelimit-") || strings.HasPrefix(k, "X-Rate-Limit-")) {
				return true
			}
		case 'A':
			if k[1] == 'n' && strings.HasPrefix(k, "Anthropic-Ratelimit-") {
				return true
			}
		}
	}
	return false
}

// rlFields holds the raw values of one family's headers for one dimension.
type rlFields struct{ limit, remaining, reset string }

// rlHeaders holds the raw rate-limit header values of one response, by
// family, as found in one pass over the header map.
type rlHeaders struct {
	anthropic [4]rlFields // by Dimension
	openai    [2]rlFields // Requests, Tokens; x-ratelimit-*-requests|tokens
	azure     [2]rlFields // Requests, Tokens; x-rate-limit-*-requests|tokens
	ietf      []string    // RateLimit field lines
	policy    []string    // RateLimit-Policy field lines
	ietfOld   rlFields
	generic   rlFields // X-RateLimit-*
	used      string   // X-RateLimit-Used
	resetAft  string   // X-RateLimit-Reset-After
	twitter   rlFields // X-Rate-Limit-*
}

func parseRateLimits(h http.Header, now time.Time) RateLimits {
	var c rlHeaders
	for k, vs := range h {
		if len(vs) == 0 {
			continue
		}
		c.collect(k, vs)
	}

	// Per family, what it says about each dimension, most specific first.
	var out RateLimits
	var windows [4]time.Duration
	var replenishing [4]bool
	// take gives dimension d the quota q of a family unless a more specific
	// family, taken earlier, already said something about d.
	take := func(d Dimension, q *Quota, w time.Duration, repl bool) {
		if dst := out.Quota(d); !dst.Known() && q.Known() {
			*dst = *q
			windows[d], replenishing[d] = w, repl
		}
	}

	// Anthropic and OpenAI quotas are token buckets: reset is when the
	// bucket is full again.
	for _, d := range dimensions {
		q := c.anthropic[d].quota(now)
		take(d, &q, 0, true)
	}

	for i, d := range [...]Dimension{Requests, Tokens} {
		q := mergeQuota(c.openai[i].quota(now), c.azure[i].quota(now))
		take(d, &q, 0, true)
	}

	if len(c.ietf) > 0 || len(c.policy) > 0 {
		q, w := parseIETFRateLimit(c.ietf, c.policy, now)
		for _, d := range dimensions {
			take(d, &q[d], w[d], false)
		}
	}

	if q := c.ietfOld.quota(now); q.Known() {
		take(Requests, &q, ietfOldWindow(c.ietfOld.limit, c.policy, q), false)
	}

	g := c.generic.quota(now)
	if !g.HasRemaining && g.HasLimit && c.used != "" {
		if used, ok := parseRateCount(c.used); ok && used <= g.Limit {
			g.Remaining, g.HasRemaining = g.Limit-used, true
		}
	}
	if c.resetAft != "" {
		if t, coarse, ok := parseResetAt(c.resetAft, now); ok {
			g.Reset, g.Coarse = t, coarse
		}
	}
	take(Requests, &g, 0, false)

	q := c.twitter.quota(now)
	take(Requests, &q, 0, false)

	out.Window = windows[Requests]
	for _, w := range windows {
		if out.Window == 0 {
			out.Window = w
		}
	}
	for _, d := range dimensions {
		if out.Quota(d).Known() {
			out.Replenishing = replenishing[d]
			break
		}
	}
	return out
}

// collect files the first value of one header (all lines of the structured
// fields) under its family. Unknown keys are ignored.
func (c *rlHeaders) collect(k string, vs []string) {
	v := vs[0]
	switch k {
	case "Anthropic-Ratelimit-Requests-Limit":
		c.anthropic[Requests].limit = v
	case "Anthropic-Ratelimit-Requests-Remaining":
		c.anthropic[Requests].remaining = v
	case "Anthropic-Ratelimit-Requests-Reset":
		c.anthropic[Requests].reset = v
	case "Anthropic-Ratelimit-Tokens-Limit":
		c.anthropic[Tokens].limit = v
	case "Anthropic-Ratelimit-Tokens-Remaining":
		c.anthropic[Tokens].remaining = v
	case "Anthropic-Ratelimit-Tokens-Reset":
		c.anthropic[Tokens].reset = v
	case "Anthropic-Ratelimit-Input-Tokens-Limit":
		c.anthropic[InputTokens].limit = v
	case "Anthropic-Ratelimit-Input-Tokens-Remaining":
		c.anthropic[InputTokens].remaining = v
	case "Anthropic-Ratelimit-Input-Tokens-Reset":
		c.anthropic[InputTokens].reset = v
	case "Anthropic-Ratelimit-Output-Tokens-Limit":
		c.anthropic[OutputTokens].limit = v
	case "Anthropic-Ratelimit-Output-Tokens-Remaining":
		c.anthropic[OutputTokens].remaining = v
	case "Anthropic-Ratelimit-Output-Tokens-Reset":
		c.anthropic[OutputTokens].reset = v

	case "X-Ratelimit-Limit-Requests":
		c.openai[0].limit = v
	case "X-Ratelimit-Remaining-Requests":
		c.openai[0].remaining = v
	case "X-Ratelimit-Reset-Requests":
		c.openai[0].reset = v
	case "X-Ratelimit-Limit-Tokens":
		c.openai[1].limit = v
	case "X-Ratelimit-Remaining-Tokens":
		c.openai[1].remaining = v
	case "X-Ratelimit-Reset-Tokens":
		c.openai[1].reset = v
	case "X-Rate-Limit-Limit-Requests":
		c.azure[0].limit = v
	case "X-Rate-Limit-Remaining-Requests":
		c.azure[0].remaining = v
	case "X-Rate-Limit-Reset-Requests":
		c.azure[0].reset = v
	case "X-Rate-Limit-Limit-Tokens":
		c.azure[1].limit = v
	case "X-Rate-Limit-Remaining-Tokens":
		c.azure[1].remaining = v
	case "X-Rate-Limit-Reset-Tokens":
		c.azure[1].reset = v

	case "Ratelimit":
		c.ietf = vs
	case "Ratelimit-Policy":
		c.policy = vs
	case "Ratelimit-Limit":
		c.ietfOld.limit = v
	case "Ratelimit-Remaining":
		c.ietfOld.remaining = v
	case "Ratelimit-Reset":
		c.ietfOld.reset = v

	case "X-Ratelimit-Limit":
		c.generic.limit = v
	case "X-Ratelimit-Remaining":
		c.generic.remaining = v
	case "X-Ratelimit-Reset":
		c.generic.reset = v
	case "X-Ratelimit-Used":
		c.used = v
	case "X-Ratelimit-Reset-After":
		c.resetAft = v

	case "X-Rate-Limit-Limit":
		c.twitter.limit = v
	case "X-Rate-Limit-Remaining":
		c.twitter.remaining = v
	case "X-Rate-Limit-Reset":
		c.twitter.reset = v
	}
}

func (f *rlFields) quota(now time.Time) Quota {
	var q Quota
	if *f == (rlFields{}) {
		return q
	}
	q.Limit, q.HasLimit = parseRateCount(f.limit)
	q.Remaining, q.HasRemaining = parseRateCount(f.remaining)
	q.Reset, q.Coarse, _ = parseResetAt(f.reset, now)
	return q
}

// mergeQuota fills the fields a lacks from b: two spellings of one family's
// headers describe the same window, so mixing them is sound.
func mergeQuota(a, b Quota) Quota {
	if !a.HasLimit {
		a.Limit, a.HasLimit = b.Limit, b.HasLimit
	}
	if !a.HasRemaining {
		a.Remaining, a.HasRemaining = b.Remaining, b.HasRemaining
	}
	if a.Reset.IsZero() {
		a.Reset, a.Coarse = b.Reset, b.Coarse
	}
	return a
}

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

// maxSFMembers bounds the members read from one structured field, so a
// hostile header cannot make matching items to policies quadratic in its
// size. Real servers send one to three.
const maxSFMembers = 32

// sfMember is one member of an RFC 9651 list, reduced to what the IETF
// rate-limit fields use.
type sfMember struct {
	name          string // the bare item when it is a string or token
	num           string // the bare item when it is a number
	r, t, q, w    string // those parameters' values, raw; "" when absent
	qu            string // the quota unit parameter (a string or token)
	isName, isNum bool
}

// ietfPolicy is one RateLimit-Policy member, read.
type ietfPolicy struct {
	name   string
	dim    Dimension
	ok     bool // dim is one we model
	limit  int64
	hasLim bool
	window time.Duration
}

// parseIETFRateLimit reads the current draft's RateLimit and
// RateLimit-Policy fields (see ParseRateLimits).
func parseIETFRateLimit(items, policies []string, now time.Time) (q [4]Quota, w [4]time.Duration) {
	var buf [4]ietfPolicy
	pols := buf[:0]
	sfEachMember(policies, func(m *sfMember) {
		if !m.isName {
			return // an older draft's numeric policy; see ietfOldWindow
		}
		p := ietfPolicy{name: m.name}
		p.dim, p.ok = ietfDimension(m.name, m.qu)
		p.limit, p.hasLim = parseRateCount(m.q)
		if m.w != "" {
			p.window, _ = parseWindow(m.w)
		}
		pols = append(pols, p)
	})

	var fromItem [4]bool
	sfEachMember(items, func(m *sfMember) {
		if !m.isName {
			return
		}
		var p *ietfPolicy
		for i := range pols {
			if pols[i].name == m.name {
				p = &pols[i]
				break
			}
		}
		var dim Dimension
		var ok bool
		if p != nil {
			dim, ok = p.dim, p.ok
		} else {
			dim, ok = ietfDimension(m.name, m.qu)
		}
		if !ok {
			return
		}
		var c Quota
		c.Remaining, c.HasRemaining = parseRateCount(m.r)
		c.Reset, c.Coarse, _ = parseResetAt(m.t, now)
		var win time.Duration
		if p != nil {
			c.Limit, c.HasLimit = p.limit, p.hasLim
			win = p.window
		}
		if !c.Known() {
			return
		}
		if !fromItem[dim] || tighter(c, q[dim]) {
			q[dim], w[dim], fromItem[dim] = c, win, true
		}
	})

	for _, p := range pols {
		if p.ok && p.hasLim && !fromItem[p.dim] && !q[p.dim].Known() {
			q[p.dim] = Quota{Limit: p.limit, HasLimit: true}
			w[p.dim] = p.window
		}
	}
	return q, w
}

// tighter reports whether quota a binds before b: it has less remaining,
// or as much and a later reset.
func tighter(a, b Quota) bool {
	if a.HasRemaining != b.HasRemaining {
		return a.HasRemaining
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.Reset.After(b.Reset)
}

// ietfDimension maps a policy to a dimension by its quota unit or, without
// one, its name. The draft defines the units requests, content-bytes and
// concurrent-requests; LLM servers that count tokens say so in the unit or
// the name.
func ietfDimension(name, qu string) (Dimension, bool) {
	if qu != "" && !containsFold(qu, "token") {
		return Requests, strings.EqualFold(qu, "requests")
	}
	if qu == "" && !containsFold(name, "token") {
		return Requests, true
	}
	for _, s := range [...]string{qu, name} {
		switch {
		case containsFold(s, "input") || containsFold(s, "prompt"):
			return InputTokens, true
		case containsFold(s, "output") || containsFold(s, "completion"):
			return OutputTokens, true
		}
	}
	return Tokens, true
}

// containsFold reports whether s contains the lower-case ASCII sub, ignoring
// ASCII case, without allocating.
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// ietfOldWindow finds the window of the older draft's policy matching the
// limit: "RateLimit-Limit: 100, 100;w=60", or a numeric RateLimit-Policy
// "100;w=60". Zero when none says.
func ietfOldWindow(limit string, policies []string, q Quota) time.Duration {
	var win time.Duration
	found := false
	look := func(m *sfMember) {
		if found || !m.isNum || m.w == "" {
			return
		}
		if n, ok := parseRateCount(m.num); ok && (!q.HasLimit || n == q.Limit) {
			win, found = parseWindow(m.w)
		}
	}
	sfEachMember([]string{limit}, look)
	sfEachMember(policies, look)
	return win
}

// sfEachMember calls f with each member of an RFC 9651 list given as field
// lines (several lines are one list, as if joined by commas). Unlike a
// strict parser it skips a malformed member instead of rejecting the field,
// and reads at most maxSFMembers members.
func sfEachMember(lines []string, f func(*sfMember)) {
	n := 0
	for _, v := range lines {
		i := 0
		for n < maxSFMembers {
			i = skipOWS(v, i)
			if i >= len(v) {
				break
			}
			n++
			var m sfMember
			j, ok := sfParseMember(v, i, &m)
			if ok {
				j = skipOWS(v, j)
				ok = j >= len(v) || v[j] == ','
			}
			if ok {
				f(&m)
			} else {
				j = sfSkipMember(v, i)
			}
			if j >= len(v) {
				break
			}
			i = j + 1 // past the comma
		}
	}
}

func skipOWS(v string, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t') {
		i++
	}
	return i
}

// sfSkipMember returns the index of the comma ending the member that starts
// at i (or len(v)), stepping over quoted strings.
func sfSkipMember(v string, i int) int {
	inStr := false
	for ; i < len(v); i++ {
		switch c := v[i]; {
		case inStr && c == '\\':
			i++
		case c == '"':
			inStr = !inStr
		case !inStr && c == ',':
			return i
		}
	}
	return len(v)
}

// sfParseMember parses an item with its parameters at v[i:], returning the
// index after it. Inner lists and bare-item types the rate-limit fields do
// not use are reported as malformed.
func sfParseMember(v string, i int, m *sfMember) (int, bool) {
	val, kind, j, ok := sfParseBare(v, i)
	if !ok {
		return i, false
	}
	switch kind {
	case sfString, sfToken:
		m.name, m.isName = val, true
	case sfNumber:
		m.num, m.isNum = val, true
	}
	for {
		k := skipOWS(v, j) // lenient: RFC 9651 allows no space before ';'
		if k >= len(v) || v[k] != ';' {
			return j, true
		}
		j = skipOWS(v, k+1)
		start := j
		for j < len(v) && isSFKeyChar(v[j], j == start) {
			j++
		}
		if j == start {
			return j, false
		}
		key := v[start:j]
		pv := "?1" // a parameter without a value is Boolean true
		if j < len(v) && v[j] == '=' {
			pv, _, j, ok = sfParseBare(v, j+1)
			if !ok {
				return j, false
			}
		}
		switch key {
		case "r":
			m.r = pv
		case "t":
			m.t = pv
		case "q":
			m.q = pv
		case "w":
			m.w = pv
		case "qu":
			m.qu = pv
		}
	}
}

// isSFKeyChar reports whether c may appear in a parameter key (RFC 9651
// §3.1.2; upper case accepted too, leniently).
func isSFKeyChar(c byte, first bool) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '*':
		return true
	case first:
		return false
	}
	return c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}

// Bare-item kinds the parser tells apart.
const (
	sfString = iota
	sfToken
	sfNumber
	sfBoolean
	sfOther // byte sequence, date or display string: only skipped over
)

// sfParseBare parses a bare item at v[i:]: a string (unescaped), a token,
// a number (raw, sign included) or a boolean.
func sfParseBare(v string, i int) (val string, kind, next int, ok bool) {
	if i >= len(v) {
		return "", 0, i, false
	}
	switch c := v[i]; {
	case c == '"':
		return sfParseString(v, i)
	case c == '-' || c >= '0' && c <= '9':
		j := i
		if c == '-' {
			j++
		}
		digits := j
		for j < len(v) && (v[j] >= '0' && v[j] <= '9' || v[j] == '.') {
			j++
		}
		if j == digits {
			return "", 0, j, false
		}
		return v[i:j], sfNumber, j, true
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '*':
		j := i + 1
		for j < len(v) && isTokenChar(v[j]) {
			j++
		}
		return v[i:j], sfToken, j, true
	case c == '?':
		if i+1 < len(v) && (v[i+1] == '0' || v[i+1] == '1') {
			return v[i : i+2], sfBoolean, i + 2, true
		}
	case c == ':': // byte sequence, as the draft's pk parameter: kept raw
		if j := strings.IndexByte(v[i+1:], ':'); j >= 0 {
			return v[i : i+j+2], sfOther, i + j + 2, true
		}
	case c == '@': // date: a number of seconds
		if j := i + 1; j < len(v) && (v[j] == '-' || v[j] >= '0' && v[j] <= '9') {
			_, _, k, ok := sfParseBare(v, j)
			return v[i:k], sfOther, k, ok
		}
	case c == '%': // display string: a quoted string, kept raw
		if i+1 < len(v) && v[i+1] == '"' {
			_, _, k, ok := sfParseString(v, i+1)
			return v[i:k], sfOther, k, ok
		}
	}
	return "", 0, i, false
}

// isTokenChar reports whether c may continue an sf-token: tchar, ":" or "/".
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}

// sfParseString parses a quoted string at v[i]; only \" and \\ escapes are
// valid. It allocates only when the string has escapes.
func sfParseString(v string, i int) (string, int, int, bool) {
	escaped := false
	for j := i + 1; j < len(v); j++ {
		switch c := v[j]; {
		case c == '\\':
			if j+1 >= len(v) || v[j+1] != '"' && v[j+1] != '\\' {
				return "", 0, j, false
			}
			escaped = true
			j++
		case c == '"':
			s := v[i+1 : j]
			if escaped {
				var b strings.Builder
				for k := 0; k < len(s); k++ {
					if s[k] == '\\' {
						k++
					}
					b.WriteByte(s[k])
				}
				s = b.String()
			}
			return s, sfString, j + 1, true
		case c < 0x20 || c >= 0x7f:
			return "", 0, j, false
		}
	}
	return "", 0, len(v), false
}
