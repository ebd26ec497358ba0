package outbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/retryhttp/retryhttp"
)

// Defaults of Options.
const (
	DefaultMaxAge       = 72 * time.Hour
	DefaultLease        = 5 * time.Minute
	DefaultPageSize     = 100
	DefaultWorkers      = 2
	DefaultPollInterval = time.Second
	DefaultMaxBodyBytes = 4 << 20
	DefaultSnippetBytes = 1 << 10
)

// DefaultBackoff is the replay schedule: the wait after the first failed
// send, after the second, ...; the last one repeats.
var DefaultBackoff = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour, 3 * time.Hour, 6 * time.Hour}

// ErrDeferred matches (errors.Is) the error Do returns when it saved the
// request for later instead of failing it. The error is a *DeferredError.
var ErrDeferred = errors.New("outbox: request deferred")

// ErrBodyTooLarge is returned by Do, before sending, for a body larger
// than Options.MaxBodyBytes: the outbox could not save it.
var ErrBodyTooLarge = errors.New("outbox: request body too large to save")

// DeferredError is Do's error for a request the transport gave up on for a
// transient reason, now saved in the outbox under ID and replayed by Run.
// errors.Is(err, ErrDeferred) is true, and errors.As reaches Cause (a
// *retryhttp.Error), so errors.Is(err, retryhttp.ErrRateLimited) and the
// like still tell what happened.
type DeferredError struct {
	ID    string           // the entry's ID, for Outbox.Get
	Cause *retryhttp.Error // why the send failed
}

func (e *DeferredError) Error() string {
	return "outbox: saved as " + e.ID + " for a later retry: " + e.Cause.Error()
}

// Is makes errors.Is(err, ErrDeferred) true.
func (e *DeferredError) Is(target error) bool { return target == ErrDeferred }

// Unwrap returns Cause.
func (e *DeferredError) Unwrap() error { return e.Cause }

// UserMessage is the sentence for the people behind the request: it was
// received and will go through, no action needed.
func (e *DeferredError) UserMessage() string {
	return "The system was briefly congested; we received your request safely and are retrying it automatically."
}

// Options configure an Outbox. Transport and Store are required.
type Options struct {
	// Transport sends Do's requests and the replays: a
	// *retryhttp.RetryTransport, so that each send is retried, paced and
	// held as usual, and the outbox takes over only when it gives up.
	Transport http.RoundTripper
	// Store keeps the entries: OpenBolt's, or NewRedisStore's.
	Store Store
	// Authorize adds credentials to a replay before it is sent: the
	// outbox never saves them. Do refuses to save (it returns the
	// original failure) a request that carried credentials when
	// Authorize is nil. An error counts as a transient failure.
	Authorize func(*http.Request) error
	// OnResult is called after each replay, its outcome saved.
	OnResult func(Result)
	// Backoff is the replay schedule (DefaultBackoff if empty). A
	// server's Retry-After (retryhttp.Error.RetryAt) later than the
	// schedule's time wins.
	Backoff []time.Duration
	// MaxAge: an entry whose next replay would fall later than this after
	// it was saved becomes a dead letter instead (DefaultMaxAge).
	MaxAge time.Duration
	// Lease is the visibility timeout: how long a claimed entry is
	// reserved for the worker that claimed it (DefaultLease). A replay
	// is not started past 90% of it and is cut off at 90% of it, so no
	// other worker sends it again while the lease runs. A worker that
	// dies leaves its entries due again when the lease ends.
	Lease time.Duration
	// PageSize is how many due entries a worker claims and holds at once
	// (DefaultPageSize): memory stays bounded whatever the backlog.
	PageSize int
	// Workers is how many pages Run replays at once (DefaultWorkers).
	Workers int
	// PollInterval is how long an idle worker waits before looking for
	// due entries again (DefaultPollInterval).
	PollInterval time.Duration
	// MaxBodyBytes bounds the body Do reads and saves (DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// SnippetBytes bounds Entry.LastBody (DefaultSnippetBytes).
	SnippetBytes int
	// Now is the outbox's clock for its schedule (time.Now if nil).
	Now func() time.Time
	// Logger receives failures to save or update entries (slog.Default()
	// if nil).
	Logger *slog.Logger
}

// Result is the outcome of one replay, given to Options.OnResult.
type Result struct {
	Entry Entry // the entry as saved after the replay
	Err   error // the replay's failure (a *retryhttp.Error, mostly); nil when delivered
}

// Outbox sends requests now, and saves those that fail for a transient
// reason to replay them later. It is safe for concurrent use.
type Outbox struct {
	o     Options
	mu    sync.Mutex
	holds map[string]time.Time // host -> no replay before then (learned in this process)
}

