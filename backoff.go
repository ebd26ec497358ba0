package retryhttp

import (
	"math"
	"time"
)

// JitterStrategy chooses how randomness spreads retries out so that many
// clients that failed together do not come back together. The three are the
// ones compared in AWS's "Exponential Backoff and Jitter" study.
type JitterStrategy int

const (
	// AdditiveJitter waits min(base·m^(k-1), max) plus a uniform draw from
	// [0, WithJitter). The default: waits never fall below the computed
	// schedule, which is what callers reading "1s, 2s, 4s" expect.
	AdditiveJitter JitterStrategy = iota
	// FullJitter waits a uniform draw from [0, min(base·m^(k-1), max)). It
	// does the least total work under contention but may retry almost at once.
	FullJitter
	// DecorrelatedJitter waits min(max, uniform draw from [base, 3·previous)),
	// which finishes slightly sooner than [FullJitter] in the AWS study.
	DecorrelatedJitter
)

// String names the strategy.
func (s JitterStrategy) String() string {
	switch s {
	case AdditiveJitter:
		return "additive"
	case FullJitter:
		return "full"
	case DecorrelatedJitter:
		return "decorrelated"
	}
	return "unknown"
}

// exponential returns min(base·m^(retry-1), cap) without overflowing for
// large retry numbers: the product is formed in float64 and clamped before it
// is turned back into a Duration.
func (p *policy) exponential(retry int) time.Duration {
	if retry < 1 {
		retry = 1
	}
	d := float64(p.backoffBase) * math.Pow(p.multiplier, float64(retry-1))
	if math.IsNaN(d) || d >= float64(p.backoffMax) {
		return p.backoffMax
	}
	return time.Duration(d)
}

// backoff computes the wait before retry number retry (1-based). prev is the
// wait before the previous retry (used by DecorrelatedJitter); draw returns a
// uniform integer in [0, n) for n > 0.
func (p *policy) backoff(retry int, prev time.Duration, draw func(n int64) int64) time.Duration {
	switch p.jitterStrategy {
	case FullJitter:
		return uniform(0, p.exponential(retry), draw)
	case DecorrelatedJitter:
		lo := p.backoffBase
		hi := p.backoffMax
		if prev >= lo && prev < p.backoffMax/3 {
			hi = 3 * prev
		}
		if prev < lo {
			hi = min(3*lo, p.backoffMax)
		}
		return min(uniform(lo, hi, draw), p.backoffMax)
	default:
		return p.exponential(retry) + uniform(0, p.jitter, draw)
	}
}

// uniform draws from [lo, hi); it returns lo when the range is empty.
func uniform(lo, hi time.Duration, draw func(n int64) int64) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(draw(int64(hi-lo)))
}
