// Package outbox saves the requests a retryhttp transport gave up on for a
// transient reason, and sends them again later: saved, not lost.
//
//	store, _ := outbox.OpenBolt("/var/lib/app/outbox.db")
//	ob, _ := outbox.New(outbox.Options{
//		Transport: retryhttp.New(nil),
//		Store:     store,
//		Authorize: func(r *http.Request) error { r.Header.Set("Authorization", "Bearer "+token()); return nil },
//	})
//	go ob.Run(ctx) // replays due entries
//
//	resp, err := ob.Do(req)
//	var d *outbox.DeferredError
//	if errors.As(err, &d) { // errors.Is(err, outbox.ErrDeferred)
//		show(d.UserMessage()) // "...we received your request safely and are retrying it automatically."
//		remember(d.ID)        // ob.Get(ctx, d.ID) tells what became of it
//	}
//
// # What is saved
//
// Do sends at once. When the transport gives up on a transient failure
// (retryhttp.ErrRateLimited, ErrCircuitOpen, retries exhausted on a 429
// or 5xx, the server's wait too long, the deadline, the network), Do
// saves the method, URL, headers and body, and returns a *DeferredError;
// final failures (400, 401, 404, 422, 501, ...) are returned as the
// transport returned them. Credentials are not saved: the Authorization,
// Proxy-Authorization, Cookie, X-Api-Key and Api-Key headers and the URL's
// userinfo are removed, and Options.Authorize adds credentials again to
// each replay (without Authorize, Do does not save a request that carried
// any). Secrets in the query string or the body are saved as they are.
// A POST or PATCH gets an Idempotency-Key before its first send, and every
// replay carries the same key.
//
// Do returns *DeferredError only once the store has the entry durably (the
// BoltStore fsyncs). If the store cannot write, Do returns the original
// failure.
//
// # Replays
//
// Run's workers claim a page of due entries at a time (Options.PageSize)
// under a lease (Options.Lease, the visibility timeout), send each through
// the same transport, and save the outcome: delivered (below 400), a dead
// letter (a final status, or older than Options.MaxAge), or pending again
// at the next step of Options.Backoff (1m, 5m, 15m, 1h, 3h, 6h) or the
// server's Retry-After, whichever is later. After a transient failure the
// worker holds the other entries for that upstream until the same time,
// unsent. A worker that dies mid-replay leaves its entries due when their
// lease ends: an entry may be sent once more, with the same
// Idempotency-Key (delivery is at least once).
//
// # Stores
//
// BoltStore keeps the outbox in one local file, for one process at a time.
// RedisStore keeps it in Redis (a sorted set of scheduled entries, and a
// stream read by a consumer group), shared by many worker processes.
//
// # Inspection and retention
//
// Outbox.Entries lists the entries in a state (the dead letters, say) a
// page at a time; Outbox.Get reads one, Outbox.Retry sends a dead letter
// again. Delivered entries are kept for Get until removed: set
// RedisStore.DeliveredTTL, or BoltStore.DeliveredTTL (each Put then
// removes a bounded batch of those delivered longer ago), or call
// BoltStore.PurgeDelivered from time to time. Pending entries and dead
// letters are never removed by these.
package outbox
