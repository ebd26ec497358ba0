package outbox

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testStoreContract checks what Run relies on from a Store. a and b are
// two handles on one store (two workers); expire makes leases taken at
// now run out and returns the time to claim at then.
func testStoreContract(t *testing.T, a, b Store, lease time.Duration, expire func(now time.Time) time.Time) {
	ctx := context.Background()
	now := time.Now()
	if _, err := a.Get(ctx, "nope"); err != ErrNotFound {
		t.Fatalf("Get of an unknown ID: %v", err)
	}
	for i := range 5 {
		e := &Entry{ID: fmt.Sprint("c", i), State: Pending, Method: "POST", URL: "http://api.test/", IdempotencyKey: "k",
			Created: now, NextAt: now.Add(time.Duration(i-2) * time.Millisecond), Attempts: 1}
		if err := a.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	// Due: c0, c1, c2. a claims two, b the third: no entry twice.
	got := map[string]*Entry{}
	ea, err := a.Claim(ctx, now, 2, lease)
	if err != nil || len(ea) != 2 {
		t.Fatalf("a claimed %d: %v", len(ea), err)
	}
	eb, err := b.Claim(ctx, now, 10, lease)
	if err != nil || len(eb) != 1 {
		t.Fatalf("b claimed %d: %v", len(eb), err)
	}
	for _, e := range append(ea, eb...) {
		if got[e.ID] != nil || e.Claim == "" {
			t.Fatalf("claimed twice or unmarked: %+v", e)
		}
		got[e.ID] = e
	}
	if got["c3"] != nil || got["c4"] != nil {
		t.Fatal("claimed before due")
	}
	// Within the lease nobody gets them again.
	if es, _ := b.Claim(ctx, now, 10, lease); len(es) != 0 {
		t.Fatalf("claimed again within the lease: %d", len(es))
	}
	// a finishes one, delivered; b dies holding its own (never Put).
	ea[0].State, ea[0].NextAt = Delivered, time.Time{}
	if err := a.Put(ctx, ea[0]); err != nil {
		t.Fatal(err)
	}
	// a puts the other back for later.
	ea[1].NextAt = now.Add(time.Hour)
	if err := a.Put(ctx, ea[1]); err != nil {
		t.Fatal(err)
	}
	if e, err := a.Get(ctx, ea[0].ID); err != nil || e.State != Delivered {
		t.Fatalf("Get: %+v %v", e, err)
	}
	// After the lease: b's lost entry comes back (to a), plus c3, c4 now
	// due; the delivered one and the postponed one do not.
	later := expire(now)
	es, err := a.Claim(ctx, later, 10, lease)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, e := range es {
		ids[e.ID] = true
	}
	if len(es) != 3 || !ids[eb[0].ID] || !ids["c3"] || !ids["c4"] {
		t.Fatalf("after the lease: %v, want %s, c3, c4", ids, eb[0].ID)
	}
}

func TestBoltStoreContract(t *testing.T) {
	s := memStore(t)
	testStoreContract(t, s, s, time.Minute, func(now time.Time) time.Time { return now.Add(time.Minute) })
}

func TestRedisStoreContract(t *testing.T) {
	srv := startRedis(t)
	const lease = time.Second // Redis measures it in real time: long enough for a loaded machine
	testStoreContract(t, redisStore(t, srv), redisStore(t, srv), lease, func(now time.Time) time.Time {
		time.Sleep(lease + 50*time.Millisecond)
		return now.Add(lease + 50*time.Millisecond)
	})
}

// With Redis down, Do returns the original failure, never "saved".
func TestRedisDownReturnsTheOriginalFailure(t *testing.T) {
	srv := startRedis(t)
	store := redisStore(t, srv)
	u := newUpstream(t, status(503))
	ob, _ := newTestOutbox(t, store, u, nil)
	srv.kill()
	resp, err := ob.Do(post(t, u.URL, "b"))
	if err != nil || resp == nil || resp.StatusCode != 503 {
		t.Fatalf("resp %v, err %v: want the original 503", resp, err)
	}
	resp.Body.Close()
}

// Several workers, each with its own connection (a consumer of the group),
// share one outbox in Redis: each entry is delivered once.
func TestRedisWorkersShareOneOutbox(t *testing.T) {
	const n, workers = 60, 3
	srv := startRedis(t)
	u := newUpstream(t, status(503))
	ob, now := newTestOutbox(t, redisStore(t, srv), u, nil)
	ids := deferN(t, ob, u, n)
	sent := len(u.Arrivals())
	u.setAnswer(status(200))
	now.Advance(time.Hour)

	var delivered atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range workers {
		w, _ := newTestOutbox(t, redisStore(t, srv), u, func(o *Options) {
			o.Now = now.Now
			o.PageSize, o.Workers, o.PollInterval = 5, 1, 5*time.Millisecond
			o.OnResult = func(r Result) {
				if r.Entry.State == Delivered && delivered.Add(1) == n {
					cancel()
				}
			}
		})
		wg.Add(1)
		go func() { defer wg.Done(); w.Run(ctx) }()
	}
	wg.Wait()
	replays := u.Arrivals()[sent:]
	if len(replays) != n || paths(replays) != n {
		t.Fatalf("%d replays of %d entries (%d distinct)", len(replays), n, paths(replays))
	}
	for _, id := range ids {
		if e := get(t, ob, id); e.State != Delivered {
			t.Errorf("%+v", e)
		}
	}
}
