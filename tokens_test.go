package retryhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tokRequest is a POST as SDKs build it: http.NewRequest over a
// bytes.Reader, so GetBody and ContentLength are set.
func tokRequest(t testing.TB, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "https://api.test/v1/messages", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	return req
}

// tokQuarter is ceil(n/4): the text estimate for n ASCII bytes.
func tokQuarter(n int) int { return (n + 3) / 4 }

// tokBase64 is n bytes of base64 text, like an encoded image.
func tokBase64(n int) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[(i*7+3)%len(alphabet)]
	}
	return string(b)
}

func TestDefaultTokenEstimatorProviders(t *testing.T) {
	img := tokBase64(200_000) // a ~150 KB image; as text it would be 50,000 tokens
	tests := []struct {
		name       string
		body       string
		in, out    int
		inExplain  string
		outExplain string
	}{
		{
			name: "anthropic messages, string and block content",
			body: `{"model":"claude-sonnet-4-5","max_tokens":1024,
				"system":"You are a terse assistant.",
				"messages":[
					{"role":"user","content":"Hello, Claude"},
					{"role":"assistant","content":[{"type":"text","text":"Hi! How can I help?"}]},
					{"role":"user","content":[{"type":"text","text":"Summarize this.","cache_control":{"type":"ephemeral"}}]}],
				"metadata":{"user_id":"a-very-long-opaque-user-identifier-that-is-not-sent-to-the-model"},
				"temperature":0.5,"stream":true,"stop_sequences":["END OF TEXT"]}`,
			in:        tokQuarter(26+13+19+15) + 3*messageTokens,
			inExplain: "text of system and three messages, plus framing; no model, roles, types, metadata, settings",
			out:       1024,
		},
		{
			name: "anthropic system as blocks, tool use round trip",
			body: `{"model":"claude-opus-4-1","max_tokens":64,
				"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],
				"tools":[{"name":"get_weather","description":"Weather now","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],
				"messages":[
					{"role":"user","content":"Weather in Paris?"},
					{"role":"assistant","content":[{"type":"tool_use","id":"toolu_01A","name":"get_weather","input":{"city":"Paris","days":1}}]},
					{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01A","content":"18C sunny"}]}]}`,
			// Tools count in full, keys included: name, get_weather,
			// description, Weather now, input_schema, type, object,
			// properties, city, type, string.
			in: tokQuarter(9+
				(4+11+11+11+12+4+6+10+4+4+6)+
				17+
				(11+4+5+4)+ // tool_use name; input {"city":"Paris","days":1}: keys and value
				9) + 1 + // the number 1 in the arguments
				3*messageTokens,
			out: 64,
		},
		{
			name: "openai chat completions, max_completion_tokens",
			body: `{"model":"gpt-4o","messages":[
					{"role":"system","content":"You answer in French."},
					{"role":"user","content":"What is the capital of Italy?","name":"alice"}],
				"max_completion_tokens":500,"temperature":0.2,"stop":["\n\n"],"user":"customer-4711"}`,
			in:  tokQuarter(21+29+5) + 2*messageTokens,
			out: 500,
		},
		{
			name: "openai chat completions, legacy max_tokens wins over later fields",
			body: `{"model":"gpt-3.5-turbo","messages":[{"role":"user","content":"Hi"}],
				"max_tokens":77,"max_completion_tokens":99}`,
			in:  tokQuarter(2) + messageTokens,
			out: 77,
		},
		{
			name: "openai chat completions, image_url with data URL",
			body: `{"model":"gpt-4o","max_tokens":300,"messages":[{"role":"user","content":[
					{"type":"text","text":"What is in this image?"},
					{"type":"image_url","image_url":{"url":"data:image/png;base64,` + img + `","detail":"high"}}]}]}`,
			in:  tokQuarter(22) + imageTokens + messageTokens,
			out: 300,
		},
		{
			name: "openai responses, string input",
			body: `{"model":"gpt-4.1","instructions":"Talk like a pirate.","input":"Are semicolons optional in JavaScript?","max_output_tokens":300,
				"reasoning":{"effort":"low","summary":"auto"},"store":false}`,
			in:  tokQuarter(19 + 38),
			out: 300,
		},
		{
			name: "openai responses, items with input_image",
			body: `{"model":"gpt-4.1","max_output_tokens":50,"input":[
					{"role":"user","content":[
						{"type":"input_text","text":"Describe it."},
						{"type":"input_image","image_url":"https://example.test/cat.png"}]},
					{"type":"function_call_output","call_id":"call_1","output":"{\"ok\":true}"}]}`,
			in:  tokQuarter(12+11) + imageTokens + 2*messageTokens,
			out: 50,
		},
		{
			name: "anthropic base64 image block",
			body: `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":[
					{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"` + img + `"}},
					{"type":"text","text":"Caption?"}]}]}`,
			in:  imageTokens + tokQuarter(8) + messageTokens,
			out: 10,
		},
		{
			name: "base64 document data outside a typed image block",
			body: `{"max_tokens":5,"messages":[{"role":"user","content":[
					{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"` + img + `"}}]}]}`,
			in:  imageTokens + messageTokens,
			out: 5,
		},
		{
			name: "plain-text document is text",
			body: `{"max_tokens":5,"messages":[{"role":"user","content":[
					{"type":"document","source":{"type":"text","media_type":"text/plain","data":"` + strings.Repeat("All work and no play. ", 20) + `"}}]}]}`,
			in:  tokQuarter(22*20) + messageTokens,
			out: 5,
		},
		{
			name: "gemini contents with inline_data and generationConfig",
			body: `{"contents":[{"role":"user","parts":[
					{"text":"Describe"},
					{"inline_data":{"mime_type":"image/png","data":"` + img + `"}}]}],
				"systemInstruction":{"parts":[{"text":"Short."}]},
				"generationConfig":{"maxOutputTokens":256,"temperature":1},
				"safetySettings":[{"category":"HARM_CATEGORY_HARASSMENT","threshold":"BLOCK_NONE"}]}`,
			in:  tokQuarter(8+6) + imageTokens + messageTokens,
			out: 256,
		},
		{
			name: "legacy completions with token IDs",
			body: `{"model":"gpt-3.5-turbo-instruct","prompt":[[1,2,3],[4,5]],"max_tokens":16}`,
			in:   5,
			out:  16,
		},
		{
			name: "CJK counts a token per character, Cyrillic two per token",
			body: `{"messages":[{"role":"user","content":"你好世界"},{"role":"user","content":"Привет"}]}`,
			in:   4 + tokQuarter(12) + 2*messageTokens,
		},
		{
			name: "JSON escapes count as the text they decode to",
			body: `{"prompt":"\u00e9t\u00e9 \"quoted\""}`,
			in:   tokQuarter(2 + 1 + 2 + 1 + 8),
		},
		{
			name: "top-level array and no output field",
			body: `[{"role":"user","content":"abcd"}]`,
			in:   1,
		},
		{
			name: "empty object",
			body: `{}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, out := DefaultTokenEstimator(tokRequest(t, tt.body))
			assert.Equal(t, tt.in, in, "input %s", tt.inExplain)
			assert.Equal(t, tt.out, out, "output")
		})
	}
}

// The image costs a flat amount whatever its encoded size: a bigger photo
// must not look like a bigger prompt.
func TestDefaultTokenEstimatorImageSizeIndependent(t *testing.T) {
	body := func(n int) string {
		return `{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` +
			tokBase64(n) + `"}}]}]}`
	}
	small, _ := DefaultTokenEstimator(tokRequest(t, body(1_000)))
	large, _ := DefaultTokenEstimator(tokRequest(t, body(4_000_000)))
	assert.Equal(t, imageTokens+messageTokens, small)
	assert.Equal(t, small, large)
}

func TestDefaultTokenEstimatorOutputField(t *testing.T) {
	tests := []struct {
		body string
		out  int
	}{
		{`{"max_tokens":0}`, 0},
		{`{"max_tokens":1e3}`, 1000},
		{`{"max_tokens":100.0}`, 100},
		{`{"max_tokens":1e30}`, math.MaxInt32},
		// Not a usable count: the next field is tried.
		{`{"max_tokens":null,"max_completion_tokens":20}`, 20},
		{`{"max_tokens":"100","max_output_tokens":30}`, 30},
		{`{"max_tokens":-5,"max_completion_tokens":1.5,"max_output_tokens":40}`, 40},
		{`{"max_tokens":-5}`, 0},
		// Valid JSON that overflows float64 still parses; the field is unusable.
		{`{"max_tokens":1e400,"max_output_tokens":8}`, 8},
		{`{"generation_config":{"max_output_tokens":70}}`, 70},
		// Only top level: a nested max_tokens is someone else's setting.
		{`{"messages":[{"role":"user","content":"x","max_tokens":9}]}`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.body, func(t *testing.T) {
			_, out := DefaultTokenEstimator(tokRequest(t, tt.body))
			assert.Equal(t, tt.out, out)
		})
	}
}

func TestDefaultTokenEstimatorNotJSON(t *testing.T) {
	for _, body := range []string{
		"grant_type=client_credentials&scope=read",
		`{"model":"gpt-4o","messages":[`, // truncated JSON
		"\x00\x01\x02 binary",
		`"just a string"`, // valid JSON, but no LLM API takes a bare string
	} {
		in, out := DefaultTokenEstimator(tokRequest(t, body))
		assert.Equal(t, tokQuarter(len(body)), in, "%q", body)
		assert.Zero(t, out)
	}
}

// Without GetBody the body cannot be read without consuming it, so only the
// declared length counts.
func TestDefaultTokenEstimatorWithoutGetBody(t *testing.T) {
	body := &tokBody{Reader: strings.NewReader(`{"max_tokens":5,"messages":[]}`)}
	req, err := http.NewRequest(http.MethodPost, "https://api.test/", body)
	require.NoError(t, err)
	require.Nil(t, req.GetBody, "http.NewRequest sets no GetBody for an unknown reader")

	req.ContentLength = 1001
	in, out := DefaultTokenEstimator(req)
	assert.Equal(t, 251, in)
	assert.Zero(t, out, "max_tokens is not seen without reading the body")
	assert.Zero(t, body.read, "the body was read")

	req.ContentLength = -1
	in, out = DefaultTokenEstimator(req)
	assert.Zero(t, in, "unknown length")
	assert.Zero(t, out)

	assert.Equal(t, [2]int{0, 0}, tokPair(DefaultTokenEstimator(nil)))
}

func TestDefaultTokenEstimatorGetBodyFails(t *testing.T) {
	req := tokRequest(t, `{"max_tokens":5}`)
	req.ContentLength = 400
	req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("gone") }
	assert.Equal(t, [2]int{100, 0}, tokPair(DefaultTokenEstimator(req)))

	req.GetBody = func() (io.ReadCloser, error) { return nil, nil }
	assert.Equal(t, [2]int{100, 0}, tokPair(DefaultTokenEstimator(req)), "nil body from GetBody")

	// A read that fails half way: the body is not parsed from a fragment,
	// and it is closed.
	var rc *tokBody
	req.GetBody = func() (io.ReadCloser, error) {
		rc = &tokBody{Reader: io.MultiReader(strings.NewReader(`{"max_tokens":5,`), tokErrReader{})}
		return rc, nil
	}
	assert.Equal(t, [2]int{100, 0}, tokPair(DefaultTokenEstimator(req)))
	assert.True(t, rc.closed, "GetBody's copy closed")
}

// Over 8 MiB the body is charged by length. With ContentLength known it is
// not read at all; without, reading stops just past the bound.
func TestDefaultTokenEstimatorHugeBody(t *testing.T) {
	const size = maxEstimateBody + 1<<20
	t.Run("known length", func(t *testing.T) {
		calls := 0
		req := tokRequest(t, `{}`)
		req.ContentLength = size
		req.GetBody = func() (io.ReadCloser, error) {
			calls++
			return io.NopCloser(&tokEndless{}), nil
		}
		in, out := DefaultTokenEstimator(req)
		assert.Equal(t, size/4, in)
		assert.Zero(t, out)
		assert.Zero(t, calls, "GetBody called for a body known to be too large")
	})
	t.Run("unknown length", func(t *testing.T) {
		src := &tokEndless{}
		rc := &tokBody{Reader: src}
		req := tokRequest(t, `{}`)
		req.ContentLength = -1
		req.GetBody = func() (io.ReadCloser, error) { return rc, nil }
		in, out := DefaultTokenEstimator(req)
		assert.Equal(t, tokQuarter(maxEstimateBody+1), in)
		assert.Zero(t, out)
		assert.Equal(t, int64(maxEstimateBody+1), src.n, "read past the bound")
		assert.True(t, rc.closed)
	})
}

// A body whose ContentLength understates it is still bounded.
func TestDefaultTokenEstimatorLyingContentLength(t *testing.T) {
	src := &tokEndless{}
	req := tokRequest(t, `{}`)
	req.ContentLength = 10
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(src), nil }
	in, _ := DefaultTokenEstimator(req)
	assert.Equal(t, tokQuarter(maxEstimateBody+1), in)
	assert.Equal(t, int64(maxEstimateBody+1), src.n)
}

