package outbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// deferN sends n requests to a failing u and returns their entry IDs.
func deferN(t testing.TB, ob *Outbox, u *upstream, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		req := post(t, fmt.Sprintf("%s/item/%d", u.URL, i), fmt.Sprintf("body %d", i))
		req.Header.Set("Authorization", "Bearer caller-token")
		_, err := ob.Do(req)
		var de *DeferredError
		if !errors.As(err, &de) {
			t.Fatalf("request %d: %v", i, err)
		}
		ids = append(ids, de.ID)
	}
	return ids
}

func get(t testing.TB, ob *Outbox, id string) *Entry {
	t.Helper()
	e, err := ob.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestReplayDelivers(t *testing.T) {
	u := newUpstream(t, status(503))
	var mu sync.Mutex
	var results []Result
	ob, now := newTestOutbox(t, memStore(t), u, func(o *Options) {
		o.SnippetBytes = 8
		o.OnResult = func(r Result) { mu.Lock(); results = append(results, r); mu.Unlock() }
	})
	ids := deferN(t, ob, u, 2)
	firstKeys := map[string]string{}
	for _, a := range u.Arrivals() {
		firstKeys[a.Path] = a.Key
	}
	ctx := context.Background()

	// Not due yet: nothing is sent. (The transport's waits moved the
	// clock on during Do: the first entry is due soonest.)
	now.Advance(get(t, ob, ids[0]).NextAt.Sub(now.Now()) - time.Second)
	if n, err := ob.RunOnce(ctx); n != 0 || err != nil {
		t.Fatalf("RunOnce before due: %d, %v", n, err)
	}
	sent := len(u.Arrivals())

	u.setAnswer(status(201))
	now.Advance(time.Minute)
	if n, err := ob.RunOnce(ctx); n != 2 || err != nil {
		t.Fatalf("RunOnce: %d, %v", n, err)
	}
	replays := u.Arrivals()[sent:]
	if len(replays) != 2 {
		t.Fatalf("%d replays", len(replays))
	}
	for _, a := range replays {
		if a.Key != firstKeys[a.Path] || a.Key == "" {
			t.Errorf("%s: replayed with key %q, first sent with %q", a.Path, a.Key, firstKeys[a.Path])
		}
		if a.Auth != "Bearer replay-token" {
			t.Errorf("%s: Authorization %q, want Authorize's", a.Path, a.Auth)
		}
		if !strings.HasPrefix(a.Body, "body ") {
			t.Errorf("%s: body %q", a.Path, a.Body)
		}
	}
	for _, id := range ids {
		e := get(t, ob, id)
		if e.State != Delivered || e.Attempts != 2 || e.LastStatus != 201 || e.LastBody != "Created " || !e.NextAt.IsZero() {
			t.Errorf("entry: %+v", e)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(results) != 2 || results[0].Err != nil || results[0].Entry.State != Delivered {
		t.Errorf("results: %+v", results)
	}
	// Delivered entries are not sent again.
	now.Advance(24 * time.Hour)
	if n, _ := ob.RunOnce(ctx); n != 0 {
		t.Errorf("delivered entries claimed again: %d", n)
	}
}

// A replay that finds the upstream still failing waits its turn: the
// schedule's next step, and the other entries to that upstream wait with
// it, unsent.
func TestReplayWaitsItsTurn(t *testing.T) {
	u := newUpstream(t, status(503))
	ob, now := newTestOutbox(t, memStore(t), u, nil)
	ids := deferN(t, ob, u, 3)
	ctx := context.Background()
	sent := len(u.Arrivals()) // 3 requests × 3 attempts

	now.Advance(time.Minute)
	if n, err := ob.RunOnce(ctx); n != 3 || err != nil {
		t.Fatalf("RunOnce: %d, %v", n, err)
	}
	if got := paths(u.Arrivals()[sent:]); got != 1 {
		t.Fatalf("%d entries sent, want 1: the others wait with it", got)
	}
	var failed, held int
	for _, id := range ids {
		e := get(t, ob, id)
		switch e.Attempts {
		case 2:
			failed++
			if e.State != Pending || e.LastStatus != 503 || !e.NextAt.Equal(now.Now().Add(5*time.Minute)) {
				t.Errorf("failed replay: %+v (next in %v)", e, e.NextAt.Sub(now.Now()))
			}
		case 1:
			held++
			if e.State != Pending || !e.NextAt.Equal(now.Now().Add(5*time.Minute)) {
				t.Errorf("held entry: %+v (next in %v)", e, e.NextAt.Sub(now.Now()))
			}
		}
	}
	if failed != 1 || held != 2 {
		t.Fatalf("%d failed, %d held", failed, held)
	}
	// Polling on before the turn comes sends nothing.
	for range 10 {
		now.Advance(29 * time.Second)
		if n, _ := ob.RunOnce(ctx); n != 0 {
			t.Fatalf("claimed %d before the turn", n)
		}
	}
	sent = len(u.Arrivals())
	now.Advance(10 * time.Second)
	if n, _ := ob.RunOnce(ctx); n != 3 {
		t.Fatalf("claimed %d at the turn", n)
	}
	if got := paths(u.Arrivals()[sent:]); got != 1 {
		t.Fatalf("%d entries sent at the turn, want 1 (the upstream still fails)", got)
	}
	u.setAnswer(status(200))
	now.Advance(15 * time.Minute)
	if n, _ := ob.RunOnce(ctx); n != 3 {
		t.Fatalf("claimed %d once recovered", n)
	}
	for _, id := range ids {
		if e := get(t, ob, id); e.State != Delivered {
			t.Errorf("%+v", e)
		}
	}
}

// paths counts the distinct paths (entries) among arrivals.
func paths(as []arrival) int {
	m := map[string]bool{}
	for _, a := range as {
		m[a.Path] = true
	}
	return len(m)
}

func TestReplayHonoursRetryAfter(t *testing.T) {
	u := newUpstream(t, status(503))
	ob, now := newTestOutbox(t, memStore(t), u, nil)
	ids := deferN(t, ob, u, 1)
	u.setAnswer(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "7200")
		w.WriteHeader(429)
	})
	now.Advance(time.Minute)
	if n, _ := ob.RunOnce(context.Background()); n != 1 {
		t.Fatal("not replayed")
	}
	e := get(t, ob, ids[0])
	if wait := e.NextAt.Sub(now.Now()); e.State != Pending || e.LastStatus != 429 || wait < 2*time.Hour-time.Second || wait > 2*time.Hour+time.Second {
		t.Fatalf("entry %+v: next in %v, want the server's 2h", e, wait)
	}
}

func TestDeadLetters(t *testing.T) {
	ctx := context.Background()
	t.Run("final answer", func(t *testing.T) {
		u := newUpstream(t, status(503))
		ob, now := newTestOutbox(t, memStore(t), u, nil)
		id := deferN(t, ob, u, 1)[0]
		u.setAnswer(status(422))
		now.Advance(time.Minute)
		ob.RunOnce(ctx)
		e := get(t, ob, id)
		if e.State != Dead || e.LastStatus != 422 || !strings.Contains(e.LastBody, "Unprocessable") {
			t.Fatalf("%+v", e)
		}
		// Retry sends a dead letter again.
		u.setAnswer(status(200))
		if err := ob.Retry(ctx, id); err != nil {
			t.Fatal(err)
		}
		ob.RunOnce(ctx)
		if e := get(t, ob, id); e.State != Delivered || e.Attempts != 3 {
			t.Fatalf("after Retry: %+v", e)
		}
		if err := ob.Retry(ctx, id); err == nil {
			t.Error("Retry of a delivered entry")
		}
		if err := ob.Retry(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Retry of an unknown ID: %v", err)
		}
	})
	t.Run("max age", func(t *testing.T) {
		u := newUpstream(t, status(503))
		ob, now := newTestOutbox(t, memStore(t), u, func(o *Options) {
			o.Backoff = []time.Duration{time.Hour}
			o.MaxAge = 150 * time.Minute
		})
		id := deferN(t, ob, u, 1)[0]
		now.Advance(time.Hour)
		ob.RunOnce(ctx) // next at 2h: within age
		if e := get(t, ob, id); e.State != Pending {
			t.Fatalf("%+v", e)
		}
		now.Advance(time.Hour)
		ob.RunOnce(ctx) // next would be at 3h: past age
		e := get(t, ob, id)
		if e.State != Dead || e.Attempts != 3 || !e.NextAt.IsZero() || !strings.Contains(e.LastError, "gave up") {
			t.Fatalf("%+v", e)
		}
	})
}

// A large backlog is replayed page by page: the outbox never holds more
// than Workers × PageSize entries at once.
func TestBacklogIsPaged(t *testing.T) {
	const page, workers = 25, 2
	backlog := 3000
	if raceEnabled {
		backlog = 400 // bbolt under the race detector is 20 times slower
	}
	u := newUpstream(t, status(200))
	store := &countingStore{Store: memStore(t)}
	var delivered atomic.Int64
	ob, now := newTestOutbox(t, store, u, func(o *Options) {
		o.PageSize, o.Workers, o.PollInterval = page, workers, time.Millisecond
		o.OnResult = func(r Result) {
			if r.Entry.State == Delivered {
				delivered.Add(1)
			}
		}
	})
	ctx := context.Background()
	body := []byte(strings.Repeat("x", 1024))
	for i := range backlog {
		e := &Entry{ID: fmt.Sprintf("e%05d", i), State: Pending, Method: "POST", URL: u.URL + "/b",
			Body: body, IdempotencyKey: newUUID(), Created: now.Now(), NextAt: now.Now(), Attempts: 1}
		if err := store.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	go func() {
		for rctx.Err() == nil {
			if delivered.Load() >= int64(backlog) {
				cancel()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	ob.Run(rctx)
	if got := len(u.Arrivals()); got != backlog || delivered.Load() != int64(backlog) {
		t.Fatalf("%d sent, %d delivered of %d", got, delivered.Load(), backlog)
	}
	if store.maxAsk.Load() != page || store.maxOut.Load() > page*workers {
		t.Errorf("claimed %d at once, %d out at most; want ≤ %d, ≤ %d", store.maxAsk.Load(), store.maxOut.Load(), page, page*workers)
	}
	if n, _ := ob.RunOnce(ctx); n != 0 {
		t.Errorf("%d left", n)
	}
}
