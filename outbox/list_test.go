package outbox

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// listIDs pages through s's entries in state, limit at a time.
func listIDs(t *testing.T, s Store, state State, limit int) []string {
	t.Helper()
	var ids []string
	after := ""
	for {
		page, err := s.List(context.Background(), state, after, limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > limit {
			t.Fatalf("a page of %d entries for a limit of %d", len(page), limit)
		}
		for _, e := range page {
			if e.State != state {
				t.Fatalf("listed %s as %s: %+v", e.ID, state, e)
			}
			ids = append(ids, e.ID)
		}
		if len(page) < limit {
			return ids
		}
		after = page[len(page)-1].ID
	}
}

// testStoreList checks List, on either store: each state's entries, in ID
// order, page by page, following an entry that changes state.
func testStoreList(t *testing.T, s Store) {
	ctx := context.Background()
	now := time.Now()
	put := func(id string, state State) {
		t.Helper()
		e := &Entry{ID: id, State: state, Method: "POST", URL: "http://api.test/", IdempotencyKey: "k-" + id,
			Created: now, Updated: now, Attempts: 1}
		if state == Pending {
			e.NextAt = now.Add(time.Hour)
		}
		if err := s.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		put(fmt.Sprint("p", i), Pending)
	}
	put("d0", Delivered)
	put("d1", Delivered)
	put("x0", Dead)
	for _, limit := range []int{1, 2, 5, 100} {
		if got := listIDs(t, s, Pending, limit); !slices.Equal(got, []string{"p0", "p1", "p2", "p3", "p4"}) {
			t.Errorf("pending, %d a page: %v", limit, got)
		}
	}
	if got := listIDs(t, s, Delivered, 1); !slices.Equal(got, []string{"d0", "d1"}) {
		t.Errorf("delivered: %v", got)
	}
	// An entry that turns dead leaves the pending ones.
	put("p2", Dead)
	if got := listIDs(t, s, Pending, 2); !slices.Equal(got, []string{"p0", "p1", "p3", "p4"}) {
		t.Errorf("pending after p2 died: %v", got)
	}
	if got := listIDs(t, s, Dead, 2); !slices.Equal(got, []string{"p2", "x0"}) {
		t.Errorf("dead: %v", got)
	}
	// A page starts after the given ID, whether or not it is listed.
	page, err := s.List(ctx, Pending, "p2", 10)
	if err != nil || len(page) != 2 || page[0].ID != "p3" || page[0].IdempotencyKey != "k-p3" {
		t.Errorf("after p2: %v %v", page, err)
	}
	// Claimed entries stay pending (their lease is not a state).
	if es, err := s.Claim(ctx, now.Add(2*time.Hour), 10, time.Minute); err != nil || len(es) != 4 {
		t.Fatalf("claimed %d: %v", len(es), err)
	}
	if got := listIDs(t, s, Pending, 3); len(got) != 4 {
		t.Errorf("pending while claimed: %v", got)
	}
}

func TestBoltStoreList(t *testing.T) { testStoreList(t, memStore(t)) }

func TestRedisStoreList(t *testing.T) { testStoreList(t, redisStore(t, startRedis(t))) }

// Entries reads a page at a time and stops where the caller stops.
func TestEntriesIteratesPageByPage(t *testing.T) {
	store := &countingStore{Store: memStore(t)}
	u := newUpstream(t, status(503))
	ob, _ := newTestOutbox(t, store, u, func(o *Options) { o.PageSize = 3 })
	ids := deferN(t, ob, u, 7)
	slices.Sort(ids)
	var got []string
	for e, err := range ob.Entries(context.Background(), Pending) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e.ID)
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("got %v, want %v", got, ids)
	}
	n := 0
	for range ob.Entries(context.Background(), Pending) {
		if n++; n == 4 {
			break
		}
	}
	for range ob.Entries(context.Background(), Dead) {
		t.Fatal("a dead letter where there is none")
	}
	broken := &listFailingStore{Store: memStore(t)}
	ob, _ = newTestOutbox(t, broken, u, nil)
	for e, err := range ob.Entries(context.Background(), Pending) {
		if e != nil || err == nil {
			t.Fatalf("%v %v: want the store's error", e, err)
		}
	}
}

type listFailingStore struct{ Store }

func (listFailingStore) List(context.Context, State, string, int) ([]*Entry, error) {
	return nil, errors.New("disk on fire")
}

