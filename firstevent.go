package retryhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The first-event check. An LLM API that streams (server-sent events) sends
// its status and headers before it knows how the answer will go: Anthropic
// answers 200 text/event-stream and may then send, as its first event,
// "event: error" with an overloaded_error; OpenAI-compatible servers may open
// a stream with an error chunk. Nothing has reached the caller yet, so such
// an attempt is a failure like a 529 and is retried as one. Once the
// response is handed over, the transport never retries: an error later in
// the stream is the caller's to handle.

// Defaults of the first-event check; see [WithFirstEventCheck].
const (
	DefaultFirstEventTimeout  = 2 * time.Second
	DefaultFirstEventMaxBytes = 64 << 10
)

// WithFirstEventCheck sets how long, and how many bytes far, the transport
// reads a streamed answer before returning it: for a 2xx response of type
// text/event-stream (not compressed) it reads the first event, at most
// maxBytes bytes for at most timeout. The defaults are 2s and 64 KiB
// ([DefaultFirstEventTimeout], [DefaultFirstEventMaxBytes]); a timeout of 0 or
// less turns the check off, a maxBytes of 0 or less keeps the default.
// Per request: [FirstEventCheck].
//
// If the first event is an error of a transient kind, the attempt is
// judged as the status that error stands for, exactly as if the server had
// sent that status: the circuit breaker, the pacing and the retry budget
// count it, the classifier sees it (a response with that status and the
// event's data as its body), and it is retried as the policy allows:
//
//	Anthropic  event: error, error.type overloaded_error  529
//	           api_error                                   500
//	           rate_limit_error                            429
//	OpenAI     data: {"error": {...}}, error.type or code server_error 500
//	           (also "type":"error" with a code)          rate_limit_exceeded 429
//
// Events named "ping", comments and events without data are skipped: the
// first event with data decides. Any other first event (the answer
// starting, or an error that retrying cannot mend, such as
// invalid_request_error) hands the response over, and the caller reads the
// exact bytes the server sent: those read so far are served first, from
// memory, then the rest comes straight from the connection, with nothing
// buffered. If no event is complete within timeout or maxBytes (or the
// request's context ends), the response is handed over as it is, bytes read
// so far served first. When retrying stops on such an attempt (retries or
// the budget used up), the caller gets that last stream, error event
// included, as the server sent it.
//
// The wait is real time, not the transport's [Clock] ([WithClock]), as are the
// bounds on peeking at error bodies: a test clock whose timers fire at once
// would otherwise end every check before the first byte.
//
// Errors after the first event are not retried, whatever they are: part
// of the answer has reached the caller, and sending the request again would
// repeat it. They reach the caller in the stream, where the SDKs turn them
// into their own errors: an Anthropic "event: error" mid-stream is an
// *anthropic.Error from the stream's Err, an OpenAI error chunk an
// *ssestream.StreamError. A stream cut short by the network ends with a
// read error (io.ErrUnexpectedEOF, or the connection's error), and a stream
// that ends without its closing event (Anthropic's message_stop, OpenAI's
// data: [DONE]) was cut as well. Retry those at the level that knows what
// the caller already has.
func WithFirstEventCheck(timeout time.Duration, maxBytes int) Option {
	return FirstEventCheck(timeout, maxBytes).forTransport()
}

// FirstEventCheck overrides, for one request, how long and how far the
// transport reads a streamed answer's first event before returning it;
// [WithFirstEventCheck] sets it for every request and describes the check.
// A timeout of 0 or less turns it off for the request; a maxBytes of 0 or
// less means [DefaultFirstEventMaxBytes].
func FirstEventCheck(timeout time.Duration, maxBytes int) RequestOption {
	if maxBytes <= 0 {
		maxBytes = DefaultFirstEventMaxBytes
	}
	return RequestOption{func(p *policy) {
		p.firstEventTimeout = maxDuration(timeout, 0)
		p.firstEventMax = maxBytes
	}}
}

// streamFailure is a stream whose first event was an error of a transient
// kind: the attempt is judged as status.
type streamFailure struct {
	resp   *http.Response // the stream
	status int            // what the error stands for: 529, 500 or 429
	kind   string         // the error's type or code, as the provider named it
	data   []byte         // the event's data: the error body the classifier sees
}

func (f *streamFailure) String() string {
	return "the stream opened with " + f.kind + " (judged as " + strconv.Itoa(f.status) + ")"
}

// streamErrorStatus maps the transient error kinds of streams to the status
// they stand for.
var streamErrorStatus = map[string]int{
	"overloaded_error":    StatusOverloaded,               // Anthropic
	"api_error":           http.StatusInternalServerError, // Anthropic
	"rate_limit_error":    http.StatusTooManyRequests,     // Anthropic
	"server_error":        http.StatusInternalServerError, // OpenAI
	"rate_limit_exceeded": http.StatusTooManyRequests,     // OpenAI
}

