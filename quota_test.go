package retryhttp

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
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

// memQuota is a QuotaBackend in memory, on the callers' clock: a GCRA
// bucket per key and limit name and a hold per key, as the Redis backend
// keeps them. Two transports sharing one stand for two processes sharing a
// Redis. It can be made to fail, or to hang until its caller gives up.
type memQuota struct {
	mu      sync.Mutex
	tat     map[string]time.Time
	holds   map[string]time.Time
	took    []takeCall
	held    []holdCall
	settled []settleCall

	fail     atomic.Bool  // answer with an error
	failNext atomic.Int32 // answer the next calls with an error
	hang     atomic.Bool  // answer only when ctx is done
	calls    atomic.Int32
}

type takeCall struct {
	maxWait       time.Duration
	key           string
	takes         []QuotaTake
	now           time.Time
	start         time.Time
	bookedNothing bool
}

type settleCall struct {
	key    string
	deltas []QuotaTake
	now    time.Time
}

type holdCall struct {
	key        string
	until, now time.Time
}

func newMemQuota() *memQuota {
	return &memQuota{tat: map[string]time.Time{}, holds: map[string]time.Time{}}
}

var errQuotaDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func (m *memQuota) trouble(ctx context.Context) error {
	m.calls.Add(1)
	if m.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	if m.fail.Load() || m.failNext.Add(-1) >= 0 {
		return errQuotaDown
	}
	return nil
}

func (m *memQuota) Take(ctx context.Context, key string, takes []QuotaTake, now time.Time, maxWait time.Duration) (time.Duration, error) {
	if err := m.trouble(ctx); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	from := later(now, m.holds[key])
	start := from
	next := map[string]time.Time{}
	for _, t := range takes {
		interval := time.Duration(float64(time.Second) / t.PerSecond)
		tat := later(m.tat[key+"/"+t.Name], from).Add(time.Duration(t.N * float64(interval)))
		start = later(start, tat.Add(-time.Duration(t.Burst*float64(interval))))
		next[t.Name] = tat
	}
	c := takeCall{key: key, takes: append([]QuotaTake(nil), takes...), now: now, maxWait: maxWait, start: start}
	if start.Sub(now) > maxWait {
		c.bookedNothing = true
	} else {
		for name, tat := range next {
			m.tat[key+"/"+name] = tat
		}
	}
	m.took = append(m.took, c)
	return start.Sub(now), nil
}

func (m *memQuota) Hold(ctx context.Context, key string, until, now time.Time) error {
	if err := m.trouble(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.holds[key] = later(m.holds[key], until)
	m.held = append(m.held, holdCall{key, until, now})
	return nil
}

// Settle moves the buckets' times back for units given back (never before
// now: a full bucket), forth for units charged.
func (m *memQuota) Settle(ctx context.Context, key string, deltas []QuotaTake, now time.Time) error {
	if err := m.trouble(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range deltas {
		interval := time.Duration(float64(time.Second) / d.PerSecond)
		k := key + "/" + d.Name
		m.tat[k] = later(later(m.tat[k], now).Add(time.Duration(d.N*float64(interval))), now)
	}
	m.settled = append(m.settled, settleCall{key, append([]QuotaTake(nil), deltas...), now})
	return nil
}

func (m *memQuota) settles() []settleCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]settleCall(nil), m.settled...)
}

// takeOnly is a QuotaBackend that cannot settle.
type takeOnly struct{ QuotaBackend }

func (m *memQuota) takes() []takeCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]takeCall(nil), m.took...)
}

func (m *memQuota) holdCalls() []holdCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]holdCall(nil), m.held...)
}

// logBuffer collects a logger's lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// count is how many lines hold s.
func (b *logBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), s)
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

const (
	outageStarted = `level=WARN msg="retryhttp: quota backend unavailable, using local limits"`
	outageEnded   = `level=INFO msg="retryhttp: quota backend available again"`
)