// PurgeDelivered removes delivered entries older than the time given, and
// only those.
func TestBoltPurgeDelivered(t *testing.T) {
	s := memStore(t)
	ctx := context.Background()
	now := time.Now()
	put := func(id string, state State, age time.Duration) {
		t.Helper()
		e := &Entry{ID: id, State: state, Created: now.Add(-age), Updated: now.Add(-age)}
		if state == Pending {
			e.NextAt = now
		}
		if err := s.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 1500 { // more than one purge transaction
		put(fmt.Sprintf("old%04d", i), Delivered, 48*time.Hour)
	}
	put("new", Delivered, time.Hour)
	put("dead", Dead, 48*time.Hour)
	put("pending", Pending, 48*time.Hour)
	n, err := s.PurgeDelivered(ctx, now.Add(-24*time.Hour))
	if err != nil || n != 1500 {
		t.Fatalf("purged %d: %v", n, err)
	}
	if _, err := s.Get(ctx, "old0007"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a purged entry: %v", err)
	}
	for _, id := range []string{"new", "dead", "pending"} {
		if _, err := s.Get(ctx, id); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	if got := listIDs(t, s, Delivered, 10); !slices.Equal(got, []string{"new"}) {
		t.Errorf("delivered after the purge: %v", got)
	}
	if es, _ := s.Claim(ctx, now, 10, time.Minute); len(es) != 1 || es[0].ID != "pending" {
		t.Errorf("the schedule after the purge: %v", es)
	}
}

// With DeliveredTTL, each Put removes delivered entries past it.
func TestBoltDeliveredTTL(t *testing.T) {
	s := memStore(t)
	s.DeliveredTTL = time.Hour
	ctx := context.Background()
	now := time.Now()
	for i, age := range []time.Duration{3 * time.Hour, 2 * time.Hour, time.Minute} {
		e := &Entry{ID: fmt.Sprint("d", i), State: Delivered, Created: now.Add(-age), Updated: now.Add(-age)}
		if err := s.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if got := listIDs(t, s, Delivered, 10); !slices.Equal(got, []string{"d2"}) {
		t.Errorf("delivered: %v, want d2 alone", got)
	}
}

// A file written before the state indexes existed is indexed when opened.
func TestBoltIndexesAnOlderFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewBoltStore(db)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	for _, e := range []*Entry{
		{ID: "a", State: Dead, Updated: now},
		{ID: "b", State: Delivered, Updated: now.Add(-48 * time.Hour)},
		{ID: "c", State: Pending, NextAt: now},
	} {
		if err := s.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	// As the older code left it: no index buckets.
	if err := db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketStates); err != nil {
			return err
		}
		return tx.DeleteBucket(bucketDelivered)
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s2, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := listIDs(t, s2, Dead, 10); !slices.Equal(got, []string{"a"}) {
		t.Errorf("dead: %v", got)
	}
	if got := listIDs(t, s2, Pending, 10); !slices.Equal(got, []string{"c"}) {
		t.Errorf("pending: %v", got)
	}
	if n, err := s2.PurgeDelivered(ctx, now.Add(-time.Hour)); n != 1 || err != nil {
		t.Errorf("purged %d: %v", n, err)
	}
}

// In Redis, a delivered entry past DeliveredTTL is no longer listed, and
// the next Put drops it from the delivered set.
func TestRedisDeliveredTTLLeavesTheList(t *testing.T) {
	s := redisStore(t, startRedis(t))
	s.DeliveredTTL = 100 * time.Millisecond
	ctx := context.Background()
	now := time.Now()
	for _, id := range []string{"d0", "d1"} {
		if err := s.Put(ctx, &Entry{ID: id, State: Delivered, Updated: now}); err != nil {
			t.Fatal(err)
		}
	}
	if got := listIDs(t, s, Delivered, 1); !slices.Equal(got, []string{"d0", "d1"}) {
		t.Fatalf("delivered: %v", got)
	}
	time.Sleep(300 * time.Millisecond) // Redis expires keys on its own clock
	if got := listIDs(t, s, Delivered, 1); len(got) != 0 {
		t.Errorf("delivered past the TTL: %v", got)
	}
	if err := s.Put(ctx, &Entry{ID: "x", State: Dead}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.rdb.ZCard(ctx, s.stateSet(Delivered)).Result(); n != 0 || err != nil {
		t.Errorf("%d IDs left in the delivered set: %v", n, err)
	}
}
