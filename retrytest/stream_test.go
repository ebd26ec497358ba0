package retrytest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp/retrytest"
)

// event is one server-sent event, as a client reads it.
type event struct {
	name string
	data map[string]any // nil for data that is not a JSON object ([DONE])
	raw  string
}

// readEvents splits a stream (LF line endings, one data line per event, as
// the providers send) into its events.
func readEvents(t *testing.T, stream string) []event {
	t.Helper()
	var events []event
	for _, block := range strings.Split(stream, "\n\n") {
		if block == "" {
			continue
		}
		var ev event
		for _, line := range strings.Split(block, "\n") {
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.raw = strings.TrimPrefix(line, "data: ")
			default:
				t.Fatalf("unexpected line %q", line)
			}
		}
		if ev.raw != "[DONE]" {
			require.NoError(t, json.Unmarshal([]byte(ev.raw), &ev.data), ev.raw)
		}
		events = append(events, ev)
	}
	return events
}

// both runs f against a Server and a Transport built from cfg.
func both(t *testing.T, cfg retrytest.Config, f func(t *testing.T, rt http.RoundTripper, url string, stats func() retrytest.Stats)) {
	t.Run("server", func(t *testing.T) {
		srv := retrytest.NewServer(cfg)
		defer srv.Close()
		f(t, srv.Client().Transport, srv.URL+"/v1/messages", srv.Stats)
	})
	t.Run("transport", func(t *testing.T) {
		tr := retrytest.NewTransport(cfg)
		f(t, tr, apiURL, tr.Stats)
	})
}

func TestAnthropicStream(t *testing.T) {
	cfg := retrytest.Config{Family: retrytest.Anthropic, Script: []retrytest.Step{
		{Stream: &retrytest.Stream{Text: "Hello there", InputTokens: 25, OutputTokens: 7}},
	}}
	both(t, cfg, func(t *testing.T, rt http.RoundTripper, url string, stats func() retrytest.Stats) {
		r := do(t, rt, url, `{"model":"m","max_tokens":100,"stream":true}`)
		assert.Equal(t, 200, r.status)
		assert.Equal(t, "text/event-stream; charset=utf-8", r.header.Get("Content-Type"))
		events := readEvents(t, r.body)
		var names []string
		for _, ev := range events {
			names = append(names, ev.name)
			assert.Equal(t, ev.name, ev.data["type"], "Anthropic names each event by its type")
		}
		assert.Equal(t, []string{"message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta",
			"content_block_stop", "message_delta", "message_stop"}, names)
		usage := events[0].data["message"].(map[string]any)["usage"].(map[string]any)
		assert.EqualValues(t, 25, usage["input_tokens"])
		assert.EqualValues(t, 7, events[6].data["usage"].(map[string]any)["output_tokens"])
		assert.Equal(t, "Hello ", events[3].data["delta"].(map[string]any)["text"])
		assert.Equal(t, "there", events[4].data["delta"].(map[string]any)["text"])
		assert.Equal(t, map[int]int{200: 1}, stats().Statuses)
	})
}

