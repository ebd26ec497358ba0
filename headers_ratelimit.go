package retryhttp

// Rate-limit headers: ParseRateLimits, the cheap pass that tells whether a
// response has any (hasRateLimitKey), and the dispatch over the header
// families servers use. Each family is in its own file, with the names of
// its headers (collect) and how they become quotas (quotas):
//
//   - headers_anthropic.go: Anthropic's anthropic-ratelimit-*;
//   - headers_openai.go: OpenAI's x-ratelimit-*-{requests,tokens} and Azure
//     OpenAI's x-rate-limit-*-{requests,tokens};
//   - headers_ietf.go: the IETF drafts' RateLimit and RateLimit-Policy
//     (current) and RateLimit-{Limit,Remaining,Reset} (older);
//   - headers_github.go: GitHub-style X-RateLimit-* with X-RateLimit-Used
//     and Discord's X-RateLimit-Reset-After, and X's x-rate-limit-*.
//
// rlHeaders.collect files each header under its family in one pass over
// the header map; parseRateLimits asks the families for their quotas in
// precedence order, the most specific first, and rlResult.take keeps, per
// dimension, the first family's. The values all families share (counts,
// resets, windows) are read in headers_values.go; the types filled here
// (RateLimits, Quota, Dimension) are in ratelimit.go; docs/providers.md
// says, per provider, what is read and which test checks it.

import (
	"net/http"
	"strings"
	"time"
)

// ParseRateLimits reads the rate-limit state that the headers of one response
// describe, at time now, normalised across the header families servers use.
// It never fails: a value that cannot be read leaves its field unset, and a
// response without rate-limit headers yields the zero [RateLimits] (one pass
// over the header keys, no allocation). Keys are matched in canonical form,
// as [http.Header.Get] does.
//
// Families, most specific first. When several describe the same dimension,
// the first in this list that says anything about it supplies that
// dimension's whole [Quota] (fields are never mixed across families, whose
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
//     tokens maps to [Tokens] ([InputTokens] or [OutputTokens] if it also says
//     input/prompt or output/completion); qu="requests" or no qu and a plain
//     name map to [Requests]; other units (content-bytes, concurrent-requests)
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
// they are read against the response's Date header (see [ServerNow]) and the
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
		if isRateLimitKey(k) {
			return true
		}
	}
	return false
}

// isRateLimitKey reports a canonical key of one of the rate-limit header
// families (the transport's own one pass over a response's keys, in
// outcome.go, asks it too).
func isRateLimitKey(k string) bool {
	if len(k) < len("Ratelimit") {
		return false
	}
	// Byte tests before string compares: most keys fail on the first
	// or third byte, and X-Request-Id and the like on the fourth.
	switch k[0] {
	case 'R':
		return k[1] == 'a' && k[:9] == "Ratelimit"
	case 'X':
		return k[2] == 'R' && k[3] == 'a' &&
			(strings.HasPrefix(k, "X-Ratelimit-") || strings.HasPrefix(k, "X-Rate-Limit-"))
	case 'A':
		return k[1] == 'n' && strings.HasPrefix(k, "Anthropic-Ratelimit-")
	}
	return false
}

// rlFields holds the raw values of one family's headers for one dimension.
type rlFields struct{ limit, remaining, reset string }

// quota reads the three values as they are; a family with more to say
// (X-RateLimit-Used, a policy window) adds it to what this returns.
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

// rlHeaders holds the raw rate-limit header values of one response, by
// family, as found in one pass over the header map. Each family's type,
// with its collect and quotas, is in its headers_<family>.go.
type rlHeaders struct {
	anthropic anthropicFields
	openai    openaiFields
	ietf      ietfFields
	github    githubFields
	x         xFields
}

// collect files the first value of one header (all lines of the structured
// fields) under its family. Unknown keys are ignored. The first byte of the
// canonical key says which families may know it, as in hasRateLimitKey;
// the shortest key any family reads is "Ratelimit".
func (c *rlHeaders) collect(k string, vs []string) {
	if len(k) < len("Ratelimit") {
		return
	}
	v := vs[0]
	switch k[0] {
	case 'A':
		c.anthropic.collect(k, v)
	case 'R':
		c.ietf.collect(k, vs)
	case 'X':
		if !c.openai.collect(k, v) && !c.github.collect(k, v) {
			c.x.collect(k, v)
		}
	}
}

func parseRateLimits(h http.Header, now time.Time) RateLimits {
	var c rlHeaders
	for k, vs := range h {
		if len(vs) == 0 {
			continue
		}
		c.collect(k, vs)
	}

	// Per family, what it says about each dimension, most specific first:
	// the order of the list in ParseRateLimits.
	var r rlResult
	c.anthropic.quotas(now, &r)
	c.openai.quotas(now, &r)
	c.ietf.quotas(now, &r)
	c.ietf.oldQuotas(now, &r)
	c.github.quotas(now, &r)
	c.x.quotas(now, &r)
	return r.result()
}

// rlResult gathers the quotas the families give, per dimension, with the
// window and the kind of quota of the family that supplied each.
type rlResult struct {
	out          RateLimits
	windows      [4]time.Duration
	replenishing [4]bool
}

// take gives dimension d the quota q of a family, with its policy window w
// and whether it is a token bucket (repl), unless a more specific family,
// taken earlier, already said something about d.
func (r *rlResult) take(d Dimension, q *Quota, w time.Duration, repl bool) {
	if dst := r.out.Quota(d); !dst.Known() && q.Known() {
		*dst = *q
		r.windows[d], r.replenishing[d] = w, repl
	}
}

// result sets Window (that of Requests, else of the first dimension that
// has one) and Replenishing (that of the family that supplied Requests,
// else the first dimension known).
func (r *rlResult) result() RateLimits {
	r.out.Window = r.windows[Requests]
	for _, w := range r.windows {
		if r.out.Window == 0 {
			r.out.Window = w
		}
	}
	for _, d := range dimensions {
		if r.out.Quota(d).Known() {
			r.out.Replenishing = r.replenishing[d]
			break
		}
	}
	return r.out
}
