package retryhttp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// ErrBodyNotReplayable reports that a request body could not be sent again:
// it was larger than [WithMaxBufferedBody], failed while being read, or its
// GetBody or Seek failed. The attempt already made is the outcome.
var ErrBodyNotReplayable = errors.New("retryhttp: request body cannot be replayed")

// errBodyDetached is what a superseded attempt's body returns if the base
// transport still reads it after the attempt ended.
var errBodyDetached = errors.New("retryhttp: request body read after its attempt ended")

// requestBody makes one request's body sendable on every attempt without
// mutating the caller's request. It picks the cheapest way that works:
//
//   - req.GetBody (set by http.NewRequest for bytes, strings and their
//     readers): the first attempt sends req.Body, later ones a fresh GetBody
//     copy. Nothing is copied, nothing allocated.
//   - an io.Seeker body: each attempt seeks back to where the body started.
//   - anything else: the first attempt's reads are teed into a buffer of at
//     most limit bytes; later attempts send the buffer.
//
// It lives inside the call, on the stack; the last two ways share a source
// between attempts and keep it in a replayBody of their own.
type requestBody struct {
	orig    io.ReadCloser // nil: no body
	getBody func() (io.ReadCloser, error)
	length  int64
	sent    int         // attempts handed a body so far
	shared  *replayBody // an io.Seeker or buffered source
}

// replayBody is a body source shared by the attempts of one request.
//
// The base transport may go on reading an attempt's body after RoundTrip
// returns (net/http writes bodies from a separate goroutine), so every
// attempt gets an attemptBody that is detached, under a lock, before the
// source is rewound.
type replayBody struct {
	orig          io.ReadCloser
	seeker        io.Seeker
	start         int64
	contentLength int64
	limit         int64
	current       *attemptBody

	// buffer mode
	buf      []byte
	eof      bool  // the source reached EOF
	overflow bool  // more than limit bytes: not replayable
	readErr  error // the source failed: never resend what we have
}

func newRequestBody(req *http.Request, limit int64) requestBody {
	if req.Body == nil || req.Body == http.NoBody {
		return requestBody{}
	}
	b := requestBody{orig: req.Body, getBody: req.GetBody, length: req.ContentLength}
	if b.getBody != nil {
		return b
	}
	shared := &replayBody{orig: req.Body, contentLength: req.ContentLength, limit: limit}
	if s, ok := req.Body.(io.Seeker); ok {
		if pos, err := s.Seek(0, io.SeekCurrent); err == nil {
			shared.seeker, shared.start = s, pos
		}
	}
	if shared.seeker == nil && req.ContentLength > 0 && req.ContentLength <= limit {
		shared.buf = make([]byte, 0, req.ContentLength)
	}
	b.shared = shared
	return b
}

// present reports whether the request has a body.
func (b *requestBody) present() bool { return b.orig != nil }

// passThrough reports whether the first attempt can send the caller's body
// unchanged (no wrapper, no copy of the request for its sake).
func (b *requestBody) passThrough() bool { return b.shared == nil }

// next returns the body, GetBody and ContentLength for the next attempt.
func (b *requestBody) next() (io.ReadCloser, func() (io.ReadCloser, error), int64, error) {
	b.sent++
	first := b.sent == 1
	if b.shared != nil {
		return b.shared.next(first)
	}
	if first {
		return b.orig, b.getBody, b.length, nil
	}
	rc, err := b.getBody()
	if err != nil {
		return nil, nil, 0, fmt.Errorf("%w: GetBody: %w", ErrBodyNotReplayable, err)
	}
	return rc, b.getBody, b.length, nil
}

// replayError tells, before a wait is started, whether another attempt can
// send the same bytes.
func (b *requestBody) replayError() error {
	if b.shared == nil {
		return nil
	}
	return b.shared.replayError()
}

