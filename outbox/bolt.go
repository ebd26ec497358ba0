package outbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The BoltStore's buckets: entries by ID; the schedule of pending ones,
// keyed by due time (big-endian Unix nanoseconds) then ID; the IDs of each
// state, keyed by state, "/", ID (for List); and the delivered entries by
// the time of delivery (Entry.Updated) then ID (for PurgeDelivered).
var (
	bucketEntries   = []byte("entries")
	bucketDue       = []byte("due")
	bucketStates    = []byte("states")
	bucketDelivered = []byte("delivered")
)

// purgeBatch bounds the delivered entries one Put removes when
// BoltStore.DeliveredTTL is set: the write stays short, and as every
// delivery is a Put, removals keep pace with deliveries.
const purgeBatch = 100

// BoltStore keeps the outbox in one local file with bbolt: the embedded
// default. Every Put and Claim is a transaction that bbolt syncs (fsync)
// to disk before it returns, so Do says "saved" only of what survives a
// crash. One process at a time opens the file (bbolt locks it); within it,
// Run's workers share it.
type BoltStore struct {
	db *bolt.DB
	// DeliveredTTL, if positive, makes each Put also remove (a bounded
	// batch of) the delivered entries delivered more than DeliveredTTL
	// ago (their Entry.Updated, against time.Now), so that the file does
	// not grow with every delivery; Get then returns ErrNotFound for
	// them. Zero keeps them (PurgeDelivered removes them on demand). Set
	// it before the store is used.
	DeliveredTTL time.Duration
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
// missing (and indexing the entries of a file written before List and
// PurgeDelivered existed). Close closes db.
func NewBoltStore(db *bolt.DB) (*BoltStore, error) {
	ready := false
	db.View(func(tx *bolt.Tx) error {
		ready = tx.Bucket(bucketEntries) != nil && tx.Bucket(bucketDue) != nil &&
			tx.Bucket(bucketStates) != nil && tx.Bucket(bucketDelivered) != nil
		return nil
	})
	if !ready {
		err := db.Update(func(tx *bolt.Tx) error {
			for _, name := range [][]byte{bucketEntries, bucketDue} {
				if _, err := tx.CreateBucketIfNotExists(name); err != nil {
					return err
				}
			}
			if tx.Bucket(bucketStates) != nil && tx.Bucket(bucketDelivered) != nil {
				return nil
			}
			// Index every entry afresh.
			for _, name := range [][]byte{bucketStates, bucketDelivered} {
				if tx.Bucket(name) != nil {
					if err := tx.DeleteBucket(name); err != nil {
						return err
					}
				}
				if _, err := tx.CreateBucket(name); err != nil {
					return err
				}
			}
			return tx.Bucket(bucketEntries).ForEach(func(_, v []byte) error {
				var e Entry
				if err := json.Unmarshal(v, &e); err != nil {
					return err
				}
				return index(tx, &e)
			})
		})
		if err != nil {
			return nil, err
		}
	}
	return &BoltStore{db: db}, nil
}

func stateKey(state State, id string) []byte { return []byte(string(state) + "/" + id) }

// index adds e to the state and delivered indexes.
func index(tx *bolt.Tx, e *Entry) error {
	if err := tx.Bucket(bucketStates).Put(stateKey(e.State, e.ID), nil); err != nil {
		return err
	}
	if e.State == Delivered {
		return tx.Bucket(bucketDelivered).Put(dueKey(e.Updated, e.ID), nil)
	}
	return nil
}

// unindex removes e, as saved, from the schedule and the indexes.
func unindex(tx *bolt.Tx, e *Entry) error {
	if e.State == Pending {
		if err := tx.Bucket(bucketDue).Delete(dueKey(e.NextAt, e.ID)); err != nil {
			return err
		}
	}
	if e.State == Delivered {
		if err := tx.Bucket(bucketDelivered).Delete(dueKey(e.Updated, e.ID)); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketStates).Delete(stateKey(e.State, e.ID))
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
			if err := unindex(tx, &o); err != nil {
				return err
			}
		}
		if e.State == Pending {
			if err := due.Put(dueKey(e.NextAt, e.ID), nil); err != nil {
				return err
			}
		}
		if err := index(tx, e); err != nil {
			return err
		}
		if err := entries.Put([]byte(e.ID), v); err != nil {
			return err
		}
		if s.DeliveredTTL > 0 {
			_, err := purge(tx, time.Now().Add(-s.DeliveredTTL), purgeBatch)
			return err
		}
		return nil
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

// List implements Store: the entries in state whose IDs sort after after,
// in ID order, at most limit.
func (s *BoltStore) List(_ context.Context, state State, after string, limit int) ([]*Entry, error) {
	var out []*Entry
	err := s.db.View(func(tx *bolt.Tx) error {
		out = out[:0]
		entries := tx.Bucket(bucketEntries)
		prefix := stateKey(state, "")
		c := tx.Bucket(bucketStates).Cursor()
		k, _ := c.Seek(stateKey(state, after))
		if after != "" && k != nil && string(k) == string(stateKey(state, after)) {
			k, _ = c.Next()
		}
		for ; k != nil && len(out) < limit && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			v := entries.Get(k[len(prefix):])
			if v == nil {
				continue // cannot happen: the index and the entry change in one transaction
			}
			e := new(Entry)
			if err := json.Unmarshal(v, e); err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PurgeDelivered removes the delivered entries delivered (Entry.Updated)
// before before, and returns how many it removed. Pending entries and dead
// letters are never removed. It works in transactions of a bounded size,
// each synced.
func (s *BoltStore) PurgeDelivered(ctx context.Context, before time.Time) (int, error) {
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		var n int
		err := s.db.Update(func(tx *bolt.Tx) error {
			var err error
			n, err = purge(tx, before, 1000)
			return err
		})
		total += n
		if err != nil || n < 1000 {
			return total, err
		}
	}
}

// purge removes at most n entries delivered before before, oldest first,
// and returns how many it removed.
func purge(tx *bolt.Tx, before time.Time, n int) (int, error) {
	entries, states := tx.Bucket(bucketEntries), tx.Bucket(bucketStates)
	end := uint64(max(before.UnixNano(), 0))
	var keys [][]byte
	c := tx.Bucket(bucketDelivered).Cursor()
	for k, _ := c.First(); k != nil && len(keys) < n && binary.BigEndian.Uint64(k) < end; k, _ = c.Next() {
		keys = append(keys, append([]byte(nil), k...))
	}
	for _, k := range keys {
		id := k[8:]
		if err := tx.Bucket(bucketDelivered).Delete(k); err != nil {
			return 0, err
		}
		if err := states.Delete(stateKey(Delivered, string(id))); err != nil {
			return 0, err
		}
		if err := entries.Delete(id); err != nil {
			return 0, err
		}
	}
	return len(keys), nil
}

// Close implements Store.
func (s *BoltStore) Close() error { return s.db.Close() }

var _ Store = (*BoltStore)(nil)
