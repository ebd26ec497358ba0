package retryhttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Streams as the providers send them (Anthropic Messages, OpenAI Chat
// Completions), shortened.
const (
	anthropicStream = "event: message_start\n" +
		`data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}` + "\n\n" +
		"event: content_block_start\n" +
		`data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
		"event: ping\n" +
		`data: {"type": "ping"}` + "\n\n" +
		"event: content_block_delta\n" +
		`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}` + "\n\n" +
		"event: content_block_stop\n" +
		`data: {"type":"content_block_stop","index":0}` + "\n\n" +
		"event: message_delta\n" +
		`data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}` + "\n\n" +
		"event: message_stop\n" +
		`data: {"type":"message_stop"}` + "\n\n"

	overloadedEvent = "event: error\n" +
		`data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}` + "\n\n"

	openAIStream = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":0,"model":"gpt-test","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n" +
		`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":0,"model":"gpt-test","choices":[{"index":0,"delta":{"content":"ok"},"logprobs":null,"finish_reason":null}]}` + "\n\n" +
		`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":0,"model":"gpt-test","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}` + "\n\n" +
		"data: [DONE]\n\n"
)

// anthropicError is the event an Anthropic stream opens with when it fails.
func anthropicError(typ string) string {
	return "event: error\n" + `data: {"type":"error","error":{"type":"` + typ + `","message":"failed"}}` + "\n\n"
}

// openAIError is the chunk an OpenAI-compatible stream opens with when it
// fails.
func openAIError(typ, code string) string {
	c := "null"
	if code != "" {
		c = `"` + code + `"`
	}
	return `data: {"error":{"message":"failed","type":"` + typ + `","param":null,"code":` + c + `}}` + "\n\n"
}

// streamSteps is a base transport that answers each attempt with the next
// 200 text/event-stream body, repeating the last, and counts the attempts.
func streamSteps(bodies ...string) (http.RoundTripper, *atomic.Int32) {
	var n atomic.Int32
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		i := int(n.Add(1)) - 1
		body := bodies[min(i, len(bodies)-1)]
		return &http.Response{
			StatusCode: http.StatusOK,
			Header:     http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}},
			Body:       io.NopCloser(strings.NewReader(body)),
			Request:    req,
		}, nil
	}), &n
}

// roundTripStream sends one request through rt and reads the whole body.
func roundTripStream(t *testing.T, rt http.RoundTripper, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

func TestStreamOpeningWithATransientErrorIsRetried(t *testing.T) {
	for _, tc := range []struct {
		name, first string
		status      int
	}{
		{"Anthropic overloaded_error", overloadedEvent, StatusOverloaded},
		{"Anthropic api_error", anthropicError("api_error"), 500},
		{"Anthropic rate_limit_error", anthropicError("rate_limit_error"), 429},
		{"OpenAI server_error", openAIError("server_error", ""), 500},
		{"OpenAI rate_limit_exceeded", openAIError("tokens", "rate_limit_exceeded"), 429},
		{"OpenAI Responses error event", "event: error\n" + `data: {"type":"error","code":"server_error","message":"failed","param":null,"sequence_number":1}` + "\n\n", 500},
		{"after comments and a ping", ": keep-alive\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\n" + overloadedEvent, StatusOverloaded},
		{"CRLF line endings", strings.ReplaceAll(overloadedEvent, "\n", "\r\n"), StatusOverloaded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, attempts := streamSteps(tc.first+anthropicStream, anthropicStream)
			clk := autoClock()
			var retried []Event
			rt := New(base, WithClock(clk), WithJitter(0), WithBackoff(time.Second, time.Second),
				WithHooks(Hooks{OnRetry: func(e Event) { retried = append(retried, e) }}))

			resp, body := roundTripStream(t, rt, post(t, "https://api.test/v1/messages", strings.NewReader(`{"stream":true}`)))

			assert.Equal(t, anthropicStream, body, "the caller reads the second stream, exactly")
			assert.Equal(t, 2, Attempts(resp))
			assert.EqualValues(t, 2, attempts.Load())
			require.Len(t, retried, 1)
			assert.Equal(t, tc.status, retried[0].StatusCode, "hooks see the status the error stands for")
			assert.Contains(t, retried[0].Reason, "the stream opened with")
			s := rt.Stats()[0]
			if tc.status == 429 {
				assert.EqualValues(t, 1, s.RateLimited, "the pacing saw a 429")
				assert.Zero(t, s.Failures)
			} else {
				assert.EqualValues(t, 1, s.Failures, "the breaker and the budget saw an upstream failure")
			}
		})
	}
}

