package retryhttp

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp/internal/fakeclock"
	"github.com/retryhttp/retryhttp/retrytest"
)

func TestParseUsage(t *testing.T) {
	for _, tc := range []struct {
		name           string
		raw            string
		gemini, inOnly bool
		want           tokenUsage
	}{
		{"Anthropic", `{"input_tokens":25,"cache_creation_input_tokens":100,"cache_read_input_tokens":5000,"output_tokens":15}`, false, false,
			tokenUsage{in: 125, out: 15, hasIn: true, hasOut: true}},
		{"Anthropic message_start", `{"input_tokens":25,"output_tokens":1}`, false, true, tokenUsage{in: 25, hasIn: true}},
		{"Anthropic message_delta", `{"output_tokens":15}`, false, false, tokenUsage{out: 15, hasOut: true}},
		{"OpenAI chat", `{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":0}}`, false, false,
			tokenUsage{in: 12, out: 3, hasIn: true, hasOut: true}},
		{"OpenAI Responses", `{"input_tokens":12,"input_tokens_details":{"cached_tokens":0},"output_tokens":3,"total_tokens":15}`, false, false,
			tokenUsage{in: 12, out: 3, hasIn: true, hasOut: true}},
		{"Gemini", `{"promptTokenCount":10,"candidatesTokenCount":4,"thoughtsTokenCount":6,"totalTokenCount":20}`, true, false,
			tokenUsage{in: 10, out: 10, hasIn: true, hasOut: true}},
		{"counts that are not counts", `{"input_tokens":-1,"output_tokens":1.5,"prompt_tokens":"7"}`, false, false, tokenUsage{}},
		{"huge counts are capped", `{"input_tokens":1e300,"cache_creation_input_tokens":1e300}`, false, false, tokenUsage{in: maxTokenCount, hasIn: true}},
		{"not an object", `[1,2]`, false, false, tokenUsage{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, parseUsage([]byte(tc.raw), tc.gemini, tc.inOnly))
		})
	}
}

// usageFound is a jsonValueSink that keeps what it is given.
type usageFound struct{ got []string }

func (u *usageFound) value(k1, k2 jsonKey, raw []byte) {
	u.got = append(u.got, string(rune('0'+k1))+string(rune('0'+k2))+string(raw))
}

func scanAll(mode uint8, doc string, chunk int) []string {
	var f usageFound
	s := jsonScanner{mode: mode, sink: &f}
	for i := 0; i < len(doc); i += chunk {
		s.feed([]byte(doc[i:min(i+chunk, len(doc))]))
	}
	return f.got
}

func TestJSONScannerFindsUsage(t *testing.T) {
	u, m := string(rune('0'+keyUsage)), string(rune('0'+keyMessage))
	o := string(rune('0' + keyOther))
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"top level", `{"id":"x","usage":{"input_tokens":1,"output_tokens":2}}`, []string{u + o + `{"input_tokens":1,"output_tokens":2}`}},
		{"message.usage", `{"type":"message_start","message":{"id":"m","usage":{"input_tokens":3}}}`, []string{m + u + `{"input_tokens":3}`}},
		{"usage null", `{"usage":null,"choices":[]}`, nil},
		{"deeper usage ignored", `{"choices":[{"usage":{"x":1}}],"a":{"b":{"usage":{"y":2}}}}`, nil},
		{"keys inside strings are text", `{"text":"\"usage\":{\"input_tokens\":9}","usage":{"output_tokens":1}}`, []string{u + o + `{"output_tokens":1}`}},
		{"a value named usage is not a key", `{"type":"usage","x":{"usage":{"a":1}}}`, nil},
		{"escaped key", `{"us\u0061ge":{"a":1}}`, nil},
		{"strings with braces inside usage", `{"usage":{"note":"}{\"","input_tokens":4}}`, []string{u + o + `{"note":"}{\"","input_tokens":4}`}},
		{"array at the top", `[{"usage":{"a":1}}]`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, chunk := range []int{1, 3, 1 << 20} {
				assert.Equal(t, tc.want, scanAll(scanUsage, tc.doc, chunk), "chunks of %d", chunk)
			}
		})
	}
}

func TestJSONScannerFindsTheModel(t *testing.T) {
	for doc, want := range map[string][]string{
		`{"model":"claude-x","max_tokens":5}`:                          {`"claude-x"`},
		`{"messages":[{"role":"user","model":"no"}],"model":"gpt-4o"}`: {`"gpt-4o"`},
		`{"model":5}`:                        nil,
		`{"a":{"model":"deep"}}`:             nil,
		`{"model":"a\"b"}`:                   {`"a\"b"`},
		`{"model":"first","model":"second"}`: {`"first"`},
	} {
		for _, chunk := range []int{1, 2, 1 << 20} {
			got := scanAll(scanModel, doc, chunk)
			for i := range got {
				got[i] = got[i][2:]
			}
			assert.Equal(t, want, got, "%s in chunks of %d", doc, chunk)
		}
	}
}