// readFailure is the error the body returned while an attempt read it, if
// it failed (known for bodies read through a shared source: an io.Seeker or
// a buffered body; a body with GetBody goes out as it is). The attempt is
// over: its view of the source is detached first.
func (b *requestBody) readFailure() error {
	if b.shared == nil || b.shared.seeker != nil {
		return nil
	}
	b.shared.detach()
	return b.shared.readErr
}

// close releases the caller's body. The base transport closed the bodies it
// was given; the caller's own body is ours to close unless it went out as is.
func (b *requestBody) close() {
	switch {
	case b.orig == nil:
	case b.shared != nil:
		b.shared.detach()
		b.orig.Close()
	case b.sent == 0:
		b.orig.Close() // refused before the first attempt
	}
}

func (b *replayBody) next(first bool) (io.ReadCloser, func() (io.ReadCloser, error), int64, error) {
	if b.seeker != nil {
		b.detach()
		if !first {
			if _, err := b.seeker.Seek(b.start, io.SeekStart); err != nil {
				return nil, nil, 0, fmt.Errorf("%w: seek: %w", ErrBodyNotReplayable, err)
			}
		}
		b.current = &attemptBody{src: b.orig}
		return b.current, nil, b.contentLength, nil
	}
	if first {
		b.current = &attemptBody{src: b.orig, tee: b}
		return b.current, nil, b.contentLength, nil
	}
	if err := b.replayError(); err != nil {
		return nil, nil, 0, err
	}
	return io.NopCloser(bytes.NewReader(b.buf)), b.getBuffered, int64(len(b.buf)), nil
}

func (b *replayBody) getBuffered() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(b.buf)), nil
}

// replayError tells whether another attempt can send the same bytes. In
// buffer mode it first detaches the attempt in flight and reads whatever of
// the body that attempt left unread, up to the limit.
func (b *replayBody) replayError() error {
	if b.seeker != nil {
		return nil
	}
	b.detach()
	b.fill()
	switch {
	case b.readErr != nil:
		return fmt.Errorf("%w: it failed while being read: %w", ErrBodyNotReplayable, b.readErr)
	case b.overflow:
		return fmt.Errorf("%w: it is larger than the %d-byte buffer (WithMaxBufferedBody)", ErrBodyNotReplayable, b.limit)
	case b.contentLength > 0 && int64(len(b.buf)) != b.contentLength:
		return fmt.Errorf("%w: it holds %d bytes but ContentLength is %d", ErrBodyNotReplayable, len(b.buf), b.contentLength)
	}
	return nil
}

// fill reads the rest of the source into the buffer.
func (b *replayBody) fill() {
	var chunk [32 << 10]byte
	for !b.eof && b.readErr == nil && !b.overflow {
		n, err := b.orig.Read(chunk[:])
		b.record(chunk[:n], err)
	}
}

// record keeps what a read returned and notes how the source ended.
func (b *replayBody) record(p []byte, err error) {
	if !b.overflow && len(p) > 0 {
		if int64(len(b.buf)+len(p)) > b.limit {
			b.overflow, b.buf = true, nil
		} else {
			b.buf = append(b.buf, p...)
		}
	}
	switch {
	case err == io.EOF:
		b.eof = true
	case err != nil:
		b.readErr = err
	}
}

func (b *replayBody) detach() {
	if b.current != nil {
		b.current.detach()
		b.current = nil
	}
}

// attemptBody is one attempt's view of a shared body source. Close does not
// close the source: the next attempt still needs it.
type attemptBody struct {
	mu       sync.Mutex
	src      io.Reader
	tee      *replayBody
	detached bool
}

func (a *attemptBody) Read(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.detached {
		return 0, errBodyDetached
	}
	n, err := a.src.Read(p)
	if a.tee != nil {
		a.tee.record(p[:n], err)
	}
	return n, err
}

func (a *attemptBody) Close() error {
	a.detach()
	return nil
}

func (a *attemptBody) detach() {
	a.mu.Lock()
	a.detached = true
	a.mu.Unlock()
}
