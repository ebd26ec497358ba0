package retryhttp

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Whatever WithKeyFunc returns is written out as a fingerprint only, in
// Stats, in breaker events and in log lines: keying by API key is what the
// option is for, and keys of no known shape (a vendor prefix, a UUID) look
// like any label.
func TestCustomKeysAreFingerprintedWhereWritten(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	for _, secret := range []string{"XAPIKEY-3f9a2c7e5b1d4a6c8e0f", "9b2f6c1e-4d3a-4e8b-a7c5-0f1e2d3c4b5a"} {
		t.Run(secret, func(t *testing.T) {
			var logs bytes.Buffer
			var mu sync.Mutex
			var events []BreakerEvent
			rt := New(nil, WithClock(autoClock()), WithMaxRetries(4), // 5 failures open the breaker
				WithBackoff(time.Millisecond, time.Millisecond), WithJitter(0),
				WithKeyFunc(func(r *http.Request) string { return r.Header.Get("X-Api-Key") }),
				WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
				WithHooks(Hooks{OnBreaker: func(e BreakerEvent) { mu.Lock(); events = append(events, e); mu.Unlock() }}))
			defer rt.CloseIdleConnections()
			req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/models", nil)
			require.NoError(t, err)
			req.Header.Set("X-Api-Key", secret)
			resp, err := rt.RoundTrip(req)
			require.NoError(t, err)
			resp.Body.Close()

			stats := rt.Stats()
			require.Len(t, stats, 1)
			key := stats[0].Key
			assert.NotContains(t, key, secret)
			assert.Regexp(t, `^key:[0-9a-f]+$`, key)
			mu.Lock()
			require.NotEmpty(t, events, "the breaker opened")
			for _, e := range events {
				assert.Equal(t, key, e.Key, "hooks name the upstream as Stats does")
			}
			mu.Unlock()
			assert.Contains(t, logs.String(), key, "the breaker's log line names the upstream")
			assert.NotContains(t, logs.String(), secret)
			// No part of the key is kept either.
			for _, part := range strings.FieldsFunc(secret, func(r rune) bool { return r == '-' }) {
				if len(part) >= 8 {
					assert.NotContains(t, key+logs.String(), part)
				}
			}
		})
	}
}

func TestKeyFingerprintsAreStableAndDistinct(t *testing.T) {
	a := upstreamKey{custom: "XAPIKEY-3f9a2c7e5b1d4a6c8e0f"}.String()
	assert.Equal(t, a, upstreamKey{custom: "XAPIKEY-3f9a2c7e5b1d4a6c8e0f"}.String(), "the same key names the same upstream")
	assert.NotEqual(t, a, upstreamKey{custom: "XAPIKEY-3f9a2c7e5b1d4a6c8e0e"}.String(), "different keys stay apart")
	assert.Regexp(t, `^key:[0-9a-f]+$`, upstreamKey{custom: "tenant-42"}.String(), "a label is fingerprinted too: no pattern tells it from a key")
	assert.Equal(t, "https://api.test:8443", upstreamKey{scheme: "https", host: "api.test:8443"}.String(), "the default key is the host, kept readable")
}

