package retryhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

// WithQuotaBackend shares client-side limits between processes. Here two
// transports stand for two replicas of a service, and a small in-memory
// backend stands for Redis (in production: redisquota.New(redisClient)
// from the redisquota module). The account allows 600 requests a minute, 10
// a second with one second's worth at once. Each replica sends 8 requests:
// without the backend each would send all 8 at once, 16 together; with it,
// the first 10 go at once and the rest one every 100ms, whichever replica
// sends them. Should the backend fail, each replica would fall back to a
// quarter of the limit (its localShare) on its own.
func ExampleWithQuotaBackend() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()

	clock := retrytest.NewClock()
	shared := newFleetQuota()
	replica := func() *http.Client {
		return &http.Client{Transport: retryhttp.New(nil,
			retryhttp.WithRateLimit(retryhttp.Limits{RequestsPerMinute: 600}),
			retryhttp.WithQuotaBackend(shared, 0.25),
			retryhttp.WithClock(clock))}
	}
	a, b := replica(), replica()
	defer a.CloseIdleConnections()
	defer b.CloseIdleConnections()

	for i := 0; i < 8; i++ {
		for _, client := range []*http.Client{a, b} {
			resp, err := client.Get(srv.URL)
			if err != nil {
				fmt.Println(err)
				return
			}
			resp.Body.Close()
		}
	}
	fmt.Println("waits before sending:", clock.Waits())
	// Output:
	// waits before sending: [100ms 100ms 100ms 100ms 100ms 100ms]
}

// fleetQuota is a retryhttp.QuotaBackend in memory: a GCRA bucket (a
// virtual-time token bucket) per key and limit, and a hold per key.
type fleetQuota struct {
	mu    sync.Mutex
	tat   map[string]time.Time // when each bucket will be full again
	holds map[string]time.Time
}

func newFleetQuota() *fleetQuota {
	return &fleetQuota{tat: map[string]time.Time{}, holds: map[string]time.Time{}}
}

func (f *fleetQuota) Take(ctx context.Context, key string, takes []retryhttp.QuotaTake, now time.Time, maxWait time.Duration) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	from := now
	if h := f.holds[key]; h.After(from) {
		from = h // book from the hold's end
	}
	start, next := from, make([]time.Time, len(takes))
	for i, t := range takes {
		unit := time.Duration(float64(time.Second) / t.PerSecond)
		tat := f.tat[key+t.Name]
		if tat.Before(from) {
			tat = from
		}
		next[i] = tat.Add(time.Duration(t.N * float64(unit)))
		if s := next[i].Add(-time.Duration(t.Burst * float64(unit))); s.After(start) {
			start = s
		}
	}
	if start.Sub(now) > maxWait {
		return start.Sub(now), nil // too late for the caller: book nothing
	}
	for i, t := range takes {
		f.tat[key+t.Name] = next[i]
	}
	return start.Sub(now), nil
}

func (f *fleetQuota) Hold(ctx context.Context, key string, until, now time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if until.After(f.holds[key]) {
		f.holds[key] = until
	}
	return nil
}

// stuckQuota is a QuotaBackend that never answers, as a Redis behind a
// broken network might: every call waits until its context ends.
type stuckQuota struct{}

func (stuckQuota) Take(ctx context.Context, _ string, _ []retryhttp.QuotaTake, _ time.Time, _ time.Duration) (time.Duration, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

func (stuckQuota) Hold(ctx context.Context, _ string, _, _ time.Time) error {
	<-ctx.Done()
	return ctx.Err()
}

// WithQuotaTimeout bounds how long a request waits for the shared quota
// backend. Here the backend never answers: after 20ms the request goes on
// under this process's local share of the limit (a quarter of 600 a minute),
// instead of hanging.
func ExampleWithQuotaTimeout() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithRateLimit(retryhttp.Limits{RequestsPerMinute: 600}),
		retryhttp.WithQuotaBackend(stuckQuota{}, 0.25),
		retryhttp.WithQuotaTimeout(20*time.Millisecond))}
	defer client.CloseIdleConnections()

	start := time.Now()
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println("status:", resp.StatusCode)
	fmt.Println("went on without the backend:", time.Since(start) < time.Second)
	// Output:
	// status: 200
	// went on without the backend: true
}