func TestEstimateTokensPrecedence(t *testing.T) {
	body := `{"max_tokens":100,"messages":[{"role":"user","content":"abcdefgh"}]}`
	def := [2]int{2 + messageTokens, 100}

	var seen []*http.Request
	custom := func(req *http.Request) (int, int) {
		seen = append(seen, req)
		return 7, 9
	}

	t.Run("default", func(t *testing.T) {
		cfg := New(tokNopTransport{}).cfg
		assert.Equal(t, def, tokPair(cfg.estimateTokens(tokRequest(t, body))))
	})
	t.Run("user estimator", func(t *testing.T) {
		seen = nil
		cfg := New(tokNopTransport{}, WithTokenEstimator(custom)).cfg
		req := tokRequest(t, body)
		assert.Equal(t, [2]int{7, 9}, tokPair(cfg.estimateTokens(req)))
		assert.Equal(t, []*http.Request{req}, seen, "the estimator gets the request itself")
	})
	t.Run("nil restores the default", func(t *testing.T) {
		cfg := New(tokNopTransport{}, WithTokenEstimator(custom), WithTokenEstimator(nil)).cfg
		assert.Equal(t, def, tokPair(cfg.estimateTokens(tokRequest(t, body))))
	})
	t.Run("user estimator wrapping the default", func(t *testing.T) {
		cfg := New(tokNopTransport{}, WithTokenEstimator(func(req *http.Request) (int, int) {
			in, out := DefaultTokenEstimator(req)
			return in + 300, out
		})).cfg
		assert.Equal(t, [2]int{def[0] + 300, def[1]}, tokPair(cfg.estimateTokens(tokRequest(t, body))))
	})
	t.Run("negative estimates clamp to zero", func(t *testing.T) {
		cfg := New(tokNopTransport{}, WithTokenEstimator(func(*http.Request) (int, int) { return -1, -50 })).cfg
		assert.Equal(t, [2]int{0, 0}, tokPair(cfg.estimateTokens(tokRequest(t, body))))
	})
	t.Run("WithTokens overrides the estimator", func(t *testing.T) {
		seen = nil
		cfg := New(tokNopTransport{}, WithTokenEstimator(custom)).cfg
		req := tokRequest(t, body)
		req = req.WithContext(WithTokens(req.Context(), 1234, 56))
		assert.Equal(t, [2]int{1234, 56}, tokPair(cfg.estimateTokens(req)))
		assert.Empty(t, seen, "estimator called although counts were given")
	})
	t.Run("WithTokens overrides the default", func(t *testing.T) {
		cfg := New(tokNopTransport{}).cfg
		req := tokRequest(t, body)
		req = req.WithContext(WithTokens(req.Context(), 0, 0))
		assert.Equal(t, [2]int{0, 0}, tokPair(cfg.estimateTokens(req)), "zero is a count, not absence")
	})
	t.Run("nil request", func(t *testing.T) {
		cfg := New(tokNopTransport{}).cfg
		assert.Equal(t, [2]int{0, 0}, tokPair(cfg.estimateTokens(nil)))
	})
}

