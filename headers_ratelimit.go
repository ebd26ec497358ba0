package retryhttp

// Rate-limit headers: ParseRateLimits and the dispatch over the header
// families servers use, as their providers document them (see
// docs/providers.md): Anthropic anthropic-ratelimit-* (RFC 3339 resets),
// OpenAI x-ratelimit-*-{requests,tokens} and Azure OpenAI's
// x-rate-limit-*-{requests,tokens} (Go-duration resets), GitHub-style
// X-RateLimit-* (epoch resets) with Discord's X-RateLimit-Reset-After, X's
// x-rate-limit-*, and the values of the older IETF draft's RateLimit-Limit,
// RateLimit-Remaining and RateLimit-Reset. Then the readers of the values
// all families share: counts, resets and windows. The keys of every family
// are told apart in one switch (rlHeaders.collect) and the families are
// ranked in parseRateLimits. The current IETF draft's structured fields
// are read in headers_ietf.go; the types filled here (RateLimits, Quota,
// Dimension) are in ratelimit.go.

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

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