func TestStreamsThatDoNotOpenWithATransientErrorAreHandedOverExactly(t *testing.T) {
	for _, tc := range []struct{ name, body string }{
		{"Anthropic", anthropicStream},
		{"OpenAI", openAIStream},
		{"Anthropic invalid_request_error", anthropicError("invalid_request_error") + anthropicStream},
		{"OpenAI insufficient_quota", openAIError("insufficient_quota", "insufficient_quota")},
		{"an error event that is not JSON", "event: error\ndata: overloaded\n\n"},
		{"an empty stream", ""},
		{"a BOM and CR line endings", "\xEF\xBB\xBF" + strings.ReplaceAll(openAIStream, "\n", "\r")},
		{"no blank line ever", "data: {\"error\":{\"type\":\"server_error\"}}"},
		{"an error after the first event", anthropicStream[:strings.Index(anthropicStream, "event: content_block_start")] + overloadedEvent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, attempts := streamSteps(tc.body, anthropicStream)
			rt := New(base, WithClock(autoClock()))
			resp, body := roundTripStream(t, rt, get(t, "https://api.test/v1/stream"))
			assert.Equal(t, tc.body, body)
			assert.Equal(t, 1, Attempts(resp))
			assert.EqualValues(t, 1, attempts.Load())
			assert.NoError(t, CheckResponse(resp, nil))
		})
	}
}

// A stream read a byte at a time comes out whole: the check reads the first
// event across many reads and serves them back.
func TestFirstEventCheckAcrossSmallReads(t *testing.T) {
	var n atomic.Int32
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		body := anthropicStream
		if n.Add(1) == 1 {
			body = overloadedEvent
		}
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
			Body: io.NopCloser(iotest.OneByteReader(strings.NewReader(body))), Request: req}, nil
	})
	rt := New(base, WithClock(autoClock()))
	resp, body := roundTripStream(t, rt, get(t, "https://api.test/x"))
	assert.Equal(t, anthropicStream, body)
	assert.Equal(t, 2, Attempts(resp))
}

func TestFirstEventCheckCanBeTurnedOff(t *testing.T) {
	t.Run("for the transport", func(t *testing.T) {
		base, attempts := streamSteps(overloadedEvent, anthropicStream)
		rt := New(base, WithClock(autoClock()), WithFirstEventCheck(0, 0))
		_, body := roundTripStream(t, rt, get(t, "https://api.test/x"))
		assert.Equal(t, overloadedEvent, body, "handed over as it came")
		assert.EqualValues(t, 1, attempts.Load())
	})
	t.Run("for one request", func(t *testing.T) {
		base, attempts := streamSteps(overloadedEvent, anthropicStream)
		rt := New(base, WithClock(autoClock()))
		req := get(t, "https://api.test/x")
		req = req.WithContext(ContextWithOptions(req.Context(), FirstEventCheck(0, 0)))
		_, body := roundTripStream(t, rt, req)
		assert.Equal(t, overloadedEvent, body)
		assert.EqualValues(t, 1, attempts.Load())
	})
	t.Run("on for one request when off for the transport", func(t *testing.T) {
		base, attempts := streamSteps(overloadedEvent, anthropicStream)
		rt := New(base, WithClock(autoClock()), WithFirstEventCheck(0, 0))
		req := get(t, "https://api.test/x")
		req = req.WithContext(ContextWithOptions(req.Context(), FirstEventCheck(time.Second, 0)))
		_, body := roundTripStream(t, rt, req)
		assert.Equal(t, anthropicStream, body)
		assert.EqualValues(t, 2, attempts.Load())
	})
}

