package retryhttp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
)

// Token estimation feeds the token limits of WithRateLimit (TokensPerMinute,
// InputTokensPerMinute, OutputTokensPerMinute). The limiter has to charge a
// request before it is sent, when the provider has not counted it yet, so it
// needs a guess; the provider's rate-limit headers correct the local budget
// afterwards. The guess is for pacing, never for billing.

const (
	// maxEstimateBody is the most of a request body DefaultTokenEstimator
	// reads. Larger bodies are charged by their length alone: parsing them
	// would cost more memory than a rough pacing estimate is worth.
	maxEstimateBody = 8 << 20

	// maxTokenCount caps every estimate so it fits an int on 32-bit
	// platforms and sums of a few estimates cannot overflow.
	maxTokenCount = math.MaxInt32

	// imageTokens is the flat charge for one image or other media block
	// (base64 data, data: URL or image reference). Providers charge images by
	// pixel size, not by encoded length: Anthropic about width·height/750,
	// capped near 1,600 for the largest images it accepts unresized; OpenAI
	// 85 + 170 per 512-pixel tile (about 1,100 at most for a high-detail
	// image); Gemini 258 per image. 1,600 is the high end, so an image is
	// never charged less than it costs; charging its base64 length/4 instead
	// would overstate a 1 MB photo some 150 times.
	imageTokens = 1600

	// messageTokens is the per-message overhead: chat formats wrap every
	// message in role and separator tokens (3 to 4 in OpenAI's published
	// counting recipe).
	messageTokens = 4

	// minMediaLen is the shortest string treated as base64 media data.
	// Shorter strings are cheap either way.
	minMediaLen = 256
)

// WithTokenEstimator sets how many input and output tokens a request is
// expected to use, for the token limits of [WithRateLimit]. f is called
// before a request is admitted, possibly from many goroutines at once, so it
// must be safe for concurrent use and should be fast. It must not read or
// close req.Body, which is still to be sent; it may call req.GetBody for a
// fresh copy. Negative results are treated as 0.
//
// The default, and what nil restores, is [DefaultTokenEstimator]. A count set
// on the request's context with [WithTokens] takes precedence over f. The
// estimator is transport-wide, with no [RequestOption] counterpart; use
// WithTokens for one request.
func WithTokenEstimator(f func(*http.Request) (input, output int)) Option {
	return Option{func(c *config) { c.tokenEstimator = f }}
}

type tokensKey struct{}

// tokenCounts is the value WithTokens stores.
type tokenCounts struct{ input, output int }

// WithTokens returns a context that makes the request sent with it count as
// exactly input and output tokens against the token limits, bypassing the
// estimator. Use it when the counts are known, for example from a provider's
// token-counting endpoint or a local tokenizer, or to charge a request that
// the estimator cannot read (a streamed upload). output is the most the
// request may generate, as the providers reserve it (max_tokens). Negative
// values are treated as 0. As for an estimate, the usage the response
// reports settles the booking (see [WithRateLimit]).
func WithTokens(ctx context.Context, input, output int) context.Context {
	return context.WithValue(ctx, tokensKey{}, tokenCounts{
		input:  min(max(input, 0), maxTokenCount),
		output: min(max(output, 0), maxTokenCount),
	})
}

// tokensFromContext returns the counts WithTokens set on ctx, if any.
func tokensFromContext(ctx context.Context) (input, output int, ok bool) {
	if ctx == nil {
		return 0, 0, false
	}
	tc, ok := ctx.Value(tokensKey{}).(tokenCounts)
	return tc.input, tc.output, ok
}

// estimateTokens is what the limiter charges for req: the counts set with
// WithTokens, else the user's estimator, else DefaultTokenEstimator. None of
// them reads req.Body, so the body still goes out intact.
func (c *config) estimateTokens(req *http.Request) (input, output int) {
	if req == nil {
		return 0, 0
	}
	if in, out, ok := tokensFromContext(req.Context()); ok {
		return in, out
	}
	if c.tokenEstimator != nil {
		in, out := c.tokenEstimator(req)
		return min(max(in, 0), maxTokenCount), min(max(out, 0), maxTokenCount)
	}
	return DefaultTokenEstimator(req)
}

