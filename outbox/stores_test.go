package outbox

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// memStore is a BoltStore without fsync, for tests that need many writes
// and no crash safety.
func memStore(t testing.TB) *BoltStore {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "nosync.db"), 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewBoltStore(db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// countingStore counts Puts and watches how many claimed entries are out
// at once, and the largest Claim asked for.
type countingStore struct {
	Store
	puts, out, maxOut, maxAsk atomic.Int64
}

func (s *countingStore) Put(ctx context.Context, e *Entry) error {
	claimed := e.Claim != ""
	err := s.Store.Put(ctx, e)
	if err == nil {
		s.puts.Add(1)
		if claimed {
			s.out.Add(-1)
		}
	}
	return err
}

func (s *countingStore) Claim(ctx context.Context, now time.Time, n int, lease time.Duration) ([]*Entry, error) {
	for {
		m := s.maxAsk.Load()
		if int64(n) <= m || s.maxAsk.CompareAndSwap(m, int64(n)) {
			break
		}
	}
	es, err := s.Store.Claim(ctx, now, n, lease)
	out := s.out.Add(int64(len(es)))
	for {
		m := s.maxOut.Load()
		if out <= m || s.maxOut.CompareAndSwap(m, out) {
			break
		}
	}
	return es, err
}

// failingStore cannot write.
type failingStore struct{ Store }

func (failingStore) Put(context.Context, *Entry) error { return errors.New("disk full") }