func TestOpenAIStream(t *testing.T) {
	cfg := retrytest.Config{Family: retrytest.OpenAI, Script: []retrytest.Step{
		{Stream: &retrytest.Stream{InputTokens: 12, OutputTokens: 3}},
		{Stream: &retrytest.Stream{}},
	}}
	both(t, cfg, func(t *testing.T, rt http.RoundTripper, url string, _ func() retrytest.Stats) {
		r := do(t, rt, url, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`)
		events := readEvents(t, r.body)
		require.Len(t, events, 5)
		assert.Equal(t, "[DONE]", events[4].raw)
		assert.Equal(t, "chat.completion.chunk", events[0].data["object"])
		assert.Nil(t, events[0].data["usage"], "usage is null until the last chunk")
		assert.Contains(t, events[0].raw, `"usage":null`)
		assert.Equal(t, "ok", events[1].data["choices"].([]any)[0].(map[string]any)["delta"].(map[string]any)["content"])
		usage := events[3].data["usage"].(map[string]any)
		assert.Equal(t, map[string]any{"prompt_tokens": 12.0, "completion_tokens": 3.0, "total_tokens": 15.0}, usage)
		assert.Empty(t, events[3].data["choices"])

		r = do(t, rt, url, `{"model":"m","stream":true}`)
		events = readEvents(t, r.body)
		require.Len(t, events, 4, "no usage chunk unless asked for")
		assert.NotContains(t, r.body, "usage")
	})
}

// A request that asks for a stream gets one when it succeeds, as the APIs
// answer; other requests get JSON.
func TestStreamingRequestsGetStreams(t *testing.T) {
	for _, family := range []retrytest.Family{retrytest.Anthropic, retrytest.OpenAI, retrytest.Plain} {
		both(t, retrytest.Config{Family: family}, func(t *testing.T, rt http.RoundTripper, url string, _ func() retrytest.Stats) {
			r := do(t, rt, url, `{"model":"m","stream":true}`)
			assert.Equal(t, "text/event-stream; charset=utf-8", r.header.Get("Content-Type"), family)
			assert.NotEmpty(t, readEvents(t, r.body))
			r = do(t, rt, url, `{"model":"m","stream":false}`)
			assert.Equal(t, "application/json", r.header.Get("Content-Type"), family)
		})
	}
}

func TestStreamErrorEvents(t *testing.T) {
	for _, tc := range []struct {
		family retrytest.Family
		script string
		stream *retrytest.Stream
		at     int
		check  func(t *testing.T, ev event)
	}{
		{retrytest.Anthropic, "stream:overloaded_error", nil, 0, func(t *testing.T, ev event) {
			assert.Equal(t, "error", ev.name)
			assert.Equal(t, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, ev.raw)
		}},
		{retrytest.Anthropic, "", &retrytest.Stream{ErrorType: "api_error", ErrorAfter: 3}, 3, func(t *testing.T, ev event) {
			assert.Equal(t, "error", ev.name)
			assert.Equal(t, "api_error", ev.data["error"].(map[string]any)["type"])
		}},
		{retrytest.OpenAI, "stream:server_error", nil, 0, func(t *testing.T, ev event) {
			assert.Equal(t, "", ev.name)
			assert.Equal(t, `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`, ev.raw)
		}},
		{retrytest.OpenAI, "", &retrytest.Stream{ErrorType: "rate_limit_exceeded", ErrorAfter: 1}, 1, func(t *testing.T, ev event) {
			assert.Equal(t, "rate_limit_exceeded", ev.data["error"].(map[string]any)["code"])
		}},
	} {
		t.Run(string(tc.family)+" "+tc.script, func(t *testing.T) {
			cfg := retrytest.Config{Family: tc.family}
			if tc.script != "" {
				cfg.Script = retrytest.MustParseScript(tc.script)
			} else {
				cfg.Script = []retrytest.Step{{Stream: tc.stream}}
			}
			both(t, cfg, func(t *testing.T, rt http.RoundTripper, url string, _ func() retrytest.Stats) {
				r := do(t, rt, url, `{"stream":true}`)
				assert.Equal(t, 200, r.status, "the error comes after a 200")
				events := readEvents(t, r.body)
				require.Len(t, events, tc.at+1, "the error event ends the stream")
				tc.check(t, events[tc.at])
			})
		})
	}
}

// A stream cut mid-way ends with a read error, after the events before the
// cut.
func TestStreamCutMidWay(t *testing.T) {
	for _, step := range []retrytest.Step{
		{Stream: &retrytest.Stream{CutAfter: 2}},
		retrytest.MustParseScript("stream truncate")[0],
	} {
		both(t, retrytest.Config{Family: retrytest.Anthropic, Script: []retrytest.Step{step}}, func(t *testing.T, rt http.RoundTripper, url string, stats func() retrytest.Stats) {
			r, err := try(rt, url, `{"stream":true}`, nil)
			assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
			assert.True(t, strings.HasPrefix(r.body, "event: message_start\n"), r.body)
			assert.NotContains(t, r.body, "message_stop")
			assert.Equal(t, map[int]int{200: 1}, stats().Statuses)
		})
	}
}

// Slow events come after their delay, the headers at once.
func TestSlowStreamEvents(t *testing.T) {
	const delay = 30 * time.Millisecond
	cfg := retrytest.Config{Family: retrytest.OpenAI, Script: []retrytest.Step{{Stream: &retrytest.Stream{FirstEventDelay: delay, EventDelay: time.Millisecond}}}}
	both(t, cfg, func(t *testing.T, rt http.RoundTripper, url string, _ func() retrytest.Stats) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"stream":true}`))
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b := make([]byte, 1)
		_, err = io.ReadFull(resp.Body, b)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, time.Since(start), delay, "the first event waited")
		rest, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Len(t, readEvents(t, string(b)+string(rest)), 4)
	})
}

// Closing a stream's body ends a pending wait for the next event.
func TestStreamBodyCloseEndsTheWait(t *testing.T) {
	tr := retrytest.NewTransport(retrytest.Config{Script: []retrytest.Step{{Stream: &retrytest.Stream{FirstEventDelay: time.Hour}}}})
	req, _ := http.NewRequest(http.MethodPost, apiURL, strings.NewReader(`{}`))
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	done := make(chan error)
	go func() {
		_, err := resp.Body.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	resp.Body.Close()
	assert.Error(t, <-done)
}

func TestStreamScript(t *testing.T) {
	steps, err := retrytest.ParseScript("stream:overloaded_error, stream*2, stream truncate~5ms")
	require.NoError(t, err)
	assert.Equal(t, []retrytest.Step{
		{Stream: &retrytest.Stream{ErrorType: "overloaded_error"}},
		{Stream: &retrytest.Stream{}},
		{Stream: &retrytest.Stream{}},
		{Stream: &retrytest.Stream{}, Fault: retrytest.FaultTruncate, Delay: 5 * time.Millisecond},
	}, steps)
	assert.Equal(t, "stream:overloaded_error, stream, stream, stream truncate~5ms", retrytest.FormatScript(steps))
	for _, bad := range []string{"stream:", "stream:a b", "streams"} {
		_, err := retrytest.ParseScript(bad)
		assert.Error(t, err, bad)
	}
	for _, bad := range []retrytest.Step{
		{Status: 500, Stream: &retrytest.Stream{}},
		{ErrorType: "x", Stream: &retrytest.Stream{}},
		{Body: "x", Stream: &retrytest.Stream{}},
		{Stream: &retrytest.Stream{CutAfter: -1}},
		{Stream: &retrytest.Stream{EventDelay: -1}},
		{Stream: &retrytest.Stream{ErrorType: "a b"}},
	} {
		assert.Error(t, retrytest.Config{Script: []retrytest.Step{bad}}.Validate(), "%+v", bad.Stream)
	}
}