func roundTrips(t *testing.T, rt http.RoundTripper, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		resp, err := rt.RoundTrip(get(t, "https://api.test/x"))
		require.NoError(t, err)
		resp.Body.Close()
	}
}

func TestQuotaBackendSharesLimitsAcrossTransports(t *testing.T) {
	clk := autoClock()
	backend := newMemQuota()
	opts := []Option{WithClock(clk), WithRateLimit(Limits{RequestsPerMinute: 120}), WithQuotaBackend(backend, 0.5)}
	a, b := New(sequence(step{status: 200}), opts...), New(sequence(step{status: 200}), opts...)
	for i := 0; i < 3; i++ {
		roundTrips(t, a, 1)
		roundTrips(t, b, 1)
	}
	// 120 RPM is 2 a second between both: two at once, then one every
	// 500ms, as one transport alone would go. Each on its own would have
	// sent its first two at once.
	assert.Equal(t, []time.Duration{500 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond}, clk.Sleeps())
	took := backend.takes()
	require.Len(t, took, 6)
	for _, c := range took {
		assert.Equal(t, "https://api.test", c.key)
		assert.Equal(t, []QuotaTake{{Name: QuotaRequests, PerSecond: 2, Burst: 2, N: 1}}, c.takes)
		assert.Equal(t, DefaultMaxRetryAfter, c.maxWait, "the queue wait allowed")
	}
}

func TestQuotaBackendBooksTokens(t *testing.T) {
	clk := autoClock()
	backend := newMemQuota()
	rt := New(sequence(step{status: 200}), WithClock(clk), WithQuotaBackend(backend, 1),
		WithRateLimit(Limits{TokensPerMinute: 6000, InputTokensPerMinute: 600, OutputTokensPerMinute: 60}))
	resp, err := rt.RoundTrip(get(t, "https://api.test/x").WithContext(WithTokens(context.Background(), 25, 3)))
	require.NoError(t, err)
	resp.Body.Close()
	took := backend.takes()
	require.Len(t, took, 1)
	assert.Equal(t, []QuotaTake{
		{Name: QuotaTokens, PerSecond: 100, Burst: 100, N: 28},
		{Name: QuotaInputTokens, PerSecond: 10, Burst: 10, N: 25},
		{Name: QuotaOutputTokens, PerSecond: 1, Burst: 1, N: 3},
	}, took[0].takes, "no request limit set: no rpm take")
	// ITPM 600 (10 a second, burst 10) owes 15 tokens, 1.5s; OTPM 60 owes
	// 2, 2s: the latest wins.
	assert.Equal(t, []time.Duration{2 * time.Second}, clk.Sleeps())
}

func TestQuotaBackendFallsBackToLocalShare(t *testing.T) {
	clk := autoClock()
	backend := newMemQuota()
	backend.fail.Store(true)
	var logs logBuffer
	// 120 RPM is 2 a second; half of it, 1 a second with a burst of 1.
	rt := New(sequence(step{status: 200}), WithClock(clk), WithLogger(logs.logger()),
		WithRateLimit(Limits{RequestsPerMinute: 120}), WithQuotaBackend(backend, 0.5))
	roundTrips(t, rt, 4)
	assert.Equal(t, []time.Duration{time.Second, time.Second, time.Second}, clk.Sleeps(), "the local share, not the whole limit")
	assert.Equal(t, 1, logs.count(outageStarted), "logged once per outage")
	assert.Equal(t, 1, logs.count("connection refused"), "with the cause")
	assert.Zero(t, logs.count(outageEnded))
	// Three failures in a row (the first three requests) make an outage;
	// the fourth came a second after it began, and asked again.
	assert.Equal(t, int32(4), backend.calls.Load())
}