// The buckets' arithmetic: a refund pays the debt at once (never past the
// bucket's size) and brings the bookings waiting forward by what it is
// worth; a cancel gives back nothing once the booking's time has come, and
// never the tokens booked after it.
func TestBucketRefundsAndCancels(t *testing.T) {
	now := testStart
	cl := newClientLimits(Limits{OutputTokensPerMinute: 600}, 10*time.Second, 1) // 10 a second, 100 at most
	b := cl.buckets[OutputTokens]
	at, a := cl.reserve(now, 0, 100)
	assert.Equal(t, now, at, "the bucket holds 100")
	at, w := cl.reserve(now, 0, 50)
	assert.Equal(t, now.Add(5*time.Second), at, "50 owed: 5s")
	at, last := cl.reserve(now, 0, 20)
	assert.Equal(t, now.Add(7*time.Second), at)

	cl.adjust(now.Add(time.Second), 0, -30) // a refund of 30: 3s sooner
	assert.Equal(t, now.Add(2*time.Second), w.startAt())
	assert.Equal(t, now.Add(4*time.Second), last.startAt())
	assert.InDelta(t, -30, b.tokensAt(now.Add(time.Second)), 1e-9, "owed 70 - 10 refilled - 30 back")

	w.cancel(now.Add(time.Second))
	assert.InDelta(t, 0, b.tokensAt(now.Add(time.Second)), 1e-9, "20 were booked after it: 30 of its 50 come back")
	last.cancel(now.Add(time.Second))
	assert.InDelta(t, 20, b.tokensAt(now.Add(time.Second)), 1e-9, "the last booking comes back whole")
	a.cancel(now.Add(time.Second))
	assert.InDelta(t, 20, b.tokensAt(now.Add(time.Second)), 1e-9, "nothing back once its time has come")

	cl.adjust(now.Add(time.Second), 0, -500)
	assert.InDelta(t, 100, b.tokensAt(now.Add(time.Second)), 1e-9, "no more than the bucket's size")

	// A request refused at once cancels a booking due that very moment
	// on this limit (another limit was what it could not wait for).
	at, due := cl.reserve(now.Add(time.Second), 0, 40)
	require.Equal(t, now.Add(time.Second), at)
	due.cancel(now.Add(time.Second))
	assert.InDelta(t, 100, b.tokensAt(now.Add(time.Second)), 1e-9, "given back whole")
}

// jsonUsageBase answers 200 JSON bodies holding the given usage.
func jsonUsageBase(body string) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
	})
}

