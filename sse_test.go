package retryhttp

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// sseEvent is one dispatched event, for tests.
type sseEvent struct{ name, data string }

// sseCollect is an sseSink that keeps every event.
type sseCollect struct {
	events []sseEvent
	data   []byte
	stopAt int // stop after this many events; 0: never
}

type sseCollector struct{ c *sseCollect }

func (s sseCollector) data(p []byte) { s.c.data = append(s.c.data, p...) }
func (s sseCollector) dispatch(name []byte) bool {
	s.c.events = append(s.c.events, sseEvent{string(name), string(s.c.data)})
	s.c.data = s.c.data[:0]
	return s.c.stopAt == 0 || len(s.c.events) < s.c.stopAt
}

// parseSSEChunks feeds stream to a parser in chunks of the given sizes
// (cycled; 0 means 1) and returns the events and the bytes consumed.
func parseSSEChunks(stream []byte, sizes []int, stopAt int) ([]sseEvent, int) {
	var p sseParser
	c := &sseCollect{stopAt: stopAt}
	consumed := 0
	for i, k := 0, 0; i < len(stream); k++ {
		n := 1
		if len(sizes) > 0 {
			n = max(sizes[k%len(sizes)], 1)
		}
		end := min(i+n, len(stream))
		read := p.feed(stream[i:end], sseCollector{c})
		consumed += read
		if p.stopped && i+read < end {
			break
		}
		i = end
	}
	return c.events, consumed
}