func TestModelOf(t *testing.T) {
	long := `{"messages":[{"role":"user","content":"` + strings.Repeat("model ", 3000) + `"}],"max_tokens":5,"model":"claude-sonnet-4-5"}`
	for _, tc := range []struct {
		name, method, url, body string
		want                    string
	}{
		{"OpenAI", "POST", "https://api.openai.com/v1/chat/completions", `{"model":"gpt-5-mini","messages":[]}`, "gpt-5-mini"},
		{"after a long prompt", "POST", "https://api.anthropic.com/v1/messages", long, "claude-sonnet-4-5"},
		{"white space first", "POST", "https://api.test/", "\n\t {\"model\" : \"m\"}", "m"},
		{"Gemini path", "POST", "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", `{"contents":[]}`, "gemini-2.5-flash"},
		{"Azure deployment", "POST", "https://x.openai.azure.com/openai/deployments/my-gpt/chat/completions?api-version=2024-10-21", `{"messages":[]}`, "my-gpt"},
		{"the body wins over the path", "POST", "https://api.test/v1/models/a:x", `{"model":"b"}`, "b"},
		{"a nested model is not the request's", "POST", "https://api.test/", `{"metadata":{"model":"x"}}`, ""},
		{"not a string", "POST", "https://api.test/", `{"model":42}`, ""},
		{"not JSON", "POST", "https://api.test/", `model=gpt`, ""},
		{"no body", "GET", "https://api.test/v1/messages", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			req, err := http.NewRequest(tc.method, tc.url, body)
			require.NoError(t, err)
			assert.Equal(t, tc.want, ModelOf(req))
			if body != nil {
				b, err := io.ReadAll(req.Body)
				require.NoError(t, err)
				assert.Equal(t, tc.body, string(b), "the body is not consumed")
			}
		})
	}
	req, _ := http.NewRequest("POST", "https://api.test/", io.NopCloser(strings.NewReader(`{"model":"m"}`)))
	assert.Equal(t, "", ModelOf(req), "a body without GetBody is not read")
	assert.Equal(t, "", ModelOf(nil))
}

func TestModelLabels(t *testing.T) {
	assert.Equal(t, "https://api.test#claude-sonnet-4-5", upstreamKey{scheme: "https", host: "api.test", model: modelLabel("claude-sonnet-4-5")}.String())
	assert.Equal(t, "accounts/fireworks/models/llama-v3p1-8b-instruct", modelLabel("accounts/fireworks/models/llama-v3p1-8b-instruct"))
	assert.Equal(t, "gpt-4o-2024-08-06", modelLabel("gpt-4o-2024-08-06"))
	assert.Regexp(t, `^key:[0-9a-f]{16}$`, modelLabel("has space"))
	assert.Regexp(t, `^key:[0-9a-f]{16}$`, modelLabel("sk-ant-"+strings.Repeat("x", 200)))
	assert.Regexp(t, `^key:[0-9a-f]{16}#gpt-5$`, upstreamKey{custom: "sk-secret", model: "gpt-5"}.String())
}

