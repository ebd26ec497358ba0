package retryhttp

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPerRequestOptions(t *testing.T) {
	cases := []struct {
		name     string
		ctx      func() context.Context
		attempts int
	}{
		{"transport default", context.Background, 6},
		{"no retry", func() context.Context { return NoRetry(context.Background()) }, 1},
		{"other max retries", func() context.Context {
			return ContextWithOptions(context.Background(), WithMaxRetries(2))
		}, 3},
		{"later options win", func() context.Context {
			ctx := ContextWithOptions(context.Background(), WithMaxRetries(2))
			return ContextWithOptions(ctx, WithMaxRetries(1))
		}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mock, _ := scripted(t, step{status: 503})
			rt := New(mock, WithClock(autoClock()))
			resp, err := rt.RoundTrip(get(t, "https://api.test/x").WithContext(c.ctx()))
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, c.attempts, Attempts(resp))
		})
	}
}

func TestPerRequestOptionsDoNotLeakIntoTheTransport(t *testing.T) {
	mock, _ := scripted(t, step{status: 503})
	clk := autoClock()
	rt := New(mock, WithClock(clk), WithJitter(0), WithMaxRetries(1))
	ctx := ContextWithOptions(context.Background(), WithBackoff(time.Minute, time.Hour))
	resp, err := rt.RoundTrip(get(t, "https://api.test/x").WithContext(ctx))
	require.NoError(t, err)
	resp.Body.Close()
	resp, err = rt.RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, []time.Duration{time.Minute, time.Second}, clk.Sleeps())
}
