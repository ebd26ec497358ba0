package retryhttp

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// maxDrain bounds how much of a superseded response body is read before it is
// closed: enough for a typical error body, so the connection can be reused,
// and no more, so a large or endless body does not hold the retry up.
const maxDrain = 64 << 10

// drainTimeout bounds how long draining a superseded response body may take
// (see maxDrain): a body that stalls is closed when it is up, so it never
// holds up the retry, at the cost of that one connection. It is real time,
// not the transport's Clock: a fake clock whose timers fire at once would
// close every body before it was drained.
const drainTimeout = 200 * time.Millisecond

// responseBody wraps the body of every response RoundTrip returns. It carries
// the attempt count (see Attempts) and why retrying stopped, and runs done
// once when the body is closed or read to EOF: that is when the attempt's
// resources (its timeout context, later its concurrency slot) are released.
//
// It is made for every response, so it is kept within 48 bytes (an
// allocation size class): the attempt count and whether anything is still
// held share one word.
type responseBody struct {
	rc      io.ReadCloser
	done    func()
	limit   *concurrencyLimit // released with done: the attempt's slot in the adaptive limit
	verdict *verdict          // set only when an error status is returned
	epoch   uint32            // the limit's epoch when the attempt was sent
	// state is the attempt count, with heldBit set while done or limit
	// is still to be released (cleared once released, or with nothing to
	// release): set in the literal that makes the body, before anyone
	// else sees it, and accessed atomically from then on (Read, Close and
	// Attempts may race).
	state uint32
}

// heldBit is the bit of responseBody.state that says something is still
// to be released; the bits below it are the attempt count.
const heldBit = 1 << 31

// bodyState is the initial state of a body after attempts, with done and
// limit (either may be nil) to release.
func bodyState(attempts int, done func(), limit *concurrencyLimit) uint32 {
	n := uint32(min(max(attempts, 0), heldBit-1))
	if done != nil || limit != nil {
		n |= heldBit
	}
	return n
}

// verdict is what the transport decided about an error response it
// returned, for CheckResponse to report.
type verdict struct {
	retryable  bool      // the outcome was judged transient
	stop       error     // the stop reason's sentinel (stop.go), if retrying stopped early
	stopReason string    // why retrying stopped early, if it did
	retryAt    time.Time // when retrying stopped early for lack of time
	decidedAt  time.Time // the transport clock's time when it returned
}

func (b *responseBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.finish()
	}
	return n, err
}

func (b *responseBody) Close() error {
	err := b.rc.Close()
	b.finish()
	return err
}

// finish releases what the attempt holds, once. A load before the swap,
// small enough to inline: Close after EOF (the usual order) finds it done
// without a call or a locked instruction.
func (b *responseBody) finish() {
	if atomic.LoadUint32(&b.state)&heldBit != 0 {
		b.release()
	}
}

// release is finish past its first test.
func (b *responseBody) release() {
	state := atomic.LoadUint32(&b.state)
	if state&heldBit == 0 || !atomic.CompareAndSwapUint32(&b.state, state, state&^heldBit) {
		return // released meanwhile
	}
	if b.done != nil {
		b.done()
	}
	if b.limit != nil {
		b.limit.release(b.epoch)
	}
}

// readWriteBody keeps the io.ReadWriteCloser of a 101 Switching Protocols
// response, so upgraded connections (WebSockets) work through the transport.
type readWriteBody struct {
	responseBody
	w io.Writer
}

func (b *readWriteBody) Write(p []byte) (int, error) { return b.w.Write(p) }

// wrapResponseBody installs the tracking body on resp; done and limit
// (either may be nil) are released when the body is done with.
func wrapResponseBody(resp *http.Response, attempts int, done func(), limit *concurrencyLimit, epoch uint32) {
	rc := resp.Body
	if rc == nil {
		rc = http.NoBody
	}
	if resp.StatusCode == http.StatusSwitchingProtocols && wrapUpgraded(resp, rc, attempts, done, limit, epoch) {
		return // the status first: no interface assertion on the common path
	}
	b := &responseBody{rc: rc, done: done, limit: limit, epoch: epoch, state: bodyState(attempts, done, limit)}
	resp.Body = b
	if rc == http.NoBody {
		// Nothing to read (HEAD, 204, 304, an empty body): the attempt is
		// over now, so its slot is not left to a Close that callers of a
		// bodiless response often skip.
		b.finish()
	}
}

// wrapUpgraded is wrapResponseBody for a 101 whose body is writable, and
// reports whether it was.
func wrapUpgraded(resp *http.Response, rc io.ReadCloser, attempts int, done func(), limit *concurrencyLimit, epoch uint32) bool {
	rwc, ok := rc.(io.ReadWriteCloser)
	if ok {
		resp.Body = &readWriteBody{responseBody{rc: rc, done: done, limit: limit, epoch: epoch, state: bodyState(attempts, done, limit)}, rwc}
	}
	return ok
}

// trackedBody returns the tracking body of a response RoundTrip returned.
func trackedBody(resp *http.Response) *responseBody {
	if resp == nil {
		return nil
	}
	switch b := resp.Body.(type) {
	case *responseBody:
		return b
	case *readWriteBody:
		return &b.responseBody
	}
	return nil
}

// Attempts returns how many attempts were made for a response that a
// [RetryTransport] returned: 1 when it was not retried. It returns 0 for a nil
// response or one that did not come from a RetryTransport.
func Attempts(resp *http.Response) int {
	if b := trackedBody(resp); b != nil {
		return int(atomic.LoadUint32(&b.state) &^ heldBit)
	}
	return 0
}

// discard drains a superseded response's body, at most maxDrain bytes for at
// most drainTimeout, and closes it, so its connection goes back to the pool.
// When the time is up the body is closed under the pending read, which ends
// it (net/http unblocks a Read when its body is closed).
func discard(resp *http.Response) {
	if resp == nil || resp.Body == nil {
		return
	}
	body := resp.Body
	if body == http.NoBody {
		return
	}
	if b := trackedBody(resp); b != nil && b.rc == http.NoBody {
		b.Close()
		return
	}
	closed := make(chan struct{})
	timer := time.AfterFunc(drainTimeout, func() {
		body.Close()
		close(closed)
	})
	io.CopyN(io.Discard, body, maxDrain)
	if timer.Stop() {
		body.Close()
	} else {
		<-closed // the timer closed it
	}
}
