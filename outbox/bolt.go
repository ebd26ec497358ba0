package outbox

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The BoltStore's buckets: entries by ID, and the schedule of pending
// ones, keyed by due time (big-endian Unix nanoseconds) then ID.
var (
	bucketEntries = []byte("entries")
	bucketDue     = []byte("due")
)

// BoltStore keeps the outbox in one local file with bbolt: the embedded
// default. Every Put and Claim is a transaction that bbolt syncs (fsync)
// to disk before it returns, so Do says "saved" only of what survives a
// crash. One process at a time opens the file (bbolt locks it); within it,
// Run's workers share it.
type BoltStore struct {
	db *bolt.DB
}

// OpenBolt opens (creating it if need be) the outbox file at path. It
// waits at most 5 seconds for another process to release the file.
func OpenBolt(path string) (*BoltStore, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	s, err := NewBoltStore(db)
	if err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// NewBoltStore keeps the outbox in db, creating its buckets if they are
// missing. Close closes db.
func NewBoltStore(db *bolt.DB) (*BoltStore, error) {
	ready := false
	db.View(func(tx *bolt.Tx) error {
		ready = tx.Bucket(bucketEntries) != nil && tx.Bucket(bucketDue) != nil
		return nil
	})
	if !ready {
		err := db.Update(func(tx *bolt.Tx) error {
			if _, err := tx.CreateBucketIfNotExists(bucketEntries); err != nil {
				return err
			}
			_, err := tx.CreateBucketIfNotExists(bucketDue)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return &BoltStore{db: db}, nil
}

func dueKey(at time.Time, id string) []byte {
	k := make([]byte, 8, 8+len(id))
	binary.BigEndian.PutUint64(k, uint64(max(at.UnixNano(), 0)))
	return append(k, id...)
}

// Put implements Store.
func (s *BoltStore) Put(_ context.Context, e *Entry) error {
	v, err := json.Marshal(e)
	if err != nil {
		return err
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		entries, due := tx.Bucket(bucketEntries), tx.Bucket(bucketDue)
		if old := entries.Get([]byte(e.ID)); old != nil {
			var o Entry
			if err := json.Unmarshal(old, &o); err != nil {
				return err
			}
			if o.State == Pending {
				if err := due.Delete(dueKey(o.NextAt, o.ID)); err != nil {
					return err
				}
			}
		}
		if e.State == Pending {
			if err := due.Put(dueKey(e.NextAt, e.ID), nil); err != nil {
				return err
			}
		}
		return entries.Put([]byte(e.ID), v)
	})
	if err == nil {
		e.Claim = ""
	}
	return err
}

// Claim implements Store: the lease is written to the file (the entry's
// NextAt moves to its end), so it holds across a crash of the claimer.
func (s *BoltStore) Claim(_ context.Context, now time.Time, n int, lease time.Duration) ([]*Entry, error) {
	var out []*Entry
	err := s.db.Update(func(tx *bolt.Tx) error {
		out = out[:0]
		entries, due := tx.Bucket(bucketEntries), tx.Bucket(bucketDue)
		end := uint64(max(now.UnixNano(), 0))
		var keys [][]byte
		c := due.Cursor()
		for k, _ := c.First(); k != nil && len(keys) < n && binary.BigEndian.Uint64(k) <= end; k, _ = c.Next() {
			keys = append(keys, append([]byte(nil), k...))
		}
		until := now.Add(lease)
		for _, k := range keys {
			id := k[8:]
			var e Entry
			v := entries.Get(id)
			if v == nil {
				due.Delete(k) // an index key left behind; cannot happen in one transaction
				continue
			}
			if err := json.Unmarshal(v, &e); err != nil {
				return err
			}
			if err := due.Delete(k); err != nil {
				return err
			}
			e.NextAt = until
			e.Claim = "bolt"
			nv, err := json.Marshal(&e)
			if err != nil {
				return err
			}
			if err := due.Put(dueKey(until, e.ID), nil); err != nil {
				return err
			}
			if err := entries.Put(id, nv); err != nil {
				return err
			}
			out = append(out, &e)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Get implements Store.
func (s *BoltStore) Get(_ context.Context, id string) (*Entry, error) {
	var e *Entry
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketEntries).Get([]byte(id))
		if v == nil {
			return ErrNotFound
		}
		e = new(Entry)
		return json.Unmarshal(v, e)
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Close implements Store.
func (s *BoltStore) Close() error { return s.db.Close() }

var _ Store = (*BoltStore)(nil)
