package retryhttp

// The generic X-RateLimit-* headers (GitHub and most others, Discord's
// X-RateLimit-Reset-After among them) and X's (Twitter's) x-rate-limit-*,
// all for Requests:
//
//	X-RateLimit-Limit, -Remaining, -Reset  GitHub and most others
//	X-RateLimit-Used                       GitHub: Remaining = Limit - Used when Remaining is missing
//	X-RateLimit-Reset-After                Discord: delay-seconds, preferred to X-RateLimit-Reset
//	x-rate-limit-limit, -remaining, -reset X (Twitter)
//
// Both are fixed windows: the reset is the end of the window, when the
// whole quota comes back at once, not a bucket refilling. GitHub and X send
// it as Unix epoch seconds on the server's clock; other servers send delta
// seconds, epoch milliseconds, an HTTP-date, RFC 3339 or a Go duration
// under the same name, told apart as parseResetAt says. Discord's
// Reset-After is a delay, immune to clock skew, so it wins. These are the
// least specific families, taken last: GitHub-style, then X. See
// docs/providers.md (GitHub, X (Twitter), Generic X-RateLimit-*).

import "time"

// githubFields holds the generic X-RateLimit-* values.
type githubFields struct {
	rlFields        // X-RateLimit-Limit, -Remaining, -Reset
	used     string // X-RateLimit-Used
	resetAft string // X-RateLimit-Reset-After
}

// collect files v if k is one of the generic names, and reports whether it
// was.
func (g *githubFields) collect(k, v string) bool {
	switch k {
	case "X-Ratelimit-Limit":
		g.limit = v
	case "X-Ratelimit-Remaining":
		g.remaining = v
	case "X-Ratelimit-Reset":
		g.reset = v
	case "X-Ratelimit-Used":
		g.used = v
	case "X-Ratelimit-Reset-After":
		g.resetAft = v
	default:
		return false
	}
	return true
}

// quotas gives Requests the fixed window, Remaining from Used if need be
// and the reset from Reset-After if it can be read.
func (g *githubFields) quotas(now time.Time, r *rlResult) {
	q := g.quota(now)
	if !q.HasRemaining && q.HasLimit && g.used != "" {
		if used, ok := parseRateCount(g.used); ok && used <= q.Limit {
			q.Remaining, q.HasRemaining = q.Limit-used, true
		}
	}
	if g.resetAft != "" {
		if t, coarse, ok := parseResetAt(g.resetAft, now); ok {
			q.Reset, q.Coarse = t, coarse
		}
	}
	r.take(Requests, &q, 0, false)
}

// xFields holds X's x-rate-limit-* values.
type xFields rlFields

// collect files v if k is one of X's names, and reports whether it was.
func (x *xFields) collect(k, v string) bool {
	switch k {
	case "X-Rate-Limit-Limit":
		x.limit = v
	case "X-Rate-Limit-Remaining":
		x.remaining = v
	case "X-Rate-Limit-Reset":
		x.reset = v
	default:
		return false
	}
	return true
}

// quotas gives Requests the fixed window.
func (x *xFields) quotas(now time.Time, r *rlResult) {
	q := (*rlFields)(x).quota(now)
	r.take(Requests, &q, 0, false)
}