func TestQuotaBackendBlipIsNoOutage(t *testing.T) {
	clk := autoClock()
	backend := newMemQuota()
	backend.failNext.Store(2)
	var logs logBuffer
	rt := New(sequence(step{status: 200}), WithClock(clk), WithLogger(logs.logger()),
		WithRateLimit(Limits{RequestsPerMinute: 120}), WithQuotaBackend(backend, 0.5))
	roundTrips(t, rt, 3)
	assert.Equal(t, int32(3), backend.calls.Load(), "every request asked")
	assert.Len(t, backend.takes(), 1, "the third was booked on the backend")
	// The first two went on local limits: half of 2 a second, one at a time.
	assert.Equal(t, []time.Duration{time.Second}, clk.Sleeps())
	assert.Zero(t, logs.count(outageStarted), "two failures are not an outage")
}

func TestQuotaBackendThatHangsIsNotWaitedFor(t *testing.T) {
	clk := autoClock()
	backend := newMemQuota()
	backend.hang.Store(true)
	var logs logBuffer
	rt := New(sequence(step{status: 200}), WithClock(clk), WithLogger(logs.logger()), WithQuotaTimeout(20*time.Millisecond),
		WithRateLimit(Limits{RequestsPerMinute: 6000}), WithQuotaBackend(backend, 0.25))
	start := time.Now()
	roundTrips(t, rt, 20)
	elapsed := time.Since(start)
	// The first three requests waited out the timeout; the next 17,
	// within the same (fake) second, went on under local limits without
	// asking.
	assert.Equal(t, int32(3), backend.calls.Load())
	assert.GreaterOrEqual(t, elapsed, 60*time.Millisecond)
	assert.Less(t, elapsed, 2*time.Second)
	assert.Equal(t, 1, logs.count(outageStarted))
	assert.Equal(t, 1, logs.count("no answer within 20ms"))
	// 6000 RPM is 100 a second; a quarter of it holds 25 at once.
	assert.Empty(t, clk.Sleeps(), "20 requests fit the local burst of 25")
	roundTrips(t, rt, 6)
	assert.Len(t, clk.Sleeps(), 1, "the 26th request waits for the local bucket")
}

func TestQuotaBackendRecovers(t *testing.T) {
	clk := autoClock()
	backend := newMemQuota()
	backend.fail.Store(true)
	var logs logBuffer
	rt := New(sequence(step{status: 200}), WithClock(clk), WithLogger(logs.logger()),
		WithRateLimit(Limits{RequestsPerMinute: 6000}), WithQuotaBackend(backend, 0.5))
	roundTrips(t, rt, 5)
	require.Equal(t, int32(3), backend.calls.Load(), "down after three failures")

	clk.Advance(time.Second)
	roundTrips(t, rt, 1) // asks again: still down, not logged again
	assert.Equal(t, int32(4), backend.calls.Load())
	assert.Equal(t, 1, logs.count(outageStarted))

	backend.fail.Store(false)
	roundTrips(t, rt, 3)
	assert.Equal(t, int32(4), backend.calls.Load(), "not asked again within the second")
	clk.Advance(time.Second)
	roundTrips(t, rt, 3)
	assert.Equal(t, int32(7), backend.calls.Load(), "answered again: asked on every attempt")
	assert.Len(t, backend.takes(), 3)
	assert.Equal(t, 1, logs.count(outageEnded))
	assert.Equal(t, 1, logs.count("outage=2s"))
	assert.Equal(t, 1, logs.count(outageStarted))

	// A new outage is a new log line.
	backend.fail.Store(true)
	roundTrips(t, rt, 3)
	assert.Equal(t, 2, logs.count(outageStarted))
}

