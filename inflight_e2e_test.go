package retryhttp

import (
	"context"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp/retrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// coarseBucket429 is a GitHub-style server (X-RateLimit-* with an epoch
// reset): a bucket of limit refilling at rate a second, on clock.
type coarseBucket429 struct {
	mu     sync.Mutex
	clock  *retrytest.Clock
	limit  float64
	rate   float64
	tokens float64
	last   time.Time
	sent   int
}

func (b *coarseBucket429) refill() time.Time {
	now := b.clock.Now()
	b.tokens = math.Min(b.limit, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	return now
}

func (b *coarseBucket429) RoundTrip(req *http.Request) (*http.Response, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.refill()
	b.sent++
	status := http.StatusOK
	if b.tokens >= 1 {
		b.tokens--
	} else {
		status = http.StatusTooManyRequests
	}
	full := now.Add(time.Duration((b.limit - b.tokens) / b.rate * float64(time.Second)))
	h := http.Header{}
	h.Set("X-RateLimit-Limit", strconv.Itoa(int(b.limit)))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(int(math.Floor(b.tokens))))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(int64(math.Ceil(float64(full.UnixNano())/1e9)), 10))
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader("ok")), Request: req}, nil
}

// Review, end to end: one request that could not get a WithMaxConcurrency
// slot (its deadline ended while it waited) was dispatched on the paced
// upstream but never sent; u.replies never counts it. Later the shared
// bucket is found empty (another client drained it): dry > 0, and
// shortfall sees an attempt "in flight" for good. No attempt is ever sent
// again: every request fails with ErrRateLimited, though the bucket
// refilled long ago.
func TestASlotWaitGivenUpDoesNotStallADryUpstream(t *testing.T) {
	t.Run("control, no slot wait given up", func(t *testing.T) { reviewStall(t, false) })
	t.Run("one slot wait given up", func(t *testing.T) { reviewStall(t, true) })
}

func reviewStall(t *testing.T, leak bool) {
	clock := retrytest.NewClock()
	srv := &coarseBucket429{clock: clock, limit: 10, rate: 10, tokens: 10, last: clock.Now()}
	tr := New(srv, WithClock(clock), WithMaxConcurrency(1), WithMaxRetryAfter(5*time.Second), WithJitter(0))
	get := func(ctx context.Context) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example.com/x", nil)
		return tr.RoundTrip(req)
	}
	for i := 0; i < 5; i++ { // the upstream is paced by its readings
		resp, err := get(context.Background())
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		resp.Body.Close()
	}
	held, err := get(context.Background()) // holds the one slot
	require.NoError(t, err)
	if leak {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err = get(ctx) // dispatched on the pace, then no slot before its deadline
		cancel()
		require.Error(t, err)
	}
	held.Body.Close()

	srv.mu.Lock()
	srv.refill()
	srv.tokens = 0 // another client drains the shared quota
	before := srv.sent
	srv.mu.Unlock()

	done := make(chan error, 1)
	go func() {
		resp, err := get(context.Background())
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
	srv.mu.Lock()
	sent := srv.sent - before
	srv.refill()
	tokens := srv.tokens
	srv.mu.Unlock()
	t.Logf("after the drain: %d attempts reached the server, err %v; bucket now holds %.0f", sent, err, tokens)
	assert.NoError(t, err, "the bucket refills at 10 a second; the retry should have gone")
	_, err = get(context.Background())
	require.NoError(t, err, "a new request, the bucket full")
}