// New returns an Outbox, or an error if Transport or Store is missing.
func New(o Options) (*Outbox, error) {
	if o.Transport == nil || o.Store == nil {
		return nil, errors.New("outbox: Options.Transport and Options.Store are required")
	}
	if len(o.Backoff) == 0 {
		o.Backoff = DefaultBackoff
	}
	for _, d := range o.Backoff {
		if d <= 0 {
			return nil, errors.New("outbox: Options.Backoff holds a wait that is not positive")
		}
	}
	def(&o.MaxAge, DefaultMaxAge)
	def(&o.Lease, DefaultLease)
	def(&o.PageSize, DefaultPageSize)
	def(&o.Workers, DefaultWorkers)
	def(&o.PollInterval, DefaultPollInterval)
	def(&o.MaxBodyBytes, DefaultMaxBodyBytes)
	def(&o.SnippetBytes, DefaultSnippetBytes)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Outbox{o: o, holds: map[string]time.Time{}}, nil
}

func def[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// credentialHeaders are removed before an entry is saved.
var credentialHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key", "Api-Key"}

// Do sends req through the transport and returns its response, as
// http.RoundTripper does, with one difference: when the transport gives up
// for a transient reason (rate limited, circuit open, retries exhausted on
// a 429 or 5xx, the deadline, the network), Do saves the request and
// returns a *DeferredError (errors.Is(err, ErrDeferred)) with the entry's
// ID. Final failures (a 400, 401, 404, ...) come back as the transport
// returned them, unsaved. If the store cannot save the request, Do returns
// the original failure: it never says "saved" unless the entry is durably
// stored.
//
// A POST or PATCH without an Idempotency-Key gets one before the first
// send, the same on every replay, so a server that honours it runs the
// request once. Do does not change req: it sends a copy.
func (ob *Outbox) Do(req *http.Request) (*http.Response, error) {
	body, err := ob.readBody(req)
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.Body, req.GetBody = io.NopCloser(bytes.NewReader(body)), func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(body)), nil
	}
	if len(body) == 0 {
		req.Body, req.GetBody = http.NoBody, func() (io.ReadCloser, error) { return http.NoBody, nil }
	}
	key := req.Header.Get(retryhttp.IdempotencyKeyHeader)
	if key == "" {
		key = newUUID()
		if req.Method == http.MethodPost || req.Method == http.MethodPatch {
			req.Header.Set(retryhttp.IdempotencyKeyHeader, key)
		}
	}
	resp, err := ob.o.Transport.RoundTrip(req)
	if err == nil && resp.StatusCode < 400 {
		return resp, nil
	}
	var cause *retryhttp.Error
	if !errors.As(retryhttp.CheckResponse(resp, err), &cause) || !deferrable(cause) {
		return resp, err
	}
	e, creds := ob.newEntry(req, body, key, cause)
	if creds && ob.o.Authorize == nil {
		ob.o.Logger.Warn("outbox: not saving a failed request that carried credentials: Options.Authorize is not set", "method", e.Method, "url", e.URL)
		return resp, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), 10*time.Second)
	defer cancel()
	if perr := ob.o.Store.Put(ctx, e); perr != nil {
		ob.o.Logger.Error("outbox: could not save a failed request; returning the failure", "method", e.Method, "url", e.URL, "err", perr)
		return resp, err
	}
	if resp != nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}
	return nil, &DeferredError{ID: e.ID, Cause: cause}
}

func (ob *Outbox) readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	defer req.Body.Close()
	body, err := io.ReadAll(io.LimitReader(req.Body, ob.o.MaxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("outbox: reading the request body: %w", err)
	}
	if int64(len(body)) > ob.o.MaxBodyBytes {
		return nil, ErrBodyTooLarge
	}
	return body, nil
}

// deferrable reports a failure worth saving for later: transient, and
// neither the caller's cancellation nor a fault of the request itself.
func deferrable(e *retryhttp.Error) bool {
	if errors.Is(e, context.Canceled) || errors.Is(e, retryhttp.ErrBodyNotReplayable) || errors.Is(e, retryhttp.ErrInvalidRequest) {
		return false
	}
	if errors.Is(e, context.DeadlineExceeded) || errors.Is(e, retryhttp.ErrPastDeadline) {
		return true // the caller's deadline, not the upstream's verdict
	}
	return e.Retryable
}