// DefaultTokenEstimator estimates the tokens an LLM API request uses, for
// pacing against token rate limits. It is exported so a custom estimator can
// wrap it, for example to add a fixed tool-definition overhead or scale the
// output reservation. It never reads or closes req.Body: the body is read
// through req.GetBody, and without GetBody only req.ContentLength is used.
//
// Output is the request's own cap on generation, which is also what the
// providers reserve against output-token limits: the first present of the
// top-level integers max_tokens (Anthropic Messages, older OpenAI Chat
// Completions), max_completion_tokens (OpenAI Chat Completions) and
// max_output_tokens (OpenAI Responses), then Gemini's
// generationConfig.maxOutputTokens. Without one, output is 0, and the
// provider's rate-limit headers correct the budget after the response.
//
// Input, for a JSON body of at most 8 MiB, counts only what becomes tokens:
//   - the text of string values (message content, content[].text, system,
//     prompt, input, instructions, tool results...), at one token per 4 bytes
//     of UTF-8, except that a character of a 3-byte script (CJK, Indic, Thai)
//     counts as a token of its own, as it roughly does in current
//     tokenizers. Protocol strings (model, role, type, ids, media types) and
//     request settings (metadata, generation and safety settings, stop
//     sequences) are not counted.
//   - tool definitions, JSON schemas and tool-call arguments in full, keys
//     included, with 1 token per number, boolean or null in them.
//   - 4 tokens of framing per message (elements of messages, contents, or an
//     input array of items).
//   - a flat 1,600 tokens per image or media block: an object typed "image",
//     "image_url" or "input_image", Gemini inline_data/file_data, a data: URL,
//     or a base64 string of 256 bytes or more. This is about the most a
//     single image costs at Anthropic, OpenAI or Gemini; its base64 length
//     says nothing about its token cost.
//   - token IDs given as numbers in a prompt or input array, 1 token each.
//
// Any other body (not a JSON object or array, or one that fails to parse)
// is charged ceil(bytes/4), as is a body larger than 8 MiB, one GetBody
// cannot reproduce, and, without GetBody, a body of known ContentLength. A
// body of unknown length without GetBody is charged 0 input tokens.
//
// Accuracy: English prose and code typically tokenize at 3.5 to 4.5 bytes per
// token, so the text part is usually within ±25% of the provider's count and
// errs low on code, numbers, symbol-dense text and random identifiers (up to
// about 2x low on hex or base64 pasted as text) and high on long common
// words. Hidden prompts the provider adds (such as Anthropic's few hundred
// tokens of tool-use system prompt) are not counted. Images are charged at
// the top of their range, so a request of many small images is overstated.
// Non-JSON uploads (multipart audio or files) are charged by size and are
// usually overstated by far; charge them with [WithTokens]. Results are never
// negative and at most math.MaxInt32.
func DefaultTokenEstimator(req *http.Request) (input, output int) {
	if req == nil {
		return 0, 0
	}
	if req.GetBody == nil || req.ContentLength > maxEstimateBody {
		return lengthTokens(req.ContentLength), 0
	}
	body, ok := readEstimateBody(req)
	if !ok {
		return lengthTokens(max(req.ContentLength, int64(len(body)))), 0
	}
	return estimateBodyTokens(body)
}

// readEstimateBody reads a fresh copy of the body through GetBody, at most
// maxEstimateBody bytes. ok is false when GetBody or the read failed or the
// body is larger than the bound; body then holds what was read.
func readEstimateBody(req *http.Request) (body []byte, ok bool) {
	rc, err := req.GetBody()
	if err != nil || rc == nil {
		return nil, false
	}
	defer rc.Close()
	if rc == http.NoBody {
		return nil, true
	}
	// Size the buffer from ContentLength so a typical body is one allocation;
	// +1 so reading the EOF does not grow it.
	size := 512
	if req.ContentLength > 0 {
		size = int(req.ContentLength) + 1
	}
	buf := make([]byte, 0, size)
	lr := io.LimitReader(rc, maxEstimateBody+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return buf, false
		}
	}
	if len(buf) > maxEstimateBody {
		return buf, false
	}
	return buf, true
}