// modelServer answers 429 with Retry-After to requests for model "busy"
// and 200 to the others, and records the bodies it got.
func modelServer(t *testing.T) (*httptest.Server, *[]string, *sync.Mutex) {
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		if strings.Contains(string(b), `"busy"`) {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv, &bodies, &mu
}

func postModel(t *testing.T, rt http.RoundTripper, url, model string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/messages", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"model":"`+model+`"}`))
	require.NoError(t, err)
	req = req.WithContext(NoRetry(req.Context()))
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp
}

// With WithKeyByModel a 429 on one model holds that model only: the other
// models on the same host go at once, and Stats shows each model.
func TestKeyByModelHoldsOneModelOnly(t *testing.T) {
	srv, bodies, mu := modelServer(t)
	for _, byModel := range []bool{false, true} {
		t.Run(map[bool]string{false: "per host", true: "per model"}[byModel], func(t *testing.T) {
			clk := autoClock()
			opts := []Option{WithClock(clk), WithJitter(0)}
			if byModel {
				opts = append(opts, WithKeyByModel())
			}
			rt := New(nil, opts...)
			defer rt.CloseIdleConnections()
			assert.Equal(t, http.StatusTooManyRequests, postModel(t, rt, srv.URL, "busy").StatusCode)
			assert.Equal(t, http.StatusOK, postModel(t, rt, srv.URL, "idle").StatusCode)
			var keys []string
			for _, s := range rt.Stats() {
				keys = append(keys, s.Key)
			}
			host := strings.TrimPrefix(srv.URL, "http://")
			if byModel {
				assert.Empty(t, clk.Sleeps(), "the other model is not held")
				assert.Equal(t, []string{"http://" + host + "#busy", "http://" + host + "#idle"}, keys)
			} else {
				assert.Equal(t, []time.Duration{30 * time.Second}, clk.Sleeps(), "keyed by host, the 429 holds every model")
				assert.Equal(t, []string{"http://" + host}, keys)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range *bodies {
		assert.True(t, strings.HasPrefix(b, `{"messages":`), "the body reached the server whole: %q", b)
	}
}

// Client-side limits apply per model too.
func TestKeyByModelLimitsEachModel(t *testing.T) {
	srv, _, _ := modelServer(t)
	clk := autoClock()
	rt := New(nil, WithClock(clk), WithKeyByModel(), WithRateLimit(Limits{RequestsPerMinute: 60}))
	defer rt.CloseIdleConnections()
	postModel(t, rt, srv.URL, "a")
	postModel(t, rt, srv.URL, "b")
	postModel(t, rt, srv.URL, "a")
	assert.Equal(t, []time.Duration{time.Second}, clk.Sleeps(), "only the second request for model a waited")
}

// FuzzModelOf checks the model read from a body, in any chunking, against
// encoding/json, and that ModelOf never fails.
func FuzzModelOf(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-5-mini","messages":[]}`, `{"messages":[{"model":"x"}],"model":"claude"}`,
		`{"model":"a\"b"}`, `{"model":null}`, `{"model":`, `["model","x"]`, ` {"model" : "m" }`,
	} {
		f.Add([]byte(s), uint8(1))
	}
	f.Fuzz(func(t *testing.T, body []byte, chunk uint8) {
		req, _ := http.NewRequest(http.MethodPost, "https://api.test/v1/models/p:x", bytes.NewReader(body))
		ModelOf(req)
		got := scanAll(scanModel, string(body), int(chunk)+1)
		if !json.Valid(body) || bytes.Count(body, []byte(`"model"`)) > 1 || bytes.ContainsRune(body, '\\') {
			return
		}
		var top map[string]json.RawMessage
		if json.Unmarshal(body, &top) != nil {
			return
		}
		// The key exactly: the APIs read "model", where encoding/json would
		// also take "Model" for a struct field.
		raw, has := top["model"]
		var doc struct{ Model *string }
		if !has || json.Unmarshal(raw, &doc.Model) != nil || doc.Model == nil {
			if len(got) != 0 && has {
				var s string
				if json.Unmarshal([]byte(got[0][2:]), &s) == nil {
					t.Fatalf("found %q where encoding/json finds no model string", got)
				}
			}
			return
		}
		if len(got) != 1 {
			t.Fatalf("found %q, want %q", got, *doc.Model)
		}
		var s string
		if err := json.Unmarshal([]byte(got[0][2:]), &s); err != nil || s != *doc.Model {
			t.Fatalf("found %q, want %q", got[0][2:], *doc.Model)
		}
		if m := ModelOf(req); s != "" && m != s {
			t.Fatalf("ModelOf = %q, want %q", m, s)
		}
	})
}

// upstreamKey.is stands in for == on the lookup path, with a shortcut for
// keys without a custom part or a model: it must agree with == on every
// pair, those that differ only there included.
func TestUpstreamKeyIsAgreesWithEquality(t *testing.T) {
	keys := []upstreamKey{
		{},
		{scheme: "https", host: "api.test"},
		{scheme: "http", host: "api.test"},
		{scheme: "https", host: "api.test:8443"},
		{scheme: "https", host: "api.test", model: "m"},
		{scheme: "https", host: "api.test", model: "n"},
		{custom: "tenant"},
		{custom: "tenant", model: "m"},
		{custom: "other"},
		{model: "m"},
		{custom: "m"},
	}
	for _, a := range keys {
		for _, b := range keys {
			if got, want := a.is(&b), a == b; got != want {
				t.Errorf("%+v is %+v: %v, == says %v", a, b, got, want)
			}
		}
	}
}
