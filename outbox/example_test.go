package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/outbox"
	"github.com/retryhttp/retryhttp/retrytest"
)

// A request the upstream keeps refusing is saved, and delivered by a later
// replay. (The test clock makes the transport's backoffs and the outbox's
// minute pass at once.)
func Example() {
	var down atomic.Bool
	down.Store(true)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Println("upstream got", r.Method, r.URL.Path, "with key:", r.Header.Get(retryhttp.IdempotencyKeyHeader) != "",
			"auth:", r.Header.Get("Authorization"))
	}))
	defer api.Close()

	dir, _ := os.MkdirTemp("", "outbox")
	defer os.RemoveAll(dir)
	store, err := outbox.OpenBolt(filepath.Join(dir, "outbox.db"))
	if err != nil {
		panic(err)
	}
	defer store.Close()

	clock := retrytest.NewClock()
	ob, err := outbox.New(outbox.Options{
		Transport: retryhttp.New(api.Client().Transport, retryhttp.WithClock(clock)),
		Store:     store,
		// Credentials are never saved: a replay gets them here.
		Authorize: func(r *http.Request) error { r.Header.Set("Authorization", "Bearer from-vault"); return nil },
		Now:       clock.Now,
	})
	if err != nil {
		panic(err)
	}

	req, _ := http.NewRequest("POST", api.URL+"/orders", strings.NewReader(`{"sku":42}`))
	req.Header.Set("Authorization", "Bearer caller")
	_, err = ob.Do(req)
	var deferred *outbox.DeferredError
	if errors.As(err, &deferred) {
		fmt.Println(deferred.UserMessage())
	}

	down.Store(false)
	clock.Advance(time.Hour)
	ob.RunOnce(context.Background())
	e, _ := ob.Get(context.Background(), deferred.ID)
	fmt.Println(e.State, "after", e.Attempts, "sends")
	// Output:
	// The system was briefly congested; we received your request safely and are retrying it automatically.
	// upstream got POST /orders with key: true auth: Bearer from-vault
	// delivered after 2 sends
}

// Run replays due entries until its context ends; results reach OnResult.
func ExampleOutbox_Run() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer api.Close()
	dir, _ := os.MkdirTemp("", "outbox")
	defer os.RemoveAll(dir)
	store, _ := outbox.OpenBolt(filepath.Join(dir, "outbox.db"))
	defer store.Close()

	ctx, stop := context.WithCancel(context.Background())
	ob, _ := outbox.New(outbox.Options{
		Transport:    retryhttp.New(api.Client().Transport),
		Store:        store,
		PollInterval: 10 * time.Millisecond,
		OnResult: func(r outbox.Result) {
			fmt.Println(r.Entry.ID, r.Entry.State, r.Entry.LastStatus)
			stop()
		},
	})
	// An entry saved earlier (by Do, in this process or a previous one).
	store.Put(ctx, &outbox.Entry{ID: "e1", State: outbox.Pending, Method: "GET", URL: api.URL,
		IdempotencyKey: "k1", Created: time.Now(), NextAt: time.Now(), Attempts: 1})
	ob.Run(ctx)
	// Output: e1 delivered 200
}