// Only an uncompressed 2xx event stream is checked.
func TestFirstEventCheckAppliesOnlyToEventStreams(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		header http.Header
	}{
		{"JSON", 200, http.Header{"Content-Type": {"application/json"}}},
		{"gzip", 200, http.Header{"Content-Type": {"text/event-stream"}, "Content-Encoding": {"gzip"}}},
		{"an error status", 400, http.Header{"Content-Type": {"text/event-stream"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int32
			rt := New(roundTripFunc(func(req *http.Request) (*http.Response, error) {
				n.Add(1)
				return &http.Response{StatusCode: tc.status, Header: tc.header.Clone(), Body: io.NopCloser(strings.NewReader(overloadedEvent)), Request: req}, nil
			}), WithClock(autoClock()))
			_, body := roundTripStream(t, rt, get(t, "https://api.test/x"))
			assert.Equal(t, overloadedEvent, body)
			assert.EqualValues(t, 1, n.Load())
		})
	}
}

// An event larger than the bound is not waited for: the stream is handed
// over, whole.
func TestFirstEventLargerThanTheBoundIsHandedOver(t *testing.T) {
	big := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"" + strings.Repeat("x", 5000) + "\"}}\n\n"
	base, attempts := streamSteps(big, anthropicStream)
	rt := New(base, WithClock(autoClock()), WithFirstEventCheck(time.Second, 1024))
	_, body := roundTripStream(t, rt, get(t, "https://api.test/x"))
	assert.Equal(t, big, body)
	assert.EqualValues(t, 1, attempts.Load())

	rt = New(base, WithClock(autoClock())) // the default bound, 64 KiB, holds it
	attempts.Store(0)
	_, body = roundTripStream(t, rt, get(t, "https://api.test/x"))
	assert.Equal(t, anthropicStream, body)
	assert.EqualValues(t, 2, attempts.Load())
}

// gatedBody yields head at once, then waits for the gate before tail.
type gatedBody struct {
	head, tail string
	gate       chan struct{}
	closed     chan struct{}
	once       sync.Once
	headDone   bool
}

func newGatedBody(head, tail string) *gatedBody {
	return &gatedBody{head: head, tail: tail, gate: make(chan struct{}), closed: make(chan struct{})}
}

func (g *gatedBody) Read(p []byte) (int, error) {
	if !g.headDone {
		if g.head != "" {
			n := copy(p, g.head)
			g.head = g.head[n:]
			return n, nil
		}
		g.headDone = true
	}
	select {
	case <-g.gate:
	case <-g.closed:
		return 0, errors.New("read on closed body")
	}
	if g.tail == "" {
		return 0, io.EOF
	}
	n := copy(p, g.tail)
	g.tail = g.tail[n:]
	return n, nil
}

func (g *gatedBody) Close() error {
	g.once.Do(func() { close(g.closed) })
	return nil
}

// A first event that does not come in time is not waited for: the stream
// is handed over, the bytes read so far first, then the rest as it comes.
func TestSlowFirstEventHandsTheStreamOver(t *testing.T) {
	head, tail := "event: message_start\ndata: {\"type\":", "\"message_start\"}\n\n"+overloadedEvent
	body := newGatedBody(head, tail)
	var n atomic.Int32
	rt := New(roundTripFunc(func(req *http.Request) (*http.Response, error) {
		n.Add(1)
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: body, Request: req}, nil
	}), WithClock(autoClock()), WithFirstEventCheck(20*time.Millisecond, 0))

	start := time.Now()
	resp, err := rt.RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Less(t, time.Since(start), promptly)
	buf := make([]byte, 4096)
	k, err := resp.Body.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, head, string(buf[:k]), "the bytes read so far come first, at once")

	close(body.gate)
	rest, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, tail, string(rest), "then the rest, untouched: an error after the first event is the caller's")
	assert.EqualValues(t, 1, n.Load(), "never retried once handed over")
}