func TestQuotaBackendSharesHolds(t *testing.T) {
	clk := autoClock()
	backend := newMemQuota()
	a := New(sequence(step{status: 429, header: http.Header{"Retry-After": {"3"}}}), WithClock(clk), WithMaxRetries(0),
		WithQuotaBackend(backend, 0.5))
	b := New(sequence(step{status: 200}), WithClock(clk), WithJitter(0), WithQuotaBackend(backend, 0.5))
	resp, err := a.RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, []holdCall{{key: "https://api.test", until: testStart.Add(3 * time.Second), now: testStart}}, backend.holdCalls())

	roundTrips(t, b, 1)
	assert.Equal(t, []time.Duration{3 * time.Second}, clk.Sleeps(), "the other transport waits out the hold")
	took := backend.takes()
	require.Len(t, took, 2)
	assert.Empty(t, took[1].takes, "no limits: the backend is asked for the hold alone")

	// With jitter, the requests a shared hold held are spread after it, as
	// after a local hold.
	resp, err = a.RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	resp.Body.Close()
	spread := New(sequence(step{status: 200}), WithClock(clk), WithJitter(time.Second), WithQuotaBackend(backend, 0.5))
	roundTrips(t, spread, 1)
	sleeps := clk.Sleeps()
	require.Len(t, sleeps, 2)
	assert.GreaterOrEqual(t, sleeps[1], 3*time.Second)
	assert.Less(t, sleeps[1], 4*time.Second)
}

func TestQuotaBackendBooksAfterTheHold(t *testing.T) {
	clk := autoClock()
	backend := newMemQuota()
	require.NoError(t, backend.Hold(context.Background(), "https://api.test", testStart.Add(3*time.Second), testStart))
	rt := New(sequence(step{status: 200}), WithClock(clk), WithRateLimit(Limits{RequestsPerMinute: 120}), WithQuotaBackend(backend, 1))
	roundTrips(t, rt, 3)
	// Two at the hold's end (the burst), the third half a second later:
	// the hold spaces its requests by the limit, not as a herd.
	assert.Equal(t, []time.Duration{3 * time.Second, 500 * time.Millisecond}, clk.Sleeps())
}

func TestQuotaBackendHoldFromExhaustedQuota(t *testing.T) {
	clk := autoClock()
	backend := newMemQuota()
	h := http.Header{"X-Ratelimit-Limit-Requests": {"10"}, "X-Ratelimit-Remaining-Requests": {"0"}, "X-Ratelimit-Reset-Requests": {"2s"}}
	rt := New(sequence(step{status: 200, header: h}), WithClock(clk), WithQuotaBackend(backend, 1))
	roundTrips(t, rt, 1)
	held := backend.holdCalls()
	require.Len(t, held, 1)
	assert.Equal(t, testStart.Add(2*time.Second), held[0].until)
}

func TestQuotaBackendRefusedRequestBooksNothing(t *testing.T) {
	// Deadlines are real-time: start the fake clock at the real time.
	clk := fakeclock.NewAuto(time.Now())
	backend := newMemQuota()
	rt := New(sequence(step{status: 200}), WithClock(clk), WithRateLimit(Limits{RequestsPerMinute: 1}), WithQuotaBackend(backend, 1))
	roundTrips(t, rt, 1)

	start := clk.Now()
	short, cancel := context.WithDeadline(context.Background(), start.Add(30*time.Second))
	defer cancel()
	resp, err := rt.RoundTrip(get(t, "https://api.test/x").WithContext(short))
	require.Nil(t, resp)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.ErrorIs(t, err, ErrRateLimited)
	assert.Equal(t, start.Add(time.Minute), e.RetryAt)
	took := backend.takes()
	require.Len(t, took, 2)
	assert.Equal(t, 30*time.Second, took[1].maxWait, "the caller's deadline")
	assert.True(t, took[1].bookedNothing)

	roundTrips(t, rt, 1)
	assert.Equal(t, []time.Duration{time.Minute}, clk.Sleeps(), "the refused request held no slot")
}

func TestQuotaBackendCanceledRequestIsNoOutage(t *testing.T) {
	backend := newMemQuota()
	backend.hang.Store(true)
	var logs logBuffer
	// The base transport fails a canceled request, as net/http's does.
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) { return nil, req.Context().Err() })
	rt := New(base, WithClock(autoClock()), WithLogger(logs.logger()), WithQuotaTimeout(time.Minute),
		WithRateLimit(Limits{RequestsPerMinute: 6000}), WithQuotaBackend(backend, 0.5))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		resp, err := rt.RoundTrip(get(t, "https://api.test/x").WithContext(ctx))
		if resp != nil {
			resp.Body.Close()
		}
		done <- err
	}()
	require.Eventually(t, func() bool { return backend.calls.Load() == 1 }, time.Second, time.Millisecond)
	cancel()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("the canceled request did not return")
	}
	assert.Zero(t, logs.count(outageStarted), "the caller gave up; the backend did not fail")
}

