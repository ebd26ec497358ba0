package retryhttp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAnswersToSendsBeforeThePaceDoNotCutIt(t *testing.T) {
	// Slow start sent five before the first reading set the pace; the
	// bucket those five emptied says nothing of the pace that follows.
	coarse := func(remaining int64, at time.Time) RateLimits {
		return RateLimits{Replenishing: true, Requests: Quota{Limit: 10, Remaining: remaining, HasLimit: true, HasRemaining: true,
			Reset: at.Add(time.Second).Truncate(time.Second), Coarse: true}}
	}
	p := &pacer{sent: 5}
	now := testStart
	p.learn(now, coarse(6, now), 1)
	require.Equal(t, paceMeasured, p.mode)
	rate := p.rate
	p.learn(now.Add(5*time.Millisecond), coarse(0, now), 5)
	assert.Zero(t, p.ceiling, "no cut: the burst before the pace emptied the bucket")
	assert.GreaterOrEqual(t, p.rate, rate)

	p.sent = 8 // three sent on the pace
	p.learn(now.Add(10*time.Millisecond), coarse(0, now), 8)
	assert.Positive(t, p.ceiling, "the pace's own sends emptying it: cut")
}
