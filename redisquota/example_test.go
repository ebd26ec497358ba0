package redisquota_test

import (
	"context"
	"log"
	"log/slog"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/redisquota"
)

// Four replicas of a service share one account's limits through Redis. Each
// uses the account's limits (not a quarter of them) and a localShare of a
// quarter: what it may send on its own while Redis cannot be reached.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  "redis:6379",
		ContextTimeoutEnabled: true, // reads give up at the transport's timeout (50ms)
		MinIdleConns:          8,
	})
	defer rdb.Close()
	quota := redisquota.New(rdb)
	if err := quota.Preload(context.Background()); err != nil {
		log.Printf("redis: %v (local limits until it answers)", err)
	}

	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithRateLimit(retryhttp.Limits{RequestsPerMinute: 500, InputTokensPerMinute: 30_000, OutputTokensPerMinute: 8_000}),
		retryhttp.WithQuotaBackend(quota, 0.25),
		retryhttp.WithLogger(slog.Default()), // one line when Redis goes away, one when it is back
	)}
	_ = client
}
