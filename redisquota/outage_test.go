package redisquota

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

// logLines collects a logger's lines.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

const (
	outageStarted = `level=WARN msg="retryhttp: quota backend unavailable, using local limits"`
	outageEnded   = `level=INFO msg="retryhttp: quota backend available again"`
)

// TestRedisKilledMidRun kills Redis under a steady load and starts it again:
// requests go on throughout, at the shared rate while Redis answers and at
// the process's share of it while it does not; none fails because of it,
// and the outage is logged once when it starts and once when it ends.
func TestRedisKilledMidRun(t *testing.T) {
	srv := startRedis(t)
	provider := retrytest.NewServer(retrytest.Config{}) // answers 200, records arrivals
	defer provider.Close()
	rdb := srv.client(t)
	backend := New(rdb)
	require.NoError(t, backend.Preload(context.Background()))

	// 100 a second shared, 10 at once; half of it alone: 50 a second, 5 at once.
	const rate, share = 100, 0.5
	var logs logLines
	rt := retryhttp.New(provider.Client().Transport,
		retryhttp.WithRateLimit(retryhttp.Limits{RequestsPerMinute: rate * 60}),
		retryhttp.WithRateLimitBurst(100*time.Millisecond),
		retryhttp.WithQuotaBackend(backend, share),
		retryhttp.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))))
	defer rt.CloseIdleConnections()

	var sent, failed atomic.Int64
	var errs sync.Map
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				sent.Add(1)
				if err := get(rt, provider.URL); err != nil {
					failed.Add(1)
					errs.Store(err.Error(), true)
				}
			}
		}()
	}
	// arrivals counts what reached the provider in [from, to).
	arrivals := func(from, to time.Time) int {
		n := 0
		for _, a := range provider.Stats().Arrivals {
			if at := provider.Start().Add(a); !at.Before(from) && at.Before(to) {
				n++
			}
		}
		return n
	}
	const settle = 200 * time.Millisecond // for a change to show in the rate
	const span = 1200 * time.Millisecond  // each phase's measure

	time.Sleep(settle + span)
	downAt := time.Now()
	srv.kill()
	killed := time.Now()
	time.Sleep(settle + span)
	restarted := time.Now()
	srv.start()
	require.Eventually(t, func() bool { return logs.count(outageEnded) == 1 }, 5*time.Second, 10*time.Millisecond,
		"the transport finds Redis again; logs:\n%s", logs.String())
	recovered := time.Now()
	time.Sleep(settle + span)
	close(stop)
	wg.Wait()

	// The three measures, each over span: Redis up, down, up again.
	shared := arrivals(downAt.Add(-span), downAt)
	alone := arrivals(killed.Add(settle), killed.Add(settle+span))
	again := arrivals(recovered.Add(settle), recovered.Add(settle+span))
	perSecond := func(n int) float64 { return float64(n) / span.Seconds() }
	t.Logf("requests sent %d, failed %d; per second: %.0f shared, %.0f with Redis down, %.0f after it came back (found %v after the restart)",
		sent.Load(), failed.Load(), perSecond(shared), perSecond(alone), perSecond(again), recovered.Sub(restarted).Round(time.Millisecond))

	assert.Zero(t, failed.Load(), "no request fails because of Redis")
	errs.Range(func(k, _ any) bool { t.Log("error:", k); return true })
	assert.Equal(t, sent.Load(), int64(provider.Stats().Statuses[http.StatusOK]), "every request reached the provider once, and succeeded")

	// Each measure is within the rate it runs at, plus its burst; and well
	// above half of it, since eight workers keep it busy.
	full, half := int(rate*span.Seconds()), int(share*rate*span.Seconds())
	assert.LessOrEqual(t, shared, full+10, "the shared limit, plus its burst")
	assert.Greater(t, shared, full*3/4)
	assert.LessOrEqual(t, alone, half+5, "the local share, plus its burst: never the whole limit")
	assert.Greater(t, alone, half*3/4, "requests go on without Redis")
	assert.Greater(t, again, half+10, "the shared limit again, above the local share")

	assert.Equal(t, 1, logs.count(outageStarted), "one line when the outage starts; logs:\n%s", logs.String())
	assert.Equal(t, 1, logs.count(outageEnded), "one when it ends")
	keys, err := rdb.Keys(context.Background(), "*").Result()
	require.NoError(t, err)
	assert.NotEmpty(t, keys, "bookings reach the restarted Redis")
}
