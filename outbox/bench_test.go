package outbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

// benchStores are the stores the benchmarks run on: bbolt as OpenBolt
// makes it (fsync on every commit), and Redis (no persistence configured).
func benchStores(b *testing.B) map[string]func() Store {
	srv := startRedis(b)
	return map[string]func() Store{
		"bolt":  func() Store { s, _ := openBolt(b); return s },
		"redis": func() Store { return redisStore(b, srv) },
	}
}

// BenchmarkSave is Do on a request the upstream refuses (a loopback 503,
// not retried by the transport), saved: entries saved per second.
func BenchmarkSave(b *testing.B) {
	stores := benchStores(b)
	for _, name := range []string{"bolt", "redis"} {
		b.Run("store="+name, func(b *testing.B) {
			u := newUpstream(b, status(503))
			// The transport paces an upstream that keeps failing: on a
			// test clock its waits pass at once, leaving the save's cost.
			ob, _ := newTestOutbox(b, stores[name](), u, func(o *Options) {
				o.Transport = retryhttp.New(u.Client().Transport, retryhttp.WithMaxRetries(0), retryhttp.WithClock(retrytest.NewClock()))
			})
			req, _ := http.NewRequest("POST", u.URL+"/save", nil)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := ob.Do(req); !errors.Is(err, ErrDeferred) {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}

// BenchmarkReplay is Run draining b.N due entries to a loopback upstream
// that answers 200 (two workers, pages of 100): entries replayed per
// second, each claimed, sent and its outcome saved.
func BenchmarkReplay(b *testing.B) {
	stores := benchStores(b)
	for _, name := range []string{"bolt", "redis"} {
		b.Run("store="+name, func(b *testing.B) {
			u := newUpstream(b, status(200))
			store := stores[name]()
			done := make(chan struct{})
			var delivered int
			count := make(chan struct{}, 1024)
			ob, _ := newTestOutbox(b, store, u, func(o *Options) {
				o.Transport = retryhttp.New(u.Client().Transport, retryhttp.WithMaxRetries(0))
				o.PollInterval = time.Millisecond
				o.Now = time.Now
				o.OnResult = func(Result) { count <- struct{}{} }
			})
			ctx := context.Background()
			for i := 0; i < b.N; i++ {
				e := &Entry{ID: fmt.Sprint("b", i), State: Pending, Method: "POST", URL: u.URL + "/r",
					IdempotencyKey: newUUID(), Created: time.Now(), NextAt: time.Now(), Attempts: 1}
				if err := store.Put(ctx, e); err != nil {
					b.Fatal(err)
				}
			}
			rctx, cancel := context.WithCancel(ctx)
			go func() {
				for delivered < b.N {
					<-count
					delivered++
				}
				cancel()
				close(done)
			}()
			b.ResetTimer()
			ob.Run(rctx)
			<-done
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}