func TestWithTokens(t *testing.T) {
	ctx := context.Background()
	_, _, ok := tokensFromContext(ctx)
	assert.False(t, ok)
	//lint:ignore SA1012 a nil context must not panic the limiter
	_, _, ok = tokensFromContext(nil)
	assert.False(t, ok)

	in, out, ok := tokensFromContext(WithTokens(ctx, 10, 20))
	assert.True(t, ok)
	assert.Equal(t, [2]int{10, 20}, [2]int{in, out})

	in, out, ok = tokensFromContext(WithTokens(ctx, -3, -4))
	assert.True(t, ok)
	assert.Equal(t, [2]int{0, 0}, [2]int{in, out}, "negatives clamp to 0")

	// The innermost call wins, as with any context value.
	in, out, _ = tokensFromContext(WithTokens(WithTokens(ctx, 1, 2), 3, 4))
	assert.Equal(t, [2]int{3, 4}, [2]int{in, out})

	// Unrelated values layered on top do not hide it.
	type other struct{}
	in, _, ok = tokensFromContext(context.WithValue(WithTokens(ctx, 5, 0), other{}, 1))
	assert.True(t, ok)
	assert.Equal(t, 5, in)
}

// Estimating must leave the request exactly as it was: the body that goes
// out is req.Body, and GetBody must still give the same bytes for retries.
func TestEstimateTokensLeavesBodyIntact(t *testing.T) {
	body := `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"keep me"}]}`
	for name, est := range map[string]func(*http.Request) (int, int){
		"default": nil,
		"user estimator using GetBody": func(req *http.Request) (int, int) {
			rc, err := req.GetBody()
			if err != nil {
				return 0, 0
			}
			defer rc.Close()
			b, _ := io.ReadAll(rc)
			return len(b), 0
		},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := New(tokNopTransport{}, WithTokenEstimator(est)).cfg
			req := tokRequest(t, body)
			orig := req.Body
			in, _ := cfg.estimateTokens(req)
			assert.Positive(t, in)
			require.True(t, req.Body == orig, "req.Body replaced")
			got, err := io.ReadAll(req.Body)
			require.NoError(t, err)
			assert.Equal(t, body, string(got), "req.Body")
			rc, err := req.GetBody()
			require.NoError(t, err)
			got, err = io.ReadAll(rc)
			require.NoError(t, err)
			assert.Equal(t, body, string(got), "GetBody")
		})
	}
}