// estimateBodyTokens estimates a whole body held in memory.
func estimateBodyTokens(body []byte) (input, output int) {
	if !looksLikeJSON(body) {
		return lengthTokens(int64(len(body))), 0
	}
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		// A number too large for float64 (1e400) is valid JSON: decoding
		// carries on past it, leaving that value nil, so keep the rest.
		var typeErr *json.UnmarshalTypeError
		if !errors.As(err, &typeErr) {
			return lengthTokens(int64(len(body))), 0
		}
	}
	var tc tokenCounter
	tc.value(doc, "", false)
	obj, _ := doc.(map[string]any)
	return tc.tokens(), outputTokens(obj)
}

// looksLikeJSON reports whether body starts, after white space, with an
// object or array: the only request bodies LLM APIs take. Checking first
// spares json.Unmarshal on form posts and binary uploads.
func looksLikeJSON(body []byte) bool {
	for _, b := range body {
		switch b {
		case ' ', '\t', '\r', '\n':
			continue
		case '{', '[':
			return true
		default:
			return false
		}
	}
	return false
}

// lengthTokens is the fallback estimate, ceil(n/4), capped.
func lengthTokens(n int64) int {
	if n <= 0 {
		return 0
	}
	return int(min((n+3)/4, maxTokenCount))
}

// outputTokens returns the request's generation cap, or 0 when it sets none.
func outputTokens(obj map[string]any) int {
	for _, k := range [...]string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
		if n, ok := countValue(obj[k]); ok {
			return n
		}
	}
	for _, g := range [...]string{"generationConfig", "generation_config"} {
		gc, _ := obj[g].(map[string]any)
		for _, k := range [...]string{"maxOutputTokens", "max_output_tokens"} {
			if n, ok := countValue(gc[k]); ok {
				return n
			}
		}
	}
	return 0
}

// countValue accepts a JSON number that is a non-negative integer, capped.
// Anything else (null, a string, 1.5, -1) counts as absent, so the next
// field is tried.
func countValue(v any) (int, bool) {
	f, ok := v.(float64)
	if !ok || !(f >= 0) || f != math.Trunc(f) {
		return 0, false
	}
	if f > maxTokenCount {
		return maxTokenCount, true
	}
	return int(f), true
}

// Keys whose string values are protocol, not text the model reads.
var skipStringKeys = map[string]bool{
	"model": true, "role": true, "type": true, "id": true, "object": true,
	"media_type": true, "mime_type": true, "mimeType": true, "detail": true,
	"format": true, "status": true, "user": true, "signature": true,
	"tool_use_id": true, "tool_call_id": true, "call_id": true, "file_id": true,
	"previous_response_id": true, "service_tier": true, "reasoning_effort": true,
	"tool_choice": true, "stop": true, "stop_sequences": true, "stopSequences": true,
	"prompt_cache_key": true, "safety_identifier": true,
}

// Keys whose object values are request settings, skipped as a whole.
var skipObjectKeys = map[string]bool{
	"metadata": true, "cache_control": true, "generationConfig": true,
	"generation_config": true, "safetySettings": true, "safety_settings": true,
	"logit_bias": true, "stream_options": true, "reasoning": true, "thinking": true,
	"tool_choice": true, "toolConfig": true, "tool_config": true,
}

// Keys whose values are structured data the provider renders into the
// prompt (tool definitions, schemas, tool-call arguments): keys, numbers and
// booleans inside them become tokens too.
var structuredKeys = map[string]bool{
	"tools": true, "functions": true, "function_declarations": true,
	"functionDeclarations": true, "parameters": true, "input_schema": true,
	"schema": true, "json_schema": true, "response_format": true,
	"responseSchema": true, "response_schema": true, "arguments": true,
	"args": true, "input": true, "response": true,
}