// newEntry makes the entry for a failed send, credentials stripped; creds
// reports whether there were any.
func (ob *Outbox) newEntry(req *http.Request, body []byte, key string, cause *retryhttp.Error) (*Entry, bool) {
	h := req.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	creds := false
	for _, name := range credentialHeaders {
		if h.Get(name) != "" {
			creds = true
		}
		h.Del(name)
	}
	h.Del(retryhttp.IdempotencyKeyHeader)
	u := *req.URL
	if u.User != nil {
		creds = true
		u.User = nil
	}
	now := ob.o.Now()
	e := &Entry{
		ID: newID(), State: Pending,
		Method: req.Method, URL: u.String(), Header: h, Body: body, IdempotencyKey: key,
		Created: now, Updated: now, Attempts: 1,
	}
	ob.recordFailure(e, cause, nil, now)
	ob.schedule(e, cause, now)
	return e, creds
}

// recordFailure notes a failed send on e.
func (ob *Outbox) recordFailure(e *Entry, cause *retryhttp.Error, resp *http.Response, now time.Time) {
	e.Updated = now
	e.LastStatus, e.LastError, e.LastBody = cause.StatusCode, cause.Error(), ""
	if resp != nil {
		e.LastBody = ob.snippet(resp)
	}
}

// schedule sets e's next replay after a transient failure: the schedule's
// time or the server's, whichever is later; a dead letter past MaxAge.
func (ob *Outbox) schedule(e *Entry, cause *retryhttp.Error, now time.Time) {
	next := now.Add(ob.o.Backoff[min(max(e.Attempts-1, 0), len(ob.o.Backoff)-1)])
	if cause != nil && cause.RetryAt.After(next) {
		next = cause.RetryAt
	}
	if next.After(e.Created.Add(ob.o.MaxAge)) {
		e.State, e.NextAt = Dead, time.Time{}
		e.LastError = "outbox: gave up: the next retry would come more than " + ob.o.MaxAge.String() + " after the request; last failure: " + e.LastError
		return
	}
	e.State, e.NextAt = Pending, next
}

func (ob *Outbox) snippet(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, int64(ob.o.SnippetBytes)))
	return strings.ToValidUTF8(string(b), "")
}

// Get returns the entry with the given ID: its state, attempts, last
// status and body snippet, and next replay time. ErrNotFound if unknown.
func (ob *Outbox) Get(ctx context.Context, id string) (*Entry, error) {
	return ob.o.Store.Get(ctx, id)
}

// Entries lists the entries in state (the dead letters, say), in the
// store's ID order, reading them from the store a page (Options.PageSize)
// at a time. The iteration stops at the first error, which it yields with
// a nil entry.
//
//	for e, err := range ob.Entries(ctx, outbox.Dead) {
//		if err != nil {
//			return err
//		}
//		fmt.Println(e.ID, e.URL, e.LastStatus, e.LastError)
//	}
func (ob *Outbox) Entries(ctx context.Context, state State) iter.Seq2[*Entry, error] {
	return func(yield func(*Entry, error) bool) {
		after := ""
		for {
			page, err := ob.o.Store.List(ctx, state, after, ob.o.PageSize)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, e := range page {
				if !yield(e, nil) {
					return
				}
			}
			if len(page) < ob.o.PageSize {
				return
			}
			after = page[len(page)-1].ID
		}
	}
}

// Retry makes a dead letter (or a pending entry) due now, its age counted
// afresh. It returns ErrNotFound for an unknown ID and an error for a
// delivered entry.
func (ob *Outbox) Retry(ctx context.Context, id string) error {
	e, err := ob.o.Store.Get(ctx, id)
	if err != nil {
		return err
	}
	if e.State == Delivered {
		return errors.New("outbox: entry " + id + " was delivered already")
	}
	now := ob.o.Now()
	e.State, e.NextAt, e.Created, e.Updated = Pending, now, now, now
	return ob.o.Store.Put(ctx, e)
}

// Run replays due entries with Options.Workers workers until ctx ends, and
// returns ctx's error. Each worker claims a page of due entries
// (Options.PageSize) and replays them one by one. Several processes may
// Run on one shared store (Redis), or one after another on a file.
func (ob *Outbox) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range ob.o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				n, err := ob.RunOnce(ctx)
				if err != nil && ctx.Err() == nil {
					ob.o.Logger.Error("outbox: claiming due entries", "err", err)
				}
				if n == 0 || err != nil {
					t := time.NewTimer(ob.o.PollInterval)
					select {
					case <-ctx.Done():
					case <-t.C:
					}
					t.Stop()
				}
			}
		}()
	}
	wg.Wait()
	return ctx.Err()
}