// The caller's context ending during the check ends the wait at once.
func TestFirstEventCheckHonoursTheContext(t *testing.T) {
	body := newGatedBody("", anthropicStream)
	defer body.Close()
	rt := New(roundTripFunc(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: body, Request: req}, nil
	}), WithClock(autoClock()), WithFirstEventCheck(stallFor, 0))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	start := time.Now()
	resp, err := rt.RoundTrip(get(t, "https://api.test/x").WithContext(ctx))
	assert.Less(t, time.Since(start), promptly)
	if err == nil {
		resp.Body.Close()
	}
}

// When retries run out on streams that open with an error, the caller gets
// the last stream as the server sent it, error event and all.
func TestLastStreamIsReturnedWhenRetriesEnd(t *testing.T) {
	base, attempts := streamSteps(overloadedEvent)
	var gaveUp []Event
	rt := New(base, WithClock(autoClock()), WithMaxRetries(2),
		WithHooks(Hooks{OnGiveUp: func(e Event) { gaveUp = append(gaveUp, e) }}))
	resp, body := roundTripStream(t, rt, get(t, "https://api.test/x"))
	assert.Equal(t, overloadedEvent, body)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 3, Attempts(resp))
	assert.EqualValues(t, 3, attempts.Load())
	require.Len(t, gaveUp, 1)
	assert.Equal(t, StatusOverloaded, gaveUp[0].StatusCode)
}

// Streams that open with overloaded_error open the breaker as 529s do.
func TestStreamFailuresOpenTheBreaker(t *testing.T) {
	base, _ := streamSteps(overloadedEvent)
	rt := New(base, WithClock(autoClock()), WithMaxRetries(0))
	for range 5 {
		_, _ = roundTripStream(t, rt, get(t, "https://api.test/x"))
	}
	assert.Equal(t, BreakerOpen, rt.Stats()[0].Breaker)
}

// The classifier sees the status the error stands for, and the event's
// data as the body.
func TestClassifierSeesTheStreamErrorAsItsStatus(t *testing.T) {
	base, attempts := streamSteps(overloadedEvent, anthropicStream)
	var saw []int
	rt := New(base, WithClock(autoClock()), WithClassifier(func(resp *http.Response, err error) Verdict {
		saw = append(saw, resp.StatusCode)
		return Stop
	}))
	_, body := roundTripStream(t, rt, get(t, "https://api.test/x"))
	assert.Equal(t, []int{StatusOverloaded}, saw)
	assert.Equal(t, overloadedEvent, body, "stopped by the classifier: the stream as it came")
	assert.EqualValues(t, 1, attempts.Load())
}

// Over a real connection, HTTP/1.1 and HTTP/2: the overloaded stream is
// closed and the retry's stream reaches the caller exactly, flushed event
// by event.
func TestFirstEventCheckOverLoopback(t *testing.T) {
	protocols(t, func(t *testing.T, h2 bool) {
		var n atomic.Int32
		srv, rt, _ := stallServerProto(t, h2, func(w http.ResponseWriter, r *http.Request, stall <-chan struct{}) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			body := anthropicStream
			if n.Add(1) == 1 {
				body = overloadedEvent
			}
			for _, ev := range strings.SplitAfter(body, "\n\n") {
				io.WriteString(w, ev)
				w.(http.Flusher).Flush()
			}
		}, WithClock(autoClock()))
		resp, body := roundTripStream(t, rt, get(t, srv.URL+"/v1/messages"))
		assert.Equal(t, anthropicStream, body)
		assert.Equal(t, 2, Attempts(resp))
	})
}