// The GetBody copy is always closed, so a GetBody that opens a file does not
// leak it.
func TestDefaultTokenEstimatorClosesCopy(t *testing.T) {
	for _, body := range []string{`{"max_tokens":1}`, "not json", ""} {
		var copies []*tokBody
		req := tokRequest(t, body)
		req.GetBody = func() (io.ReadCloser, error) {
			rc := &tokBody{Reader: strings.NewReader(body)}
			copies = append(copies, rc)
			return rc, nil
		}
		DefaultTokenEstimator(req)
		require.Len(t, copies, 1)
		assert.True(t, copies[0].closed, "%q", body)
	}
}

// Map iteration order is random; the estimate must not be.
func TestDefaultTokenEstimatorDeterministic(t *testing.T) {
	body := tokChatBody(4 << 10)
	first := tokPair(DefaultTokenEstimator(tokRequest(t, body)))
	for range 20 {
		assert.Equal(t, first, tokPair(DefaultTokenEstimator(tokRequest(t, body))))
	}
}

// The typical body the benchmark uses should estimate near bytes/4 minus
// the JSON around the text: a sanity check of the whole walk.
func TestDefaultTokenEstimatorTypicalChat(t *testing.T) {
	body := tokChatBody(4 << 10)
	in, out := DefaultTokenEstimator(tokRequest(t, body))
	assert.Equal(t, 1024, out)
	var doc struct {
		System   string
		Messages []struct{ Content string }
	}
	require.NoError(t, json.Unmarshal([]byte(body), &doc))
	text := len(doc.System)
	for _, m := range doc.Messages {
		text += len(m.Content)
	}
	assert.Equal(t, tokQuarter(text)+len(doc.Messages)*messageTokens, in)
	assert.Less(t, in, tokQuarter(len(body)), "below bytes/4")
}