// sendWithTokens sends one request booked as in and out tokens, reads its
// body whole when read is set, and closes it.
func sendWithTokens(t *testing.T, rt http.RoundTripper, in, out int, read bool) string {
	t.Helper()
	req := get(t, "https://api.test/v1/messages")
	req = req.WithContext(WithTokens(req.Context(), in, out))
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if !read {
		return ""
	}
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// An output limit of 600 a minute with ten seconds' burst: a bucket of 100
// output tokens refilled at 10 a second.
func outputLimited(base http.RoundTripper, clk Clock) *RetryTransport {
	return New(base, WithClock(clk), WithRateLimit(Limits{OutputTokensPerMinute: 600}), WithRateLimitBurst(10*time.Second))
}

// Output tokens booked from max_tokens but not used go back to the local
// budget when the response reports its usage, as Anthropic's own count
// does: the next request does not wait for tokens nobody used.
func TestUsageRefundsUnusedOutputTokens(t *testing.T) {
	const body = `{"id":"msg_1","type":"message","content":[{"type":"text","text":"ok"}],"usage":{"input_tokens":10,"output_tokens":5}}`
	clk := autoClock()
	rt := outputLimited(jsonUsageBase(body), clk)
	assert.Equal(t, body, sendWithTokens(t, rt, 10, 100, true), "the body passes untouched")
	sendWithTokens(t, rt, 10, 100, true)
	// The first booked all 100 and used 5: 95 came back, so the second
	// waited only for the 5 it lacked (half a second), not ten seconds.
	assert.Equal(t, []time.Duration{500 * time.Millisecond}, clk.Sleeps())
}

// Tokens used beyond the booking are charged when the usage comes: the
// next request waits for them.
func TestUsageChargesOverruns(t *testing.T) {
	const body = `{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":10,"completion_tokens":150,"total_tokens":160}}`
	clk := autoClock()
	rt := outputLimited(jsonUsageBase(body), clk)
	sendWithTokens(t, rt, 10, 10, true)
	sendWithTokens(t, rt, 10, 10, true)
	// Booked 10, used 150: the bucket owes 50 after the first (100 - 150),
	// so the second's 10 wait 6 seconds.
	assert.Equal(t, []time.Duration{6 * time.Second}, clk.Sleeps())
}

// A body that is not read settles nothing: the booking stands.
func TestUnreadBodySettlesNothing(t *testing.T) {
	clk := autoClock()
	rt := outputLimited(jsonUsageBase(`{"usage":{"output_tokens":5}}`), clk)
	sendWithTokens(t, rt, 10, 100, false)
	sendWithTokens(t, rt, 10, 100, false)
	assert.Equal(t, []time.Duration{10 * time.Second}, clk.Sleeps())
}

// Streams settle from their usage events as they pass: Anthropic's
// message_start (input) and message_delta (output), OpenAI's usage chunk.
func TestStreamUsageSettlesTheBooking(t *testing.T) {
	for _, tc := range []struct {
		family    retrytest.Family
		body, end string
	}{
		{retrytest.Anthropic, `{"stream":true}`, "event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"},
		{retrytest.OpenAI, `{"stream":true,"stream_options":{"include_usage":true}}`, `"total_tokens":25}}` + "\n\ndata: [DONE]\n\n"},
	} {
		t.Run(string(tc.family), func(t *testing.T) {
			provider := retrytest.NewTransport(retrytest.Config{Family: tc.family, Script: []retrytest.Step{
				{Stream: &retrytest.Stream{InputTokens: 20, OutputTokens: 5}},
				{Stream: &retrytest.Stream{InputTokens: 20, OutputTokens: 5}},
			}})
			clk := autoClock()
			// 100 input and 100 output tokens at once, 10 a second each.
			rt := New(provider, WithClock(clk), WithRateLimitBurst(10*time.Second),
				WithRateLimit(Limits{InputTokensPerMinute: 600, OutputTokensPerMinute: 600}))
			for range 2 {
				req := post(t, "https://api.test/v1/messages", strings.NewReader(tc.body))
				req = req.WithContext(WithTokens(context.Background(), 60, 100))
				resp, err := rt.RoundTrip(req)
				require.NoError(t, err)
				b, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				resp.Body.Close()
				assert.True(t, strings.HasSuffix(string(b), tc.end), "the stream passes whole: %q", b)
			}
			// Booked 60 in and 100 out, used 20 and 5: the second request
			// had 80 and 95 back and waited for the 5 output tokens it
			// lacked; without the settling it would have waited 10s.
			assert.Equal(t, []time.Duration{500 * time.Millisecond}, clk.Sleeps())
		})
	}
}

// A stream closed before its usage came keeps its booking.
func TestStreamClosedEarlyKeepsItsBooking(t *testing.T) {
	provider := retrytest.NewTransport(retrytest.Config{Family: retrytest.Anthropic})
	clk := autoClock()
	rt := outputLimited(provider, clk)
	for range 2 {
		req := post(t, "https://api.test/v1/messages", strings.NewReader(`{"stream":true}`))
		req = req.WithContext(WithTokens(context.Background(), 0, 100))
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close() // after the first event only
	}
	assert.Equal(t, []time.Duration{10 * time.Second}, clk.Sleeps())
}

// FuzzUsageScanner checks the usage scanner, fed a JSON body in any
// chunking, against encoding/json: it finds exactly the usage objects at
// the places providers put them, whatever else the document holds. On
// input that is not JSON it must only not fail.
func FuzzUsageScanner(f *testing.F) {
	for _, s := range []string{
		`{"id":"x","usage":{"input_tokens":1,"output_tokens":2}}`,
		`{"type":"message_start","message":{"id":"m","usage":{"input_tokens":3}}}`,
		`{"type":"response.completed","response":{"usage":{"input_tokens":3,"output_tokens":4}}}`,
		`{"candidates":[],"usageMetadata":{"promptTokenCount":1}}`,
		`{"choices":[{"usage":{}}],"usage":null}`, `{"a":"}\"{","usage":{"b":"\\"}}`, `[`, `}}}`, `"usage"`,
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, doc []byte, chunk uint8) {
		got := scanAll(scanUsage, string(doc), int(chunk)+1)
		for _, g := range got {
			if len(g) > maxCapture+2 {
				t.Fatalf("captured %d bytes", len(g))
			}
			parseUsage([]byte(g[2:]), false, false) // must not fail
		}
		if !json.Valid(doc) || strings.ContainsRune(string(doc), '\\') || len(doc) > maxCapture {
			return
		}
		// The reference: what encoding/json finds at the same places,
		// for documents whose keys there are not repeated.
		for _, k := range []string{`"usage"`, `"message"`, `"response"`, `"usageMetadata"`} {
			if strings.Count(string(doc), k) > 1 {
				return
			}
		}
		var top map[string]json.RawMessage
		if json.Unmarshal(doc, &top) != nil {
			return // not an object
		}
		want := map[string]bool{}
		object := func(raw json.RawMessage) bool {
			var m map[string]any
			return json.Unmarshal(raw, &m) == nil && m != nil
		}
		for k, v := range top {
			switch k {
			case "usage", "usageMetadata":
				if object(v) {
					want[k] = true
				}
			case "message", "response":
				var inner map[string]json.RawMessage
				if json.Unmarshal(v, &inner) == nil && object(inner["usage"]) {
					want[k+".usage"] = true
				}
			}
		}
		have := map[string]bool{}
		names := map[jsonKey]string{keyUsage: "usage", keyUsageMetadata: "usageMetadata", keyMessage: "message", keyResponse: "response"}
		for _, g := range got {
			k1, k2 := jsonKey(g[0]-'0'), jsonKey(g[1]-'0')
			name := names[k1]
			if k2 != keyOther {
				name += "." + names[k2]
			}
			var m map[string]any
			if json.Unmarshal([]byte(g[2:]), &m) != nil {
				t.Fatalf("captured %q, not an object", g[2:])
			}
			have[name] = true
		}
		if len(have) != len(want) {
			t.Fatalf("found %v, want %v", have, want)
		}
		for k := range want {
			if !have[k] {
				t.Fatalf("found %v, want %v", have, want)
			}
		}
	})
}

