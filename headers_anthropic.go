package retryhttp

// Anthropic's rate-limit headers (the Claude API), one set per dimension:
//
//	anthropic-ratelimit-requests-{limit,remaining,reset}       Requests
//	anthropic-ratelimit-tokens-{limit,remaining,reset}         Tokens (input and output together)
//	anthropic-ratelimit-input-tokens-{limit,remaining,reset}   InputTokens
//	anthropic-ratelimit-output-tokens-{limit,remaining,reset}  OutputTokens
//
// Each quota is a token bucket: the reset is when the bucket is full again,
// not the end of a window, and it is an RFC 3339 instant on the server's
// clock ("2026-11-30T12:00:59Z"), whole seconds as sent, with or without a
// fraction, with any offset; one in the past reads as now. The most
// specific family: it is taken before all others. See docs/providers.md
// (Anthropic).

import "time"

// anthropicFields holds the anthropic-ratelimit-* values, by Dimension.
type anthropicFields [4]rlFields

// collect files v if k is one of Anthropic's names, and reports whether it was.
func (a *anthropicFields) collect(k, v string) bool {
	switch k {
	case "Anthropic-Ratelimit-Requests-Limit":
		a[Requests].limit = v
	case "Anthropic-Ratelimit-Requests-Remaining":
		a[Requests].remaining = v
	case "Anthropic-Ratelimit-Requests-Reset":
		a[Requests].reset = v
	case "Anthropic-Ratelimit-Tokens-Limit":
		a[Tokens].limit = v
	case "Anthropic-Ratelimit-Tokens-Remaining":
		a[Tokens].remaining = v
	case "Anthropic-Ratelimit-Tokens-Reset":
		a[Tokens].reset = v
	case "Anthropic-Ratelimit-Input-Tokens-Limit":
		a[InputTokens].limit = v
	case "Anthropic-Ratelimit-Input-Tokens-Remaining":
		a[InputTokens].remaining = v
	case "Anthropic-Ratelimit-Input-Tokens-Reset":
		a[InputTokens].reset = v
	case "Anthropic-Ratelimit-Output-Tokens-Limit":
		a[OutputTokens].limit = v
	case "Anthropic-Ratelimit-Output-Tokens-Remaining":
		a[OutputTokens].remaining = v
	case "Anthropic-Ratelimit-Output-Tokens-Reset":
		a[OutputTokens].reset = v
	default:
		return false
	}
	return true
}

// quotas gives each dimension its token bucket.
func (a *anthropicFields) quotas(now time.Time, r *rlResult) {
	for _, d := range dimensions {
		q := a[d].quota(now)
		r.take(d, &q, 0, true)
	}
}
