package retryhttp

import (
	"io"
	"net/http"
	"time"
)

// peekTimeout bounds how long a peek at an error body (the 403 and 429
// verdicts, maxVerdictBody; CheckResponse, maxErrorBody) waits for the
// body's bytes. Error bodies come with their headers; one that does not has
// stalled, and the decision is then made on status and headers alone.
// Real time, not the transport's Clock: a fake clock whose timers fire at
// once would cut every peek short.
const peekTimeout = 200 * time.Millisecond

// peekBody reads up to n bytes of resp's body, waiting at most peekTimeout,
// and puts them back in front of the rest, keeping the transport's tracking
// body in place. It returns the bytes, or nil when they did not all come in
// time. A body already read or closed yields what it yields (usually
// nothing).
//
// Why a goroutine: a read cannot be abandoned part-way, and a stalled error
// body must not hold up the call (plain net/http would return the response at
// once), yet the caller must still get the body exact and complete. So the
// peek reads in a goroutine of its own; if it is late, the caller gets the
// response anyway, and its first Read waits for the peek, serves the bytes
// the peek read, then the rest. Close closes the original body, which ends a
// pending peek.
func peekBody(resp *http.Response, n int64) []byte {
	slot := &resp.Body
	if b := trackedBody(resp); b != nil {
		slot = &b.rc
	}
	if *slot == nil || *slot == http.NoBody {
		return nil
	}
	p := &peekedBody{orig: *slot, done: make(chan struct{})}
	*slot = p
	go p.peek(n)
	t := time.NewTimer(peekTimeout)
	defer t.Stop()
	select {
	case <-p.done:
		return p.prefix
	case <-t.C:
		return nil
	}
}

// peekedBody is a body whose first bytes are read ahead by peek. Its fields
// other than orig and done are written by peek before done is closed, and
// touched by Read only after, so the two never race.
type peekedBody struct {
	orig   io.ReadCloser
	done   chan struct{} // closed when peek has finished
	prefix []byte        // the bytes peek read, not yet served
	err    error         // the error that ended peek's read, if not EOF
	eof    bool          // peek met the end of orig
}

func (p *peekedBody) peek(n int64) {
	defer close(p.done)
	p.prefix, p.err = io.ReadAll(io.LimitReader(p.orig, n))
	p.eof = p.err == nil && int64(len(p.prefix)) < n
}

// Read waits for the peek, then serves its bytes, then the rest of orig.
func (p *peekedBody) Read(b []byte) (int, error) {
	<-p.done
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	switch {
	case p.err != nil:
		return 0, p.err
	case p.eof:
		return 0, io.EOF
	}
	return p.orig.Read(b)
}

// Close closes orig, which also ends a pending peek.
func (p *peekedBody) Close() error { return p.orig.Close() }
