package retryhttp

// The IETF rate-limit header fields (draft-ietf-httpapi-ratelimit-headers),
// for any server that follows the drafts (Cloudflare among them):
//
//	RateLimit, RateLimit-Policy                   the current draft
//	RateLimit-Limit, -Remaining, -Reset           the older drafts, as Requests
//
// The current draft's fields are RFC 9651 lists, such as
// RateLimit: "default";r=50;t=30 and RateLimit-Policy: "default";q=100;w=60,
// matched item to policy by name and mapped to a Dimension; the older
// drafts state the window in RateLimit-Limit ("100, 100;w=60") or in a
// numeric RateLimit-Policy. Either way a quota is a fixed window of w
// seconds: the reset (t, RateLimit-Reset) is delay-seconds to the end of
// the window, when the quota comes back, not a bucket refilling (an epoch
// is read as such by the magnitude rule). Taken after Anthropic and
// OpenAI, the current draft before the older, both before the X-RateLimit-*
// families. The lists are parsed by structuredfield.go. See
// docs/providers.md (IETF RateLimit and RateLimit-Policy, IETF RateLimit-*
// (older drafts)).

import (
	"strings"
	"time"
)

// ietfFields holds the IETF fields of one response: every line of the
// current draft's structured fields, the first of the older draft's.
type ietfFields struct {
	items  []string // RateLimit field lines
	policy []string // RateLimit-Policy field lines
	old    rlFields // RateLimit-Limit, -Remaining, -Reset
}

// collect files the value of k if it is one of the IETF names, and reports
// whether it was.
func (c *ietfFields) collect(k string, vs []string) bool {
	switch k {
	case "Ratelimit":
		c.items = vs
	case "Ratelimit-Policy":
		c.policy = vs
	case "Ratelimit-Limit":
		c.old.limit = vs[0]
	case "Ratelimit-Remaining":
		c.old.remaining = vs[0]
	case "Ratelimit-Reset":
		c.old.reset = vs[0]
	default:
		return false
	}
	return true
}

// quotas gives each dimension the current draft's quota and window.
func (c *ietfFields) quotas(now time.Time, r *rlResult) {
	if len(c.items) == 0 && len(c.policy) == 0 {
		return
	}
	q, w := parseIETFRateLimit(c.items, c.policy, now)
	for _, d := range dimensions {
		r.take(d, &q[d], w[d], false)
	}
}

// oldQuotas gives Requests the older drafts' quota, with the window of the
// matching policy.
func (c *ietfFields) oldQuotas(now time.Time, r *rlResult) {
	if q := c.old.quota(now); q.Known() {
		r.take(Requests, &q, ietfOldWindow(c.old.limit, c.policy, q), false)
	}
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
