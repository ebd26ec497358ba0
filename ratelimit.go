package retryhttp

import "time"

// Dimension names what a rate limit counts.
type Dimension int

const (
	// Requests counts requests (RPM).
	Requests Dimension = iota
	// Tokens counts input and output tokens together, as some providers do.
	Tokens
	// InputTokens counts prompt tokens (ITPM).
	InputTokens
	// OutputTokens counts generated tokens (OTPM).
	OutputTokens
)

// dimensions lists every Dimension, for loops.
var dimensions = [...]Dimension{Requests, Tokens, InputTokens, OutputTokens}

// units is how much of the dimension one attempt of in input and out
// output tokens takes.
func (d Dimension) units(in, out int) int {
	switch d {
	case Requests:
		return 1
	case Tokens:
		return in + out
	case InputTokens:
		return in
	case OutputTokens:
		return out
	}
	return 0
}

// String names the dimension as the headers do.
func (d Dimension) String() string {
	switch d {
	case Requests:
		return "requests"
	case Tokens:
		return "tokens"
	case InputTokens:
		return "input-tokens"
	case OutputTokens:
		return "output-tokens"
	}
	return "unknown"
}

// Quota is what a server said about one dimension of its rate limit. The zero
// value means it said nothing.
type Quota struct {
	Limit        int64     // the most allowed per window (when HasLimit)
	Remaining    int64     // what is left now (when HasRemaining)
	Reset        time.Time // when the quota is whole again; zero if not said
	HasLimit     bool
	HasRemaining bool
	// Coarse reports that Reset came as an absolute time in whole seconds
	// (RFC 3339, epoch seconds, HTTP-date): servers cut it up or down, so it
	// is good to about a second either way, never exact.
	Coarse bool
}

// Known reports whether the server said anything about this dimension.
func (q Quota) Known() bool { return q.HasLimit || q.HasRemaining || !q.Reset.IsZero() }

// Exhausted reports whether the server said nothing remains.
func (q Quota) Exhausted() bool { return q.HasRemaining && q.Remaining <= 0 }

// RateLimits is the rate-limit state one response's headers describe,
// normalised across header families (see [ParseRateLimits]).
type RateLimits struct {
	Requests     Quota
	Tokens       Quota // input and output together
	InputTokens  Quota
	OutputTokens Quota
	// Window is the length of the quota window when a header states it (the
	// IETF RateLimit-Policy "w" parameter); zero otherwise.
	Window time.Duration
	// Replenishing reports that Reset is when a continuously refilled quota
	// is whole again (a token bucket: OpenAI, Anthropic), not the end of a
	// fixed window (GitHub, X, the IETF drafts).
	Replenishing bool
}

// Quota returns the quota of one dimension.
func (r *RateLimits) Quota(d Dimension) *Quota {
	switch d {
	case Tokens:
		return &r.Tokens
	case InputTokens:
		return &r.InputTokens
	case OutputTokens:
		return &r.OutputTokens
	}
	return &r.Requests
}

// Known reports whether any dimension was stated.
func (r RateLimits) Known() bool {
	for _, d := range dimensions {
		if r.Quota(d).Known() {
			return true
		}
	}
	return false
}
