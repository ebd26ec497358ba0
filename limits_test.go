package retryhttp

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp/internal/fakeclock"
)

func TestRequestsPerMinuteIsSmooth(t *testing.T) {
	clk := autoClock()
	rt := New(sequence(step{status: 200}), WithClock(clk), WithRateLimit(Limits{RequestsPerMinute: 120}))
	for i := 0; i < 6; i++ {
		resp, err := rt.RoundTrip(get(t, "https://api.test/x"))
		require.NoError(t, err)
		resp.Body.Close()
	}
	// 120 RPM is 2 a second: one second's worth (2) goes at once, then one
	// every half second.
	assert.Equal(t, []time.Duration{500 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond}, clk.Sleeps())
}

func TestRateLimitBurstAllowsMore(t *testing.T) {
	clk := autoClock()
	rt := New(sequence(step{status: 200}), WithClock(clk), WithRateLimit(Limits{RequestsPerMinute: 60}), WithRateLimitBurst(5*time.Second))
	for i := 0; i < 6; i++ {
		resp, err := rt.RoundTrip(get(t, "https://api.test/x"))
		require.NoError(t, err)
		resp.Body.Close()
	}
	assert.Equal(t, []time.Duration{time.Second}, clk.Sleeps(), "five at once, the sixth a second later")
}

func TestLowLimitsStillAdmitOneRequest(t *testing.T) {
	clk := autoClock()
	rt := New(sequence(step{status: 200}), WithClock(clk), WithRateLimit(Limits{RequestsPerMinute: 1}), WithMaxQueueWait(2*time.Minute))
	for i := 0; i < 2; i++ {
		resp, err := rt.RoundTrip(get(t, "https://api.test/x"))
		require.NoError(t, err)
		resp.Body.Close()
	}
	assert.Equal(t, []time.Duration{time.Minute}, clk.Sleeps())
}

func TestTokenLimitsUseTheEstimate(t *testing.T) {
	clk := autoClock()
	// 600 input tokens a minute: 10 a second, burst 10.
	rt := New(sequence(step{status: 200}), WithClock(clk), WithRateLimit(Limits{InputTokensPerMinute: 600}))
	for i := 0; i < 2; i++ {
		ctx := WithTokens(context.Background(), 25, 0)
		resp, err := rt.RoundTrip(get(t, "https://api.test/x").WithContext(ctx))
		require.NoError(t, err)
		resp.Body.Close()
	}
	// The first 25 tokens: 10 now, 15 owed (1.5s); the next 25 wait for those
	// and their own: 4s after the start.
	assert.Equal(t, []time.Duration{1500 * time.Millisecond, 2500 * time.Millisecond}, clk.Sleeps())
}

func TestOutputAndTotalTokenLimits(t *testing.T) {
	clk := autoClock()
	rt := New(sequence(step{status: 200}), WithClock(clk), WithRateLimit(Limits{OutputTokensPerMinute: 60, TokensPerMinute: 6000}))
	ctx := WithTokens(context.Background(), 10, 3)
	for i := 0; i < 2; i++ {
		resp, err := rt.RoundTrip(get(t, "https://api.test/x").WithContext(ctx))
		require.NoError(t, err)
		resp.Body.Close()
	}
	// OTPM 60 is 1 a second, burst 1: 3 output tokens take 2s beyond the
	// first, and the next 3 another 3s.
	assert.Equal(t, []time.Duration{2 * time.Second, 3 * time.Second}, clk.Sleeps())
}

func TestClientLimitFailsAtOnceWhenItCannotBeMet(t *testing.T) {
	// Deadlines are real-time: start the fake clock at the real time.
	clk := fakeclock.NewAuto(time.Now())
	base := sequence(step{status: 200})
	rt := New(base, WithClock(clk), WithRateLimit(Limits{RequestsPerMinute: 1}))
	resp, err := rt.RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	resp.Body.Close()

	start := clk.Now()
	// The next slot is a minute away: within the 60s limit, but not within
	// a 30s deadline.
	short, cancelShort := context.WithDeadline(context.Background(), start.Add(30*time.Second))
	defer cancelShort()
	resp, err = rt.RoundTrip(get(t, "https://api.test/x").WithContext(short))
	require.Nil(t, resp)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.ErrorIs(t, err, ErrRateLimited)
	assert.True(t, e.Retryable)
	assert.Equal(t, 0, e.Attempts)
	assert.Equal(t, start.Add(time.Minute), e.RetryAt)
	assert.Empty(t, clk.Sleeps(), "failed without waiting")

	// The refused request gave its slot back: the next one waits one minute,
	// not two.
	resp, err = rt.RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, []time.Duration{time.Minute}, clk.Sleeps())
}

