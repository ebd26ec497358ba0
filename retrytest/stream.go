package retrytest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Stream is an answer streamed as server-sent events (200,
// text/event-stream), in the format of the family's streaming API:
//
//   - [Anthropic]: the Messages events message_start (with the input tokens
//     in message.usage), content_block_start, ping, one content_block_delta
//     per word, content_block_stop, message_delta (with the output tokens
//     in usage) and message_stop; an error is "event: error" with
//     {"type":"error","error":{"type":...,"message":...}}.
//   - [OpenAI] and the others: Chat Completions chunks, "data: {...}" each
//     (the role, one chunk per word, the finish reason), then, when the
//     request asked for it with "stream_options": {"include_usage": true},
//     a chunk with no choices and the usage, and "data: [DONE]"; an error
//     is a chunk {"error":{"message","type","param","code"}}.
//
// A [Step] with a Stream answers with it. A request whose JSON body says
// "stream": true gets the zero Stream for its success (unless
// Config.Success answers), as the APIs stream when asked to.
type Stream struct {
	// Text is the answer's text, sent one word to a delta; "" is "ok".
	Text string
	// InputTokens and OutputTokens are the usage the stream reports; 0
	// means 1.
	InputTokens, OutputTokens int
	// ErrorType, when set, ends the stream with an error event of this
	// type in place of its event number ErrorAfter (0: the first event,
	// as [Anthropic]'s overloaded_error can come; 2: after two events).
	// Anthropic's types are overloaded_error, api_error, rate_limit_error,
	// ...; [OpenAI]'s server_error, rate_limit_exceeded, .... The connection
	// then ends normally.
	ErrorType  string
	ErrorAfter int
	// CutAfter, when positive, cuts the stream after that many events: the
	// connection closes without the stream's end, and the client's read
	// fails (io.ErrUnexpectedEOF). A [Flaky] truncation of a streamed
	// success cuts it after half its events.
	CutAfter int
	// FirstEventDelay holds the first event back, in real time, after the
	// status and headers have gone; EventDelay waits before each of the
	// others.
	FirstEventDelay, EventDelay time.Duration
}

// streamRequest is what a request body asks of a stream.
type streamRequest struct {
	stream, includeUsage bool
}

// readStreamRequest reads "stream" and "stream_options.include_usage"
// from a JSON request body.
func readStreamRequest(body []byte) streamRequest {
	if !bytes.Contains(body, []byte(`"stream"`)) {
		return streamRequest{}
	}
	var req struct {
		Stream        bool `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if json.Unmarshal(body, &req) != nil {
		return streamRequest{}
	}
	return streamRequest{req.Stream, req.StreamOptions.IncludeUsage}
}

// streamPlan is a stream ready to send: its events in order, each a
// complete event with its blank line, and whether it is cut after them.
type streamPlan struct {
	events          []string
	cut             bool
	first, interval time.Duration
}

// plan renders s for family f as the answer to arrival n.
func (s Stream) plan(f Family, n int, req streamRequest, truncate bool) streamPlan {
	var events []string
	if f == Anthropic {
		events = s.anthropicEvents(n)
	} else {
		events = s.openAIEvents(n, req.includeUsage)
	}
	p := streamPlan{first: s.FirstEventDelay, interval: s.EventDelay}
	switch {
	case s.ErrorType != "":
		k := min(max(s.ErrorAfter, 0), len(events))
		events = append(events[:k:k], s.errorEvent(f))
	case s.CutAfter > 0 && s.CutAfter < len(events):
		events, p.cut = events[:s.CutAfter], true
	case truncate:
		events, p.cut = events[:len(events)/2], true
	}
	p.events = events
	return p
}

func (s Stream) words() []string {
	text := s.Text
	if text == "" {
		text = "ok"
	}
	return strings.SplitAfter(text, " ")
}

func orOne(n int) int {
	if n <= 0 {
		return 1
	}
	return n
}

func sseEvent(name, data string) string {
	if name == "" {
		return "data: " + data + "\n\n"
	}
	return "event: " + name + "\ndata: " + data + "\n\n"
}

func (s Stream) anthropicEvents(n int) []string {
	id := "msg_retrytest_" + strconv.Itoa(n)
	events := []string{
		sseEvent("message_start", `{"type":"message_start","message":{"id":`+js(id)+`,"type":"message","role":"assistant","model":"retrytest-model","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":`+strconv.Itoa(orOne(s.InputTokens))+`,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}`),
		sseEvent("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
		sseEvent("ping", `{"type": "ping"}`),
	}
	for _, w := range s.words() {
		events = append(events, sseEvent("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+js(w)+`}}`))
	}
	return append(events,
		sseEvent("content_block_stop", `{"type":"content_block_stop","index":0}`),
		sseEvent("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":`+strconv.Itoa(orOne(s.OutputTokens))+`}}`),
		sseEvent("message_stop", `{"type":"message_stop"}`),
	)
}

