package retryhttp

// OpenAI's rate-limit headers, and Azure OpenAI's other spelling of them:
//
//	x-ratelimit-{limit,remaining,reset}-requests   Requests (OpenAI, Azure)
//	x-ratelimit-{limit,remaining,reset}-tokens     Tokens
//	x-rate-limit-{limit,remaining,reset}-requests  Requests (Azure)
//	x-rate-limit-{limit,remaining,reset}-tokens    Tokens
//
// Each quota is a token bucket: the reset is when the bucket is full again,
// not the end of a window. OpenAI sends it as a Go duration to the
// millisecond ("6m0s", "20ms", "1m30.5s"); Azure's x-rate-limit- spelling
// as integer delay-seconds ("55"), sometimes -1 (ignored) or 0 (now). The
// two spellings are one family describing one bucket, so they are merged
// field by field (mergeQuota), the x-ratelimit- spelling first. The
// x-rate-limit-{limit,remaining,reset} names without a -requests/-tokens
// suffix are X's (headers_github.go). Taken after Anthropic, before the
// IETF fields. See docs/providers.md (OpenAI, Azure OpenAI).

import "time"

// openaiFields holds the values of both spellings, [0] Requests and
// [1] Tokens.
type openaiFields struct {
	openai [2]rlFields // x-ratelimit-*-requests|tokens
	azure  [2]rlFields // x-rate-limit-*-requests|tokens
}

// collect files v if k is one of OpenAI's or Azure's names, and reports
// whether it was.
func (o *openaiFields) collect(k, v string) bool {
	switch k {
	case "X-Ratelimit-Limit-Requests":
		o.openai[0].limit = v
	case "X-Ratelimit-Remaining-Requests":
		o.openai[0].remaining = v
	case "X-Ratelimit-Reset-Requests":
		o.openai[0].reset = v
	case "X-Ratelimit-Limit-Tokens":
		o.openai[1].limit = v
	case "X-Ratelimit-Remaining-Tokens":
		o.openai[1].remaining = v
	case "X-Ratelimit-Reset-Tokens":
		o.openai[1].reset = v
	case "X-Rate-Limit-Limit-Requests":
		o.azure[0].limit = v
	case "X-Rate-Limit-Remaining-Requests":
		o.azure[0].remaining = v
	case "X-Rate-Limit-Reset-Requests":
		o.azure[0].reset = v
	case "X-Rate-Limit-Limit-Tokens":
		o.azure[1].limit = v
	case "X-Rate-Limit-Remaining-Tokens":
		o.azure[1].remaining = v
	case "X-Rate-Limit-Reset-Tokens":
		o.azure[1].reset = v
	default:
		return false
	}
	return true
}

// quotas gives Requests and Tokens their token buckets, the two spellings
// merged.
func (o *openaiFields) quotas(now time.Time, r *rlResult) {
	for i, d := range [...]Dimension{Requests, Tokens} {
		q := mergeQuota(o.openai[i].quota(now), o.azure[i].quota(now))
		r.take(d, &q, 0, true)
	}
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
