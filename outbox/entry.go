package outbox

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// State is where an entry stands.
type State string

const (
	// Pending: waiting for its next replay at NextAt (or being replayed
	// now, under a lease that ends at NextAt).
	Pending State = "pending"
	// Delivered: a replay got a response below 400. Kept for Get.
	Delivered State = "delivered"
	// Dead: a dead letter. A replay got a final answer (a 4xx other than
	// 408 and 429, a 501), or the entry outlived Options.MaxAge. Kept for
	// inspection; Outbox.Retry sends it again.
	Dead State = "dead"
)

// Entry is a saved request and what became of it. It holds no
// credentials: the Authorization, Proxy-Authorization, Cookie, X-Api-Key
// and Api-Key headers and the URL's userinfo are removed before it is
// saved (Options.Authorize puts credentials back at send time).
type Entry struct {
	ID    string `json:"id"`
	State State  `json:"state"`

	Method         string      `json:"method"`
	URL            string      `json:"url"`
	Header         http.Header `json:"header,omitempty"`
	Body           []byte      `json:"body,omitempty"`
	IdempotencyKey string      `json:"idempotency_key"` // sent on every attempt, the first included

	Created  time.Time `json:"created"`
	Updated  time.Time `json:"updated"`
	Attempts int       `json:"attempts"` // sends made, Do's included
	NextAt   time.Time `json:"next_at"`  // the next replay (or the end of the running one's lease); zero unless Pending

	LastStatus int    `json:"last_status,omitempty"` // the last response's status; 0 if none came back
	LastError  string `json:"last_error,omitempty"`  // the last failure, for logs (credentials redacted by retryhttp)
	LastBody   string `json:"last_body,omitempty"`   // the start of the last response's body (Options.SnippetBytes)

	// Claim is the store's token for the lease under which a worker
	// replays the entry (Store.Claim sets it, Store.Put releases it). It
	// is not saved.
	Claim string `json:"-"`
}

// ErrNotFound is returned by Get for an ID the store does not hold.
var ErrNotFound = errors.New("outbox: no such entry")

// Store keeps entries durably. BoltStore (one local file) and RedisStore
// (shared by many processes) implement it; tests may wrap one.
type Store interface {
	// Put saves e (a new entry, or one a Claim returned) and has it
	// durably stored when it returns nil: a Pending entry becomes due at
	// NextAt, others leave the schedule. It releases e's claim, if any.
	Put(ctx context.Context, e *Entry) error
	// Claim leases at most n Pending entries due at now to the caller for
	// lease: none of them is returned by another Claim before now+lease,
	// unless Put first. If the caller dies, they fall due again then.
	Claim(ctx context.Context, now time.Time, n int, lease time.Duration) ([]*Entry, error)
	// Get returns the entry with the given ID, or ErrNotFound.
	Get(ctx context.Context, id string) (*Entry, error)
	// List returns at most limit entries in state whose IDs sort after
	// after ("" for the first), in ID order: pages of a listing that
	// holds no more than a page in memory. An entry that changes state
	// while the pages are read may be missed or seen twice.
	List(ctx context.Context, state State, after string, limit int) ([]*Entry, error)
	// Close releases the store's resources.
	Close() error
}