func (s Stream) openAIEvents(n int, includeUsage bool) []string {
	usage := ""
	if includeUsage {
		usage = `,"usage":null`
	}
	chunk := func(choices string) string {
		return sseEvent("", `{"id":"chatcmpl-`+strconv.Itoa(n)+`","object":"chat.completion.chunk","created":0,"model":"retrytest-model","system_fingerprint":null,"choices":`+choices+usage+`}`)
	}
	events := []string{chunk(`[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]`)}
	for _, w := range s.words() {
		events = append(events, chunk(`[{"index":0,"delta":{"content":`+js(w)+`},"logprobs":null,"finish_reason":null}]`))
	}
	events = append(events, chunk(`[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]`))
	if includeUsage {
		in, out := orOne(s.InputTokens), orOne(s.OutputTokens)
		events = append(events, sseEvent("", `{"id":"chatcmpl-`+strconv.Itoa(n)+`","object":"chat.completion.chunk","created":0,"model":"retrytest-model","system_fingerprint":null,"choices":[],"usage":{"prompt_tokens":`+strconv.Itoa(in)+`,"completion_tokens":`+strconv.Itoa(out)+`,"total_tokens":`+strconv.Itoa(in+out)+`}}`))
	}
	return append(events, "data: [DONE]\n\n")
}

// errorEvent is the family's error event for s.ErrorType.
func (s Stream) errorEvent(f Family) string {
	if f == Anthropic {
		msg := anthropicMessages[s.ErrorType]
		if msg == "" {
			msg = "Error"
		}
		return sseEvent("error", `{"type":"error","error":{"type":`+js(s.ErrorType)+`,"message":`+js(msg)+`}}`)
	}
	status := http.StatusInternalServerError
	if s.ErrorType == "rate_limit_exceeded" {
		status = http.StatusTooManyRequests
	}
	return sseEvent("", openAIError(status, s.ErrorType, "tokens", 0))
}

// streamHeader sets the headers of a stream's answer.
func streamHeader(h http.Header) {
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Del("Content-Length")
}

// serveStream writes a stream's events, flushing each, with its delays.
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, a *answer) {
	copyHeader(w.Header(), a.header)
	streamHeader(w.Header())
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.Flush()
	p := a.streamPlan
	for i, ev := range p.events {
		if !s.c.wait(r.Context(), p.delay(i)) {
			panic(http.ErrAbortHandler) // the client went, or the server closes
		}
		io.WriteString(w, ev)
		rc.Flush()
	}
	if p.cut {
		if conn, _, err := rc.Hijack(); err == nil {
			conn.Close()
			return
		}
		panic(http.ErrAbortHandler)
	}
}

// delay is the wait before event i.
func (p *streamPlan) delay(i int) time.Duration {
	if i == 0 {
		return p.first
	}
	return p.interval
}

// streamBody is a Transport's stream: the events as they come, each after
// its delay in real time, then io.EOF, or io.ErrUnexpectedEOF for a cut
// stream. Close ends a pending wait.
type streamBody struct {
	ctx    context.Context
	plan   *streamPlan
	next   int    // the next event
	rest   string // what is left of the event being read
	closed chan struct{}
	once   sync.Once
}

func newStreamBody(ctx context.Context, p *streamPlan) *streamBody {
	return &streamBody{ctx: ctx, plan: p, closed: make(chan struct{})}
}

var errBodyClosed = errors.New("retrytest: read on closed response body")

func (b *streamBody) Read(p []byte) (int, error) {
	if b.rest == "" {
		if b.next == len(b.plan.events) {
			if b.plan.cut {
				return 0, io.ErrUnexpectedEOF
			}
			return 0, io.EOF
		}
		if d := b.plan.delay(b.next); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-b.ctx.Done():
				t.Stop()
				return 0, b.ctx.Err()
			case <-b.closed:
				t.Stop()
				return 0, errBodyClosed
			}
		}
		select {
		case <-b.closed:
			return 0, errBodyClosed
		default:
		}
		b.rest = b.plan.events[b.next]
		b.next++
	}
	n := copy(p, b.rest)
	b.rest = b.rest[n:]
	return n, nil
}

func (b *streamBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

// String describes the stream in a step's script form.
func (s Stream) String() string {
	if s.ErrorType != "" && s.ErrorAfter == 0 {
		return "stream:" + s.ErrorType
	}
	return "stream"
}

// validate reports what is wrong with a stream.
func (s Stream) validate() error {
	if s.ErrorAfter < 0 || s.CutAfter < 0 || s.InputTokens < 0 || s.OutputTokens < 0 {
		return errors.New("negative Stream count")
	}
	if s.FirstEventDelay < 0 || s.EventDelay < 0 {
		return errors.New("negative Stream delay")
	}
	if s.ErrorType != "" && !validErrorType(s.ErrorType) {
		return fmt.Errorf("Stream.ErrorType %q: want letters, digits, '_', '-', '.'", s.ErrorType)
	}
	return nil
}
