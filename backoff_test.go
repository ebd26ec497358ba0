package retryhttp

import (
	"math"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// draws returns a draw function that always picks the given fraction of the
// range, so jittered waits can be checked exactly.
func draws(fraction float64) func(int64) int64 {
	return func(n int64) int64 { return int64(float64(n-1) * fraction) }
}

func policyWith(opts ...Option) *policy {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	return &cfg.policy
}

func TestDefaultScheduleIsContract(t *testing.T) {
	p := policyWith()
	want := []time.Duration{1, 2, 4, 8, 16, 32, 32}
	for i, w := range want {
		assert.Equal(t, w*time.Second, p.backoff(i+1, 0, draws(0)), "retry %d, no jitter drawn", i+1)
		assert.Equal(t, w*time.Second+time.Second-1, p.backoff(i+1, 0, draws(1)), "retry %d, most jitter", i+1)
	}
}

func TestJitterStillAppliesAtTheCap(t *testing.T) {
	p := policyWith(WithBackoff(time.Second, 4*time.Second), WithJitter(500*time.Millisecond))
	assert.Equal(t, 4*time.Second+250*time.Millisecond, p.backoff(10, 0, func(n int64) int64 { return n / 2 }))
}

func TestBackoffNeverOverflows(t *testing.T) {
	p := policyWith(WithBackoff(time.Second, time.Duration(math.MaxInt64)), WithJitter(0), WithBackoffMultiplier(10))
	for _, retry := range []int{1, 30, 63, 64, 1000, math.MaxInt32, math.MaxInt} {
		d := p.backoff(retry, 0, draws(0))
		assert.Positive(t, d, "retry %d", retry)
	}
	assert.Equal(t, time.Duration(math.MaxInt64), p.backoff(1000, 0, draws(0)))
}

func TestMultiplierAndCap(t *testing.T) {
	p := policyWith(WithBackoff(100*time.Millisecond, time.Second), WithBackoffMultiplier(3), WithJitter(0))
	got := []time.Duration{}
	for k := 1; k <= 4; k++ {
		got = append(got, p.backoff(k, 0, draws(0)))
	}
	assert.Equal(t, []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 900 * time.Millisecond, time.Second}, got)
}

func TestMultiplierBelowOneIsConstant(t *testing.T) {
	for _, f := range []float64{0.5, 0, -2, math.NaN()} {
		p := policyWith(WithBackoffMultiplier(f), WithJitter(0))
		assert.Equal(t, time.Second, p.backoff(5, 0, draws(0)), "multiplier %v", f)
	}
}

func TestFullJitterDrawsBelowTheExponential(t *testing.T) {
	p := policyWith(WithJitterStrategy(FullJitter))
	assert.Equal(t, time.Duration(0), p.backoff(3, 0, draws(0)))
	assert.Equal(t, 4*time.Second-1, p.backoff(3, 0, draws(1)))
	assert.Equal(t, 32*time.Second-1, p.backoff(50, 0, draws(1)), "capped")
}

func TestDecorrelatedJitterGrowsFromThePreviousWait(t *testing.T) {
	p := policyWith(WithJitterStrategy(DecorrelatedJitter))
	assert.Equal(t, time.Second, p.backoff(1, 0, draws(0)), "first wait starts at base")
	assert.Equal(t, 3*time.Second-1, p.backoff(1, 0, draws(1)), "first wait below 3·base")
	assert.Equal(t, 15*time.Second-1, p.backoff(2, 5*time.Second, draws(1)), "below 3·previous")
	assert.Equal(t, 32*time.Second-1, p.backoff(9, 20*time.Second, draws(1)), "capped")
	assert.Equal(t, time.Second, p.backoff(9, 20*time.Second, draws(0)), "never below base")
}

func TestNegativeOptionsAreClamped(t *testing.T) {
	p := policyWith(WithBackoff(-time.Second, -time.Minute), WithJitter(-time.Second), WithMaxRetries(-3))
	assert.Equal(t, time.Duration(0), p.backoff(4, 0, draws(1)))
	assert.Equal(t, 0, p.maxRetries)
}

func TestJitterStrategyNames(t *testing.T) {
	assert.Equal(t, "additive", AdditiveJitter.String())
	assert.Equal(t, "full", FullJitter.String())
	assert.Equal(t, "decorrelated", DecorrelatedJitter.String())
	assert.Equal(t, "unknown", JitterStrategy(42).String())
}

// Jitter on a wait the server asked for is in proportion to it: up to a
// fifth, never more than WithJitter, and the wait stays a floor. (A 503's:
// a 429's paces the upstream, and a paced retry gets no jitter, see
// TestAServerWaitOnAPacedUpstreamGoesOnTime.)
func TestServerWaitJitterIsInProportion(t *testing.T) {
	cases := []struct {
		header      http.Header
		floor, most time.Duration
	}{
		{http.Header{"Retry-After-Ms": {"50"}}, 50 * time.Millisecond, 60 * time.Millisecond},
		{http.Header{"Retry-After": {"2"}}, 2 * time.Second, 2400 * time.Millisecond},
		{http.Header{"Retry-After": {"30"}}, 30 * time.Second, 31 * time.Second}, // WithJitter's 1s caps it
	}
	for _, c := range cases {
		var seen []time.Duration
		for i := 0; i < 50; i++ {
			clk := autoClock()
			rt := New(sequence(step{status: 503, header: c.header}, step{status: 200}), WithClock(clk), WithMaxRetries(1))
			roundTrips(t, rt, 1)
			require.NotEmpty(t, clk.Sleeps())
			seen = append(seen, clk.Sleeps()[0])
		}
		for _, d := range seen {
			assert.GreaterOrEqual(t, d, c.floor, "the server's wait is a floor")
			assert.Less(t, d, c.most, "jitter beyond its share of %v", c.floor)
		}
		assert.Greater(t, slices.Max(seen)-slices.Min(seen), (c.most-c.floor)/4, "the jitter spreads callers")
	}
}
