package retryhttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/retryhttp/retryhttp"
)

// DefaultTokenEstimator reads a copy of a JSON body through GetBody: the
// output reservation is max_tokens, the input the text the model reads plus
// a little framing per message. http.NewRequest sets GetBody for strings,
// bytes and bytes.Reader bodies, as the SDKs use.
func ExampleDefaultTokenEstimator() {
	body := `{
		"model": "claude-sonnet-4-5",
		"max_tokens": 1024,
		"system": "You are a concise assistant.",
		"messages": [
			{"role": "user", "content": "Explain exponential backoff in one paragraph."}
		]
	}`
	req, _ := http.NewRequest(http.MethodPost, "https://api.anthropic.example/v1/messages", strings.NewReader(body))

	input, output := retryhttp.DefaultTokenEstimator(req)
	fmt.Println("input:", input, "output:", output)

	// Not JSON: charged a token per 4 bytes.
	req, _ = http.NewRequest(http.MethodPost, "https://api.example/upload", strings.NewReader("name=report&format=pdf"))
	input, output = retryhttp.DefaultTokenEstimator(req)
	fmt.Println("form input:", input, "output:", output)
	// Output:
	// input: 23 output: 1024
	// form input: 6 output: 0
}

// A custom estimator usually wraps the default. This one adds the few
// hundred tokens of system prompt a provider inserts when tools are offered,
// which the request body does not show.
func ExampleWithTokenEstimator() {
	const toolPromptTokens = 350
	estimate := func(req *http.Request) (input, output int) {
		input, output = retryhttp.DefaultTokenEstimator(req)
		if req.GetBody != nil {
			// Read a copy; req.Body itself must stay untouched for sending.
			if rc, err := req.GetBody(); err == nil {
				b, _ := io.ReadAll(io.LimitReader(rc, 1<<20))
				rc.Close()
				if strings.Contains(string(b), `"tools"`) {
					input += toolPromptTokens
				}
			}
		}
		return input, output
	}
	// With token limits (WithRateLimit) set, the transport charges each
	// request what estimate returns.
	rt := retryhttp.New(nil, retryhttp.WithTokenEstimator(estimate))
	_ = &http.Client{Transport: rt}

	for _, body := range []string{
		`{"max_tokens":200,"messages":[{"role":"user","content":"What's the weather in Oslo?"}]}`,
		`{"max_tokens":200,"messages":[{"role":"user","content":"What's the weather in Oslo?"}],
		  "tools":[{"name":"weather","description":"Current weather","input_schema":{"type":"object"}}]}`,
	} {
		req, _ := http.NewRequest(http.MethodPost, "https://api.anthropic.example/v1/messages", strings.NewReader(body))
		input, output := estimate(req)
		fmt.Println("input:", input, "output:", output)
	}
	// Output:
	// input: 11 output: 200
	// input: 376 output: 200
}

// When the exact counts are known, for example from a token-counting
// endpoint, WithTokens puts them on the request's context and the estimator
// is not consulted.
func ExampleWithTokens() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/messages/count_tokens":
			fmt.Fprint(w, `{"input_tokens":1873}`)
		default:
			fmt.Fprint(w, `{"type":"message"}`)
		}
	}))
	defer srv.Close()
	client := &http.Client{Transport: retryhttp.New(nil)}
	defer client.CloseIdleConnections()

	body := `{"model":"claude-sonnet-4-5","max_tokens":512,"messages":[{"role":"user","content":"..."}]}`

	// Ask the provider for the exact input count (error handling shortened).
	resp, _ := client.Post(srv.URL+"/v1/messages/count_tokens", "application/json", strings.NewReader(body))
	var count struct {
		InputTokens int `json:"input_tokens"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&count)
	resp.Body.Close()

	// Charge the real request exactly that, and its max_tokens as output.
	ctx := retryhttp.WithTokens(context.Background(), count.InputTokens, 512)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(body))
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println("charged", count.InputTokens, "input and", 512, "output tokens; status", resp.StatusCode)
	// Output:
	// charged 1873 input and 512 output tokens; status 200
}