func FuzzEstimateTokens(f *testing.F) {
	for _, seed := range []string{
		``,
		`{}`,
		`[]`,
		`null`,
		`{"max_tokens":1024,"system":"s","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}],"max_completion_tokens":5}`,
		`{"input":[{"role":"user","content":[{"type":"input_text","text":"x"}]}],"max_output_tokens":1e400}`,
		`{"tools":[{"name":"f","input_schema":{"type":"object","properties":{"a":{"type":"integer","minimum":1}}}}]}`,
		`{"prompt":[[1,2],[3]],"max_tokens":-1}`,
		`{"contents":[{"parts":[{"inline_data":{"data":"QUJD"}}]}],"generationConfig":{"maxOutputTokens":9}}`,
		"{\"content\":\"\xff\xfe\"}",
		`[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]`,
		"a=1&b=2",
	} {
		f.Add([]byte(seed))
	}
	cfg := New(tokNopTransport{}).cfg
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := http.NewRequest(http.MethodPost, "https://api.test/", bytes.NewReader(body))
		require.NoError(t, err)
		in, out := cfg.estimateTokens(req)
		require.GreaterOrEqual(t, in, 0)
		require.GreaterOrEqual(t, out, 0)
		require.LessOrEqual(t, in, math.MaxInt32)
		require.LessOrEqual(t, out, math.MaxInt32)
		if !json.Valid(body) {
			require.Equal(t, tokQuarter(len(body)), in, "non-JSON is bytes/4")
			require.Zero(t, out)
		}
		again := tokPair(cfg.estimateTokens(req))
		require.Equal(t, [2]int{in, out}, again, "not deterministic")

		rc, err := req.GetBody()
		require.NoError(t, err)
		got, err := io.ReadAll(rc)
		require.NoError(t, err)
		require.Equal(t, body, got, "GetBody")
		got, err = io.ReadAll(req.Body)
		require.NoError(t, err)
		require.Equal(t, body, got, "req.Body")
	})
}