// checkFirstEvent reads the first event of a stream, bounded in time and
// size, and puts what it read back in front of the rest. It returns the
// failure the event reports, or nil when the stream is to be handed over.
func (c *call) checkFirstEvent(resp *http.Response) *streamFailure {
	return peekFirstEvent(c.ctx, resp, c.policy.firstEventTimeout, c.policy.firstEventMax)
}

// peekFirstEvent is checkFirstEvent for a policy's timeout and maxBytes,
// within ctx; the quick path calls it too, so that a stream that opens
// well (most do) costs no attempt loop.
func peekFirstEvent(ctx context.Context, resp *http.Response, timeout time.Duration, maxBytes int) *streamFailure {
	slot := &resp.Body
	if b := trackedBody(resp); b != nil {
		slot = &b.rc
	}
	// peeking is set before peek starts: a caller that gets the body
	// before the goroutine runs must wait for it, not read orig alongside.
	p := &firstEventBody{orig: *slot, max: maxBytes, peeking: true}
	if p.max >= firstReadSize {
		p.pooled = peekBuffers.Get().(*[]byte)
		p.buf = (*p.pooled)[:0]
	}
	*slot = p
	go p.peek()
	// The fast path, taken when the first event is already there (it
	// usually comes with the headers): yielding runs peek at once on this
	// thread (a new goroutine is next in line), and when its reads did not
	// block it has decided before this goroutine resumes. Nothing then
	// waits: no channel, no timer, no wake-up. Only a peek that is still
	// reading is waited for, bounded by the timer and the context.
	runtime.Gosched()
	p.mu.Lock()
	if p.peeking {
		p.decided = make(chan struct{})
		p.mu.Unlock()
		timer := time.NewTimer(timeout)
		select {
		case <-p.decided:
			timer.Stop()
		case <-timer.C:
			p.giveUp()
			return nil
		case <-ctx.Done():
			timer.Stop()
			p.giveUp()
			return nil
		}
		p.mu.Lock()
	}
	p.mu.Unlock()
	if !p.complete {
		return nil
	}
	name := ""
	if p.event.isError {
		name = "error"
	}
	status, kind := streamErrorKind(name, p.event.data)
	if status == 0 {
		return nil
	}
	// A copy: the event's data may lie in the peek's buffer, which goes
	// back to its pool when the body is closed.
	return &streamFailure{resp: resp, status: status, kind: kind, data: bytes.Clone(p.event.data)}
}

// streamErrorKind reports the status a stream's error event stands for, and
// its kind; 0 for an event that is not an error of a transient kind.
func streamErrorKind(name string, data []byte) (status int, kind string) {
	if name != "error" && !bytes.Contains(data, []byte(`"error"`)) {
		return 0, "" // the common case, a stream starting, without parsing it
	}
	var ev struct {
		Type  string          `json:"type"`
		Code  any             `json:"code"`
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return 0, ""
	}
	var kinds [2]any
	if len(ev.Error) > 0 && ev.Error[0] == '{' {
		// Anthropic {"type":"error","error":{"type":...}}; OpenAI
		// {"error":{"type":...,"code":...}}: the code is the precise one.
		var e struct {
			Type string `json:"type"`
			Code any    `json:"code"`
		}
		if json.Unmarshal(ev.Error, &e) != nil {
			return 0, ""
		}
		kinds = [2]any{e.Code, e.Type}
	} else if name == "error" || ev.Type == "error" {
		// OpenAI Responses: {"type":"error","code":...}.
		kinds = [2]any{ev.Code, nil}
	}
	for _, k := range kinds {
		if s, ok := k.(string); ok {
			if status := streamErrorStatus[s]; status != 0 {
				return status, s
			}
		}
	}
	return 0, ""
}

// firstEventBody is a stream whose first bytes are read ahead by peek, in a
// goroutine of its own, until its first event is complete. The caller's
// reads serve what peek read, then, once peek has stopped, go straight to
// orig. While peek has a read pending (checkFirstEvent gave up waiting, but
// the read cannot be abandoned), a caller's Read waits for that read, peek's
// last, as it would have waited on orig.
type firstEventBody struct {
	orig io.ReadCloser
	max  int

	// decided is closed when peek has decided (or stopped); made, under
	// mu, only when checkFirstEvent has to wait for that.
	decided chan struct{}

	mu       sync.Mutex
	buf      []byte // bytes peek read
	off      int    // bytes of buf served
	err      error  // the error that ended peek's reading (io.EOF included)
	peeking  bool   // peek is still reading
	stop     bool   // peek is to stop after its pending read
	complete bool   // the first event is complete (then event holds it)
	event    firstEvent
	parser   sseParser
	direct   atomic.Bool // buf is served and peek has stopped: Read goes to orig
	pooled   *[]byte     // where buf came from in peekBuffers; nil once given back
}

