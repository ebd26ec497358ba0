package retryhttp

// The IETF rate-limit header fields (draft-ietf-httpapi-ratelimit-headers):
// the current draft's RateLimit and RateLimit-Policy, RFC 9651 lists such as
// RateLimit: "default";r=50;t=30 and RateLimit-Policy: "default";q=100;w=60,
// matched item to policy by name and mapped to a Dimension; and the window
// that the older drafts state in RateLimit-Limit ("100, 100;w=60") or in a
// numeric RateLimit-Policy. The values of the older draft's RateLimit-Limit,
// RateLimit-Remaining and RateLimit-Reset are read like the other families,
// in headers_ratelimit.go; the lists are parsed by structuredfield.go.

import (
	"strings"
	"time"
)

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
