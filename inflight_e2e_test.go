package retryhttp

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp/retrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// End to end: one request that could not get a WithMaxConcurrency
// slot (its deadline ended while it waited) was dispatched on the paced
// upstream but never sent; u.replies never counts it. Later the shared
// bucket is found empty (another client drained it): dry > 0, and
// shortfall sees an attempt "in flight" for good. No attempt is ever sent
// again: every request fails with ErrRateLimited, though the bucket
// refilled long ago.
func TestASlotWaitGivenUpDoesNotStallADryUpstream(t *testing.T) {
	t.Run("control, no slot wait given up", func(t *testing.T) { stallAfterSlotWait(t, false) })
	t.Run("one slot wait given up", func(t *testing.T) { stallAfterSlotWait(t, true) })
}

func stallAfterSlotWait(t *testing.T, leak bool) {
	clock := retrytest.NewClock()
	// GitHub's headers over a bucket of 10 refilling at 10 a second,
	// refusing with 429.
	srv := retrytest.NewTransport(retrytest.Config{Family: retrytest.GitHub, Now: clock.Now,
		RateLimit: retrytest.RateLimit{Rate: 10, Burst: 10, Status: http.StatusTooManyRequests}})
	tr := New(srv, WithClock(clock), WithMaxConcurrency(1), WithMaxRetryAfter(5*time.Second), WithJitter(0))
	get := func(ctx context.Context, rt http.RoundTripper) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example.com/x", nil)
		return rt.RoundTrip(req)
	}
	for i := 0; i < 5; i++ { // the upstream is paced by its readings
		resp, err := get(context.Background(), tr)
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		resp.Body.Close()
	}
	held, err := get(context.Background(), tr) // holds the one slot
	require.NoError(t, err)
	if leak {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err = get(ctx, tr) // dispatched on the pace, then no slot before its deadline
		cancel()
		require.Error(t, err)
	}
	held.Body.Close()

	for i := 0; i < 10; i++ { // another client drains the shared quota
		resp, err := get(context.Background(), srv)
		require.NoError(t, err)
		resp.Body.Close()
	}
	before := srv.Stats().Attempts

	done := make(chan error, 1)
	go func() {
		resp, err := get(context.Background(), tr)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("no answer in 20 s of real time")
	}
	t.Logf("after the drain: %d attempts reached the server, err %v", srv.Stats().Attempts-before, err)
	assert.NoError(t, err, "the bucket refills at 10 a second; the retry should have gone")
	_, err = get(context.Background(), tr)
	require.NoError(t, err, "a new request, the bucket full")
}