func TestWithQuotaBackendShare(t *testing.T) {
	backend := newMemQuota()
	for _, share := range []float64{0, -0.5, 1.5, math.NaN(), math.Inf(1)} {
		assert.Panics(t, func() { WithQuotaBackend(backend, share) }, "share %v", share)
	}
	for _, share := range []float64{1, 0.25, 1e-3} {
		assert.NotPanics(t, func() { WithQuotaBackend(backend, share) }, "share %v", share)
	}
	assert.NotPanics(t, func() { WithQuotaBackend(nil, 0) }, "no backend: no share needed")
	rt := New(nil, WithQuotaBackend(backend, 0.5), WithQuotaBackend(nil, 0))
	assert.Nil(t, rt.cfg.quota, "a nil backend removes one set before")
}

func TestNoQuotaBackendKeepsTheFreePath(t *testing.T) {
	backend := newMemQuota()
	rt := New(sequence(step{status: 200}), WithClock(autoClock()))
	roundTrips(t, rt, 3)
	u := rt.upstreams.get(&upstreamKey{scheme: "https", host: "api.test"}, nil)
	assert.True(t, u.free.Load(), "no backend, no limits: requests skip the admit stage")

	rt = New(sequence(step{status: 200}), WithClock(autoClock()), WithQuotaBackend(backend, 1))
	roundTrips(t, rt, 3)
	assert.Equal(t, int32(3), backend.calls.Load(), "with a backend every attempt asks it, for the fleet's holds")
}

// A booking on a backend that can settle is settled by the usage the
// response reports: process A books 1000 output tokens of a 1000 a minute
// limit and uses 100; the 900 go back to the shared bucket, so process B's
// 500 go at once instead of waiting 30s.
func TestQuotaBackendSettlesUsage(t *testing.T) {
	for _, settles := range []bool{true, false} {
		t.Run(map[bool]string{true: "settler", false: "take only"}[settles], func(t *testing.T) {
			clk := autoClock()
			mem := newMemQuota()
			var backend QuotaBackend = mem
			if !settles {
				backend = takeOnly{mem}
			}
			opts := []Option{WithClock(clk), WithRateLimit(Limits{OutputTokensPerMinute: 1000}), WithRateLimitBurst(time.Minute), WithQuotaBackend(backend, 0.5)}
			a := New(jsonUsageBase(`{"usage":{"input_tokens":10,"output_tokens":100}}`), opts...)
			b := New(jsonUsageBase(`{"usage":{"input_tokens":10,"output_tokens":500}}`), opts...)
			sendWithTokens(t, a, 0, 1000, true)
			if settles {
				require.Eventually(t, func() bool { return len(mem.settles()) == 1 }, 5*time.Second, time.Millisecond, "settled in the background")
				got := mem.settles()[0]
				assert.Equal(t, "https://api.test", got.key)
				assert.Equal(t, testStart, got.now)
				require.Len(t, got.deltas, 1)
				assert.Equal(t, QuotaOutputTokens, got.deltas[0].Name)
				assert.InDelta(t, 1000.0/60, got.deltas[0].PerSecond, 1e-9)
				assert.Equal(t, 1000.0, got.deltas[0].Burst)
				assert.Equal(t, -900.0, got.deltas[0].N, "booked 1000, used 100")
			}
			sendWithTokens(t, b, 0, 500, true)
			if settles {
				assert.Empty(t, clk.Sleeps(), "B's 500 were given back by A")
			} else {
				require.Len(t, clk.Sleeps(), 1)
				assert.InDelta(t, 30*time.Second, clk.Sleeps()[0], float64(time.Millisecond), "A's estimate stands: B waits for it")
			}
		})
	}
}