// refundQueue runs request A (booking 1000 output tokens of a 1000 a
// minute limit whose bucket holds the whole minute, so A goes at once)
// and, queued behind it, request B booking 500: B's booking waits 30s. A's
// response reports used output tokens; its body is read while B waits. It
// returns the clock and a channel closed when B's response is back.
func refundQueue(t *testing.T, used int) (*fakeclock.Clock, <-chan struct{}) {
	t.Helper()
	clk := fakeclock.New(testStart)
	rt := New(jsonUsageBase(`{"usage":{"input_tokens":10,"output_tokens":`+strconv.Itoa(used)+`}}`), WithClock(clk),
		WithRateLimit(Limits{OutputTokensPerMinute: 1000}), WithRateLimitBurst(time.Minute))
	reqA := get(t, "https://api.test/v1/messages")
	respA, err := rt.RoundTrip(reqA.WithContext(WithTokens(reqA.Context(), 0, 1000)))
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		req := get(t, "https://api.test/v1/messages")
		resp, err := rt.RoundTrip(req.WithContext(WithTokens(req.Context(), 0, 500)))
		if assert.NoError(t, err) {
			resp.Body.Close()
		}
	}()
	require.True(t, clk.WaitForTimers(1, 5*time.Second), "B waits for its tokens")
	require.Len(t, clk.Sleeps(), 1)
	require.InDelta(t, 30*time.Second, clk.Sleeps()[0], float64(time.Millisecond), "B waits for the 500 tokens A's booking left it short of")
	_, err = io.ReadAll(respA.Body)
	require.NoError(t, err)
	require.NoError(t, respA.Body.Close())
	t.Cleanup(func() {
		clk.Advance(time.Minute) // frees B if it is still waiting
		<-done
	})
	return clk, done
}

// A refund frees the local budget at once, for the requests already queued
// too: B, waiting for tokens A booked but did not use, leaves as soon as
// A's usage is read, not at the time its booking gave it.
func TestRefundReleasesQueuedRequests(t *testing.T) {
	clk, done := refundQueue(t, 100) // 900 come back: B's 500 are there
	select {
	case <-done:
	case <-time.After(5 * time.Second): // real time: a margin, not a wait
		t.Fatal("B still waits for its booked time after A's refund")
	}
	assert.Equal(t, testStart, clk.Now(), "B left without the clock moving")
}

// A refund that does not cover a queued request brings it forward by what
// came back: B waits for the tokens still missing, no more, no less.
func TestRefundBringsQueuedRequestsForward(t *testing.T) {
	clk, done := refundQueue(t, 800) // 200 come back: 12s of the 30s
	deadline := time.Now().Add(5 * time.Second)
	for len(clk.Sleeps()) < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // real time: for B to wake and wait again
	}
	require.Len(t, clk.Sleeps(), 2, "B woke at the refund and waits again")
	require.InDelta(t, 18*time.Second, clk.Sleeps()[1], float64(time.Millisecond), "B waits 30s less what the 200 tokens back are worth: 200/(1000/60) = 12s")
	clk.Advance(18*time.Second - 10*time.Millisecond)
	select {
	case <-done:
		t.Fatal("B left before its tokens were there")
	case <-time.After(50 * time.Millisecond):
	}
	clk.Advance(20 * time.Millisecond)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("B did not leave when its tokens were there")
	}
}
