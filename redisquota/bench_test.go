package redisquota

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/retryhttp/retryhttp"
)

// stub is a base transport that answers 200 at once, without a network, so
// that what a benchmark measures is the transport's own cost.
type stub struct{}

func (stub) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{},
		Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
}

// benchTransports are the contenders: client-side limits in memory (the
// default), and the same limits shared through Redis on loopback. The limit
// is far above what a benchmark sends, so no request ever waits: what is
// measured is what booking an attempt costs.
func benchTransports(b *testing.B) map[string]*retryhttp.RetryTransport {
	srv := startRedis(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	b.Cleanup(func() { rdb.Close() })
	backend := New(rdb)
	if err := backend.Preload(context.Background()); err != nil {
		b.Fatal(err)
	}
	limits := retryhttp.WithRateLimit(retryhttp.Limits{RequestsPerMinute: 1 << 30})
	return map[string]*retryhttp.RetryTransport{
		"memory": retryhttp.New(stub{}, limits),
		"redis":  retryhttp.New(stub{}, limits, retryhttp.WithQuotaBackend(backend, 1)),
	}
}

// BenchmarkTake is the per-request cost of booking an attempt on the
// client-side limits, one request after another: a whole RoundTrip through
// a stub base transport, with the limits in memory or in Redis.
func BenchmarkTake(b *testing.B) {
	rts := benchTransports(b)
	for _, impl := range []string{"memory", "redis"} {
		b.Run("impl="+impl, func(b *testing.B) {
			rt := rts[impl]
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if err := get(rt, "http://api.test/"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTakeParallel is BenchmarkTake with GOMAXPROCS goroutines sending
// at once (-cpu sets how many): the throughput of one process.
func BenchmarkTakeParallel(b *testing.B) {
	rts := benchTransports(b)
	for _, impl := range []string{"memory", "redis"} {
		b.Run("impl="+impl, func(b *testing.B) {
			rt := rts[impl]
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := get(rt, "http://api.test/"); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkRedis is what BenchmarkTake/impl=redis is made of: a bare round
// trip to Redis (PING) and the booking script alone (Backend.Take).
func BenchmarkRedis(b *testing.B) {
	srv := startRedis(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	b.Cleanup(func() { rdb.Close() })
	backend := New(rdb)
	ctx := context.Background()
	if err := backend.Preload(ctx); err != nil {
		b.Fatal(err)
	}
	takes := []retryhttp.QuotaTake{{Name: retryhttp.QuotaRequests, PerSecond: 1 << 24, Burst: 1 << 24, N: 1}}
	b.Run("op=ping", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if err := rdb.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("op=take", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := backend.Take(ctx, "http://api.test", takes, time.Now(), time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	})
}