func BenchmarkDefaultTokenEstimator(b *testing.B) {
	body := tokChatBody(4 << 10)
	req := tokRequest(b, body)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		DefaultTokenEstimator(req)
	}
}

// tokChatBody is an Anthropic Messages request of about size bytes: a system
// prompt and alternating turns of English text, as a chat app sends.
func tokChatBody(size int) string {
	const sentence = "The quick brown fox jumps over the lazy dog while the retry loop waits for the rate limit to reset. "
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	req := struct {
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
		System    string `json:"system"`
		Messages  []msg  `json:"messages"`
	}{Model: "claude-sonnet-4-5", MaxTokens: 1024, System: strings.Repeat(sentence, 3)}
	roles := [2]string{"user", "assistant"}
	for i := 0; ; i++ {
		b, _ := json.Marshal(req)
		if len(b) >= size {
			return string(b)
		}
		req.Messages = append(req.Messages, msg{Role: roles[i%2], Content: fmt.Sprintf("Turn %d. %s%s", i, sentence, sentence)})
	}
}

func tokPair(a, b int) [2]int { return [2]int{a, b} }

// tokBody records reads and Close.
type tokBody struct {
	io.Reader
	read   int
	closed bool
}

func (b *tokBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	b.read += n
	return n, err
}

func (b *tokBody) Close() error { b.closed = true; return nil }

// tokEndless yields an opening bracket and then spaces forever, counting
// the bytes handed out.
type tokEndless struct{ n int64 }

func (e *tokEndless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
		if e.n == 0 && i == 0 {
			p[i] = '['
		}
	}
	e.n += int64(len(p))
	return len(p), nil
}

type tokErrReader struct{}

func (tokErrReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

type tokNopTransport struct{}

func (tokNopTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("not used")
}
