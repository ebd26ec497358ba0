package retryhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

// A streamed answer that opens with Anthropic's overloaded_error (a 200
// whose first event is the error) is retried before any byte reaches the
// caller, who reads the next attempt's stream as it came. The check is on
// by default; WithFirstEventCheck tunes its bounds, and FirstEventCheck(0,
// 0) on a request's context turns it off for that request.
func ExampleWithFirstEventCheck() {
	srv := retrytest.NewServer(retrytest.Config{
		Family: retrytest.Anthropic,
		Script: retrytest.MustParseScript("stream:overloaded_error, stream"),
	})
	defer srv.Close()
	rt := retryhttp.New(srv.Client().Transport,
		retryhttp.WithFirstEventCheck(2*time.Second, 64<<10), // the defaults
		retryhttp.WithClock(retrytest.NewClock()),            // the backoff passes at once
	)
	client := &http.Client{Transport: rt}

	resp, err := client.Post(srv.URL+"/v1/messages", "application/json",
		strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hi"}]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	stream, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, "after", retryhttp.Attempts(resp), "attempts")
	fmt.Println(strings.SplitN(string(stream), "\n", 2)[0])
	// Output:
	// 200 after 2 attempts
	// event: message_start
}

// FirstEventCheck sets the check for one request: here off, so a stream
// that opens with an error is handed over as it came, and the caller (its
// SDK) sees the error event. A longer timeout suits a model that thinks
// before its first event.
func ExampleFirstEventCheck() {
	srv := retrytest.NewServer(retrytest.Config{Family: retrytest.Anthropic, Script: retrytest.MustParseScript("stream:overloaded_error")})
	defer srv.Close()
	client := &http.Client{Transport: retryhttp.New(srv.Client().Transport)}

	ctx := retryhttp.ContextWithOptions(context.Background(), retryhttp.FirstEventCheck(0, 0))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(`{"stream":true}`))
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	stream, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, "after", retryhttp.Attempts(resp), "attempt")
	fmt.Println(strings.SplitN(string(stream), "\n", 2)[0])
	// Output:
	// 200 after 1 attempt
	// event: error
}

// With WithKeyByModel, each model on a host is an upstream of its own: a
// 429 on one model holds that model, not the others, and client-side
// limits apply to each model.
func ExampleWithKeyByModel() {
	srv := retrytest.NewServer(retrytest.Config{Family: retrytest.OpenAI})
	defer srv.Close()
	rt := retryhttp.New(srv.Client().Transport, retryhttp.WithKeyByModel())
	client := &http.Client{Transport: rt}
	for _, model := range []string{"gpt-5-mini", "gpt-5", "gpt-5-mini"} {
		resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"messages":[{"role":"user","content":"Hi"}],"model":"`+model+`"}`))
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
	}
	for _, s := range rt.Stats() {
		fmt.Println(strings.TrimPrefix(s.Key, srv.URL), s.Requests)
	}
	// Output:
	// #gpt-5 1
	// #gpt-5-mini 2
}

// Output tokens are booked from max_tokens when a request is admitted and
// settled by the usage the response reports, as the providers count them:
// here each answer uses 5 of the 1000 booked, so the next request need not
// wait for the 995 nobody used.
func ExampleWithRateLimit_usage() {
	srv := retrytest.NewServer(retrytest.Config{Family: retrytest.Anthropic, Script: []retrytest.Step{
		{Stream: &retrytest.Stream{OutputTokens: 5}},
		{Stream: &retrytest.Stream{OutputTokens: 5}},
	}})
	defer srv.Close()
	clock := retrytest.NewClock()
	rt := retryhttp.New(srv.Client().Transport, retryhttp.WithClock(clock),
		retryhttp.WithRateLimit(retryhttp.Limits{OutputTokensPerMinute: 60_000}), // 1,000 a second
	)
	client := &http.Client{Transport: rt}
	for range 2 {
		resp, err := client.Post(srv.URL+"/v1/messages", "application/json",
			strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":1000,"stream":true,"messages":[{"role":"user","content":"Hi"}]}`))
		if err != nil {
			fmt.Println(err)
			return
		}
		io.Copy(io.Discard, resp.Body) // the usage is read as the stream passes
		resp.Body.Close()
	}
	fmt.Println("waits:", clock.Waits())
	// Output:
	// waits: [5ms]
}