// Keys whose arrays hold messages, each framed by messageTokens.
var messageKeys = map[string]bool{"messages": true, "contents": true, "input": true}

// Content-block types that are images, charged imageTokens whatever they hold.
var imageTypes = map[string]bool{"image": true, "image_url": true, "input_image": true}

// tokenCounter sums an estimate in two parts: text in quarter-token units,
// and whole tokens for everything charged by the piece.
type tokenCounter struct {
	units int // quarter tokens of text
	fixed int // framing, images, numbers
}

func (tc *tokenCounter) tokens() int {
	// Bodies are bounded by maxEstimateBody, so neither part can come near
	// overflowing before the cap.
	return int(min(int64(tc.fixed)+(int64(tc.units)+3)/4, maxTokenCount))
}

// value adds v, found under key (the nearest object key above it; arrays
// pass their key to their elements). structured is set inside tool
// definitions, schemas and arguments, where everything counts.
func (tc *tokenCounter) value(v any, key string, structured bool) {
	switch x := v.(type) {
	case string:
		if !structured && skipStringKeys[key] {
			return
		}
		if isMediaString(x) {
			tc.fixed += imageTokens
			return
		}
		tc.units += textUnits(x)
	case float64, bool, nil:
		// Numbers are settings (temperature, top_p) outside structured data,
		// except token IDs given as a prompt.
		if structured || key == "prompt" || key == "input" {
			tc.fixed++
		}
	case []any:
		framed := !structured && messageKeys[key]
		for _, el := range x {
			elKey := key
			if _, isObj := el.(map[string]any); framed && isObj {
				// A message, not the structured value of its key: the
				// items of a Responses "input" array are messages, while
				// a tool_use block's "input" object is arguments.
				tc.fixed += messageTokens
				elKey = ""
			}
			tc.value(el, elKey, structured)
		}
	case map[string]any:
		if !structured && skipObjectKeys[key] {
			return
		}
		if isMediaBlock(x) {
			tc.fixed += imageTokens
			return
		}
		structured = structured || structuredKeys[key]
		for k, el := range x {
			if structured {
				tc.units += textUnits(k)
			}
			tc.value(el, k, structured)
		}
	}
}

// isMediaBlock reports whether obj is an image content block (Anthropic
// "image", OpenAI "image_url" and "input_image") or a Gemini part holding
// inline or referenced media.
func isMediaBlock(obj map[string]any) bool {
	if t, _ := obj["type"].(string); imageTypes[t] {
		return true
	}
	for _, k := range [...]string{"inline_data", "inlineData", "file_data", "fileData"} {
		if _, ok := obj[k].(map[string]any); ok {
			return true
		}
	}
	return false
}

// isMediaString reports whether s is encoded media rather than text: a
// base64 data: URL, or a long run of base64 characters with no spaces, which
// no prose contains.
func isMediaString(s string) bool {
	if strings.HasPrefix(s, "data:") && strings.Contains(s[:min(len(s), 128)], ";base64,") {
		return true
	}
	if len(s) < minMediaLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' ||
			c == '+' || c == '/' || c == '=' || c == '-' || c == '_' || c == '\n' || c == '\r') {
			return false
		}
	}
	return true
}

// textUnits is the quarter-token weight of text: one per byte, so ASCII
// counts 4 bytes a token and 2-byte scripts (Cyrillic, Greek, Arabic,
// Hebrew) 2 characters a token; a 3-byte character (CJK, Indic, Thai) gets
// one more, making it a whole token. 4-byte characters (emoji, rare CJK)
// are a token each as they are.
func textUnits(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if s[i]&0xF0 == 0xE0 { // lead byte of a 3-byte UTF-8 sequence
			n++
		}
	}
	return n
}