func TestServerHeadersCorrectLocalTokenCount(t *testing.T) {
	clk := autoClock()
	h := http.Header{"X-Ratelimit-Remaining-Tokens": {"0"}, "X-Ratelimit-Limit-Tokens": {"6000"}}
	rt := New(sequence(step{status: 200, header: h}), WithClock(clk), WithRateLimit(Limits{TokensPerMinute: 6000}))
	ctx := WithTokens(context.Background(), 1, 0)
	resp, err := rt.RoundTrip(get(t, "https://api.test/x").WithContext(ctx))
	require.NoError(t, err)
	resp.Body.Close()
	u := rt.upstreams.get(&upstreamKey{scheme: "https", host: "api.test"}, nil)
	assert.LessOrEqual(t, u.limits.buckets[Tokens].tokensAt(clk.Now()), 0.0, "the server says none remain: the local bucket is emptied")
}

func TestRetriesAreAdmittedLikeFirstAttempts(t *testing.T) {
	clk := autoClock()
	rt := New(sequence(step{status: 503}, step{status: 200}), WithClock(clk), WithJitter(0), WithRateLimit(Limits{RequestsPerMinute: 6}))
	resp, err := rt.RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 2, Attempts(resp), "waiting to be admitted does not use up retries")
	// The backoff (1s), then the rest of the 10s the second request slot needs.
	assert.Equal(t, []time.Duration{time.Second, 9 * time.Second}, clk.Sleeps())
}

func TestConcurrencyCapHoldsSlotsUntilBodiesAreDone(t *testing.T) {
	var inFlight, peak atomic.Int32
	release := make(chan struct{})
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: &doneBody{Reader: strings.NewReader("ok"), done: func() { inFlight.Add(-1) }}}, nil
	})
	rt := New(base, WithMaxConcurrency(2))
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := rt.RoundTrip(get(t, "https://api.test/x"))
			if !assert.NoError(t, err) {
				return
			}
			io.ReadAll(resp.Body) // EOF releases the slot, before Close
			resp.Body.Close()
		}()
	}
	require.Eventually(t, func() bool { return inFlight.Load() == 2 }, 5*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	assert.Equal(t, int32(2), peak.Load())
}

type doneBody struct {
	*strings.Reader
	done func()
	once sync.Once
}

func (b *doneBody) Close() error { b.once.Do(b.done); return nil }
func (b *doneBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if err == io.EOF {
		b.once.Do(b.done)
	}
	return n, err
}

func TestConcurrencySlotIsFreedOnEveryErrorPath(t *testing.T) {
	rt := New(sequence(step{err: io.ErrUnexpectedEOF}), WithClock(autoClock()), WithMaxConcurrency(1), WithMaxRetries(2))
	_, err := rt.RoundTrip(get(t, "https://api.test/x"))
	require.Error(t, err)
	// A refused body replay frees it too.
	req := post(t, "https://api.test/x", strings.NewReader("x"))
	req.GetBody = func() (io.ReadCloser, error) { return nil, io.ErrClosedPipe }
	_, err = New(sequence(step{status: 503}), WithClock(autoClock()), WithMaxConcurrency(1)).RoundTrip(req)
	require.ErrorIs(t, err, ErrBodyNotReplayable)
	// Every slot came back: a request goes without waiting.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, rt.slots.acquire(ctx))
	rt.slots.release()
	assert.Len(t, rt.slots, 0)
}

func TestWaitingForASlotHonoursTheContext(t *testing.T) {
	release := make(chan struct{})
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		<-release
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}, nil
	})
	rt := New(base, WithMaxConcurrency(1))
	done := make(chan *http.Response)
	go func() {
		resp, _ := rt.RoundTrip(get(t, "https://api.test/x"))
		done <- resp
	}()
	require.Eventually(t, func() bool { return len(rt.slots) == 1 }, 5*time.Second, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	_, err := rt.RoundTrip(get(t, "https://api.test/x").WithContext(ctx))
	assert.ErrorIs(t, err, context.Canceled)
	close(release)
	(<-done).Body.Close()
}