// firstEvent is the first event with data, other than a ping.
type firstEvent struct {
	isError bool // its type is "error" (the only type that matters)
	data    []byte
	copied  bool // data is a copy of its own, not a piece of the buffer
}

// firstEventSink adapts firstEvent's method set to sseSink (its data field
// and method would share a name).
type firstEventSink struct{ e *firstEvent }

func (s firstEventSink) data(p []byte)             { s.e.addData(p) }
func (s firstEventSink) dispatch(name []byte) bool { return s.e.end(name) }

// addData takes a piece of the event's data. The first piece is kept where
// it lies (in the peek's buffer, capped so nothing appends into it), as it
// is usually the whole of the data; a second piece copies them out.
func (e *firstEvent) addData(p []byte) {
	switch {
	case e.data == nil && !e.copied:
		e.data = p[:len(p):len(p)]
	case !e.copied:
		e.data, e.copied = append(append(make([]byte, 0, len(e.data)+len(p)+64), e.data...), p...), true
	default:
		e.data = append(e.data, p...)
	}
}

func (e *firstEvent) end(name []byte) bool {
	if string(name) == "ping" {
		e.data, e.copied = nil, false
		return true
	}
	e.isError = string(name) == "error"
	return false
}

// firstReadSize is the buffer peek starts with; it grows up to max. A
// first event is usually well under it (Anthropic's message_start is about
// 500 bytes).
const firstReadSize = 4 << 10

// peekBuffers keeps the buffers of firstReadSize that peeks start with, for
// the next stream, once their bytes are served or the body is closed.
var peekBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, firstReadSize)
	return &b
}}

// release gives the buffer back to its pool, if it came from there and
// peek has stopped. Called with p.mu held.
func (p *firstEventBody) release() {
	if p.pooled == nil || p.peeking {
		return
	}
	if cap(p.buf) == firstReadSize { // not grown: still the pool's
		*p.pooled = p.buf[:0]
		peekBuffers.Put(p.pooled)
	}
	p.buf, p.off, p.pooled = nil, 0, nil
}

// peek reads orig until the first event is complete, the read fails or
// ends, max bytes are read, or it is told to stop.
func (p *firstEventBody) peek() {
	p.mu.Lock()
	defer func() {
		p.peeking = false
		if p.decided != nil {
			close(p.decided)
		}
		p.mu.Unlock()
	}()
	for !p.stop {
		if len(p.buf) == cap(p.buf) {
			if len(p.buf) >= p.max {
				return // no event within max bytes
			}
			grown := make([]byte, len(p.buf), min(max(2*cap(p.buf), firstReadSize), p.max))
			copy(grown, p.buf)
			p.buf = grown
		}
		dst := p.buf[len(p.buf):cap(p.buf)]
		p.mu.Unlock()
		n, err := p.orig.Read(dst)
		p.mu.Lock()
		start := len(p.buf)
		p.buf = p.buf[:start+n]
		if n > 0 {
			p.parser.feed(p.buf[start:], firstEventSink{&p.event})
			if p.parser.stopped {
				p.complete = true
				return
			}
		}
		if err != nil {
			p.err = err
			return
		}
	}
}

// giveUp tells peek to stop after its pending read: the caller gets the
// stream as it is.
func (p *firstEventBody) giveUp() {
	p.mu.Lock()
	p.stop = true
	p.mu.Unlock()
}

// Read serves the bytes peek read, then reads orig. A Read while peek is
// still reading (checkFirstEvent gave up on it) waits for peek's pending
// read, its last, as it would have waited on orig.
func (p *firstEventBody) Read(b []byte) (int, error) {
	if p.direct.Load() {
		return p.orig.Read(b)
	}
	p.mu.Lock()
	if p.off == len(p.buf) && p.peeking {
		decided := p.decided // made before the body was handed over
		p.mu.Unlock()
		<-decided
		p.mu.Lock()
	}
	if p.off < len(p.buf) {
		n := copy(b, p.buf[p.off:])
		p.off += n
		p.mu.Unlock()
		return n, nil
	}
	err := p.err
	p.release() // served: the rest of a long stream needs no buffer
	if err == nil {
		p.direct.Store(true)
	}
	p.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return p.orig.Read(b)
}

// Close closes orig, which also ends a pending read of peek's.
func (p *firstEventBody) Close() error {
	p.mu.Lock()
	p.stop = true
	p.release()
	p.mu.Unlock()
	return p.orig.Close()
}