// referenceSSE is the specification's algorithm, written plainly over the
// whole stream: split into lines, then fields.
func referenceSSE(stream []byte) []sseEvent {
	s := string(stream)
	s = strings.TrimPrefix(s, utf8BOM)
	var lines []string
	for {
		i := strings.IndexAny(s, "\r\n")
		if i < 0 {
			break // an unterminated last line is not processed
		}
		lines = append(lines, s[:i])
		if s[i] == '\r' && i+1 < len(s) && s[i+1] == '\n' {
			i++
		}
		s = s[i+1:]
	}
	var events []sseEvent
	var data strings.Builder
	hasData, name := false, ""
	for _, line := range lines {
		if line == "" {
			if hasData {
				d := data.String()
				events = append(events, sseEvent{name, strings.TrimSuffix(d, "\n")})
			}
			data.Reset()
			hasData, name = false, ""
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, found := strings.Cut(line, ":")
		if found {
			value = strings.TrimPrefix(value, " ")
		}
		switch field {
		case "data":
			data.WriteString(value + "\n")
			hasData = true
		case "event":
			name = value
		}
	}
	for i := range events {
		if len(events[i].name) > maxEventName+1 {
			events[i].name = events[i].name[:maxEventName+1]
		}
	}
	return events
}

func TestSSEParserFollowsTheSpecification(t *testing.T) {
	for _, tc := range []struct {
		name, stream string
		want         []sseEvent
	}{
		{"Anthropic", overloadedEvent, []sseEvent{{"error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}}},
		{"OpenAI", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []sseEvent{{"", `{"a":1}`}, {"", "[DONE]"}}},
		{"multi-line data", "data: a\ndata:b\ndata\n\n", []sseEvent{{"", "a\nb\n"}}},
		{"only one space is skipped", "data:  two\n\n", []sseEvent{{"", " two"}}},
		{"comments and unknown fields", ": hi\nid: 7\nretry: 10\nfoo: bar\ndata: x\n\n", []sseEvent{{"", "x"}}},
		{"no data, no event", "event: ping\n\ndata: y\n\n", []sseEvent{{"", "y"}}},
		{"CRLF", "event: e\r\ndata: z\r\n\r\n", []sseEvent{{"e", "z"}}},
		{"CR", "event: e\rdata: z\r\r", []sseEvent{{"e", "z"}}},
		{"BOM", utf8BOM + "data: b\n\n", []sseEvent{{"", "b"}}},
		{"a second BOM is a field", utf8BOM + utf8BOM + "data: b\n\ndata: c\n\n", []sseEvent{{"", "c"}}},
		{"partial BOM", "\xEF\xBBdata: b\n\ndata: c\n\n", []sseEvent{{"", "c"}}},
		{"the last event wins the name", "event: a\nevent: b\ndata: d\n\n", []sseEvent{{"b", "d"}}},
		{"empty event name", "event: a\nevent:\ndata: d\n\n", []sseEvent{{"", "d"}}},
		{"unterminated", "data: x\n", nil},
		{"long names are cut", "event: " + strings.Repeat("n", 100) + "\ndata: d\n\n", []sseEvent{{strings.Repeat("n", maxEventName+1), "d"}}},
		{"datas is not data", "datas: x\ndat: y\ndata: z\n\n", []sseEvent{{"", "z"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, referenceSSE([]byte(tc.stream)), "the reference")
			for _, sizes := range [][]int{{1 << 20}, {1}, {2, 3}, {7}} {
				got, _ := parseSSEChunks([]byte(tc.stream), sizes, 0)
				assert.Equal(t, tc.want, got, "chunks of %v", sizes)
			}
		})
	}
}

// A sink that stops the parser stops it at the end of the event's blank
// line: what follows is the caller's.
func TestSSEParserStopsAfterTheEvent(t *testing.T) {
	for _, stream := range []string{"data: a\n\nrest", "data: a\r\n\r\nrest", "data: a\r\rrest"} {
		for _, sizes := range [][]int{{1 << 20}, {1}, {3}} {
			events, n := parseSSEChunks([]byte(stream), sizes, 1)
			assert.Equal(t, []sseEvent{{"", "a"}}, events)
			assert.Equal(t, "rest", stream[n:], "%q in chunks of %v", stream, sizes)
		}
	}
}

func TestStreamErrorKind(t *testing.T) {
	for _, tc := range []struct {
		name, event, data string
		status            int
	}{
		{"Anthropic overloaded", "error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, 529},
		{"Anthropic api_error", "error", `{"type":"error","error":{"type":"api_error","message":"x"}}`, 500},
		{"Anthropic rate limit", "error", `{"type":"error","error":{"type":"rate_limit_error","message":"x"}}`, 429},
		{"Anthropic invalid request", "error", `{"type":"error","error":{"type":"invalid_request_error","message":"x"}}`, 0},
		{"OpenAI server_error", "", `{"error":{"message":"x","type":"server_error","param":null,"code":null}}`, 500},
		{"OpenAI rate limit by code", "", `{"error":{"message":"x","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`, 429},
		{"OpenAI insufficient_quota", "", `{"error":{"message":"x","type":"insufficient_quota","code":"insufficient_quota"}}`, 0},
		{"OpenAI numeric code", "", `{"error":{"message":"x","type":"server_error","code":500}}`, 500},
		{"Responses error event", "error", `{"type":"error","code":"server_error","message":"x"}`, 500},
		{"message_start", "message_start", `{"type":"message_start","message":{"id":"m"}}`, 0},
		{"text mentioning error", "content_block_delta", `{"type":"content_block_delta","delta":{"text":"\"error\""}}`, 0},
		{"error string", "", `{"error":"server_error"}`, 0},
		{"not JSON", "error", `overloaded_error`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _ := streamErrorKind(tc.event, []byte(tc.data))
			assert.Equal(t, tc.status, status)
		})
	}
}

// FuzzSSEParser checks the incremental parser against the specification's
// algorithm on any stream cut into any chunks, and the first-event reading
// on top of it: the events are the same, the parser stops right after the
// first event when told to, and an error event maps only to a status the
// transport retries.
func FuzzSSEParser(f *testing.F) {
	for _, s := range []string{
		overloadedEvent + anthropicStream, openAIStream, openAIError("server_error", ""),
		"\xEF\xBB\xBFdata: x\r\n\r\n", "data: a\rdata: b\r\r", ": c\n\nevent: ping\ndata: {}\n\n", "event", "data",
	} {
		f.Add([]byte(s), uint64(0x0102030405060708))
	}
	f.Fuzz(func(t *testing.T, stream []byte, cuts uint64) {
		sizes := make([]int, 8)
		for i := range sizes {
			sizes[i] = int(cuts>>(8*i)) & 0xff
		}
		want := referenceSSE(stream)
		got, n := parseSSEChunks(stream, sizes, 0)
		if len(got) != len(want) {
			t.Fatalf("%d events, want %d: %q vs %q", len(got), len(want), got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("event %d: %q, want %q", i, got[i], want[i])
			}
		}
		if n != len(stream) {
			t.Fatalf("consumed %d of %d bytes without being stopped", n, len(stream))
		}
		if len(want) > 0 {
			first, n := parseSSEChunks(stream, sizes, 1)
			if len(first) != 1 || first[0] != want[0] {
				t.Fatalf("first event %q, want %q", first, want[0])
			}
			// The rest, read by a parser of its own, holds the other
			// events (unless it starts with what a new parser would take
			// for a BOM, which is skipped only at a stream's start).
			if rest := stream[n:]; !bytes.HasPrefix(rest, []byte{0xEF}) {
				again, _ := parseSSEChunks(rest, nil, 0)
				if len(again) != len(want)-1 {
					t.Fatalf("after the first event, %d events, want %d", len(again), len(want)-1)
				}
			}
		}
		for _, ev := range want {
			status, kind := streamErrorKind(ev.name, []byte(ev.data))
			if status != 0 && streamErrorStatus[kind] != status {
				t.Fatalf("event %q: status %d for kind %q", ev, status, kind)
			}
		}
	})
}

func TestMediaTypes(t *testing.T) {
	resp := func(ct, ce string) *http.Response {
		h := http.Header{}
		if ct != "" {
			h.Set("Content-Type", ct)
		}
		if ce != "" {
			h.Set("Content-Encoding", ce)
		}
		return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader("x"))}
	}
	for _, ct := range []string{"text/event-stream", "text/event-stream; charset=utf-8", " Text/Event-Stream ;charset=UTF-8"} {
		assert.True(t, isEventStream(resp(ct, "")), ct)
		assert.True(t, isEventStream(resp(ct, "identity")), ct)
		assert.False(t, isEventStream(resp(ct, "gzip")), ct)
	}
	for _, ct := range []string{"", "text/plain", "text/event-streams", "application/json"} {
		assert.False(t, isEventStream(resp(ct, "")), ct)
	}
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "application/problem+json", "Application/JSON"} {
		assert.True(t, isJSONBody(resp(ct, "")), ct)
	}
	for _, ct := range []string{"", "text/json5", "application/jsonl", "+json"} {
		assert.False(t, isJSONBody(resp(ct, "")), ct)
	}
	assert.Zero(t, testing.AllocsPerRun(100, func() { isEventStream(resp("text/plain; charset=utf-8", "")) })-
		testing.AllocsPerRun(100, func() { resp("text/plain; charset=utf-8", "") }), "no allocation")
}