// RunOnce claims one page of due entries and replays them, and returns how
// many it claimed. Run calls it in a loop; tests and cron-like callers may
// call it themselves.
func (ob *Outbox) RunOnce(ctx context.Context) (int, error) {
	claimed := ob.o.Now()
	entries, err := ob.o.Store.Claim(ctx, claimed, ob.o.PageSize, ob.o.Lease)
	if err != nil {
		return 0, err
	}
	safeEnd := claimed.Add(ob.o.Lease - ob.o.Lease/10)
	for i, e := range entries {
		if ctx.Err() != nil || !ob.o.Now().Before(safeEnd) {
			// Not started in time: leave the rest to fall due when their
			// lease ends, so that no two workers send one entry at once.
			return i, ctx.Err()
		}
		ob.replay(ctx, e, safeEnd)
	}
	return len(entries), nil
}

// replay sends e once and saves the outcome.
func (ob *Outbox) replay(ctx context.Context, e *Entry, safeEnd time.Time) {
	now := ob.o.Now()
	host := hostOf(e.URL)
	if until := ob.hold(host, now); !until.IsZero() {
		// The upstream failed a moment ago: wait for its turn, unsent.
		e.NextAt, e.Updated = until, now
		ob.put(ctx, e, nil, false)
		return
	}
	actx, cancel := context.WithTimeout(ctx, safeEnd.Sub(now))
	defer cancel()
	req, err := http.NewRequestWithContext(actx, e.Method, e.URL, bytes.NewReader(e.Body))
	if err != nil {
		e.State, e.NextAt, e.LastError, e.Updated = Dead, time.Time{}, "outbox: "+err.Error(), now
		ob.put(ctx, e, err, true)
		return
	}
	req.Header = e.Header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set(retryhttp.IdempotencyKeyHeader, e.IdempotencyKey)
	if ob.o.Authorize != nil {
		if err := ob.o.Authorize(req); err != nil {
			e.Attempts++
			ob.recordFailure(e, &retryhttp.Error{Err: err, Retryable: true}, nil, now)
			e.LastError = "outbox: Authorize: " + err.Error()
			ob.schedule(e, nil, now)
			ob.put(ctx, e, err, true)
			return
		}
	}
	resp, err := ob.o.Transport.RoundTrip(req)
	now = ob.o.Now()
	if err == nil && resp.StatusCode < 400 {
		e.Attempts++
		e.State, e.NextAt, e.Updated = Delivered, time.Time{}, now
		e.LastStatus, e.LastError, e.LastBody = resp.StatusCode, "", ob.snippet(resp)
		resp.Body.Close()
		ob.put(ctx, e, nil, true)
		return
	}
	rerr := retryhttp.CheckResponse(resp, err)
	var cause *retryhttp.Error
	errors.As(rerr, &cause)
	if resp != nil {
		defer resp.Body.Close()
	}
	if ctx.Err() != nil {
		// Run is stopping: no verdict on the upstream. Due again at once
		// (the Idempotency-Key covers a send that got through).
		e.NextAt, e.Updated = now, now
		ob.put(context.WithoutCancel(ctx), e, rerr, false)
		return
	}
	e.Attempts++
	ob.recordFailure(e, cause, resp, now)
	if !deferrable(cause) {
		e.State, e.NextAt = Dead, time.Time{}
	} else {
		ob.schedule(e, cause, now)
		if e.State == Pending {
			ob.setHold(host, e.NextAt)
		}
	}
	ob.put(ctx, e, rerr, true)
}

// put saves a replay's outcome and, if report, tells OnResult.
func (ob *Outbox) put(ctx context.Context, e *Entry, err error, report bool) {
	if perr := ob.o.Store.Put(ctx, e); perr != nil {
		// The entry falls due again when its lease ends: sent once more,
		// under the same Idempotency-Key.
		ob.o.Logger.Error("outbox: could not save a replay's outcome", "id", e.ID, "err", perr)
		return
	}
	if report && ob.o.OnResult != nil {
		ob.o.OnResult(Result{Entry: *e, Err: err})
	}
}

// hold returns when host may be tried again, or zero if now.
func (ob *Outbox) hold(host string, now time.Time) time.Time {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	until, ok := ob.holds[host]
	if !ok {
		return time.Time{}
	}
	if !now.Before(until) {
		delete(ob.holds, host)
		return time.Time{}
	}
	return until
}

// setHold keeps this process's other replays to host from going before
// the time the failed one was rescheduled to.
func (ob *Outbox) setHold(host string, until time.Time) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if len(ob.holds) > 10000 {
		clear(ob.holds) // bounded: holds are an optimisation
	}
	if until.After(ob.holds[host]) {
		ob.holds[host] = until
	}
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Scheme + "://" + u.Host
}

// newID returns a random entry ID: 32 hex digits.
func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newUUID returns a random (version 4) UUID, the Idempotency-Key's usual
// shape.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
