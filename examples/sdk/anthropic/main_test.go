package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"go.uber.org/goleak"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/examples/sdk/internal/sdktest"
	"github.com/retryhttp/retryhttp/retrytest"
)

const testModel = "retrytest-model"

// TestMain fails the package if a test leaves goroutines behind: a retry
// loop or a response body that outlives its call would show up here.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testClient is newClient against srv, on clk, with waits that the fake
// clock passes at once and the smallest backoff.
func testClient(srv *retrytest.Server, clk *sdktest.Clock, opts ...retryhttp.Option) anthropic.Client {
	opts = append([]retryhttp.Option{
		retryhttp.WithClock(clk),
		retryhttp.WithBackoff(time.Millisecond, time.Millisecond),
		retryhttp.WithJitter(0),
	}, opts...)
	return newClient(srv.URL, "sk-ant-test", opts...)
}

func askOK(t *testing.T, client anthropic.Client) {
	t.Helper()
	msg, err := ask(context.Background(), client, testModel, "hello")
	if err != nil {
		t.Fatalf("the SDK call failed: %v", err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text != "ok" {
		t.Fatalf("the SDK decoded %+v, want one text block \"ok\"", msg.Content)
	}
}

// A 529 overloaded_error is retried by retryhttp beneath the SDK: the call
// succeeds, the provider saw exactly two attempts, both the SDK's first.
func TestOverloadedThenSuccess(t *testing.T) {
	clk := sdktest.NewClock(sdktest.Start)
	srv := sdktest.Provider(t, clk, retrytest.Anthropic, retrytest.Config{Script: retrytest.MustParseScript("529, 200")})

	askOK(t, testClient(srv, clk))

	st := srv.Stats()
	if st.Attempts != 2 {
		t.Errorf("the provider saw %d attempts, want 2", st.Attempts)
	}
	sdktest.SDKCall(t, st, 529, 200)
	sdktest.SameBody(t, st, 0)
	if got, want := clk.Sleeps(), []time.Duration{time.Millisecond}; !reflect.DeepEqual(got, want) {
		t.Errorf("waits %v, want %v (one backoff)", got, want)
	}
}

// A 429 with anthropic-ratelimit-* headers and retry-after: retryhttp waits
// as long as the provider asked before the retry, and the call succeeds.
func TestRateLimitedWaitsForRetryAfter(t *testing.T) {
	clk := sdktest.NewClock(sdktest.Start)
	srv := sdktest.Provider(t, clk, retrytest.Anthropic, retrytest.Config{RateLimit: retrytest.RateLimit{Rate: 1, Burst: 1}})

	// Another client spends the quota, then is refused: its 429 shows what
	// the SDK's first attempt will meet.
	post(t, srv)
	refused := post(t, srv)
	if refused.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the probe got %d, want 429", refused.StatusCode)
	}
	for h, want := range map[string]string{
		"anthropic-ratelimit-requests-limit":     "1",
		"anthropic-ratelimit-requests-remaining": "0",
		"anthropic-ratelimit-requests-reset":     sdktest.Start.Add(time.Second).Format(time.RFC3339),
		"retry-after":                            "1",
	} {
		if got := refused.Header.Get(h); got != want {
			t.Errorf("the 429 has %s: %q, want %q", h, got, want)
		}
	}

	askOK(t, testClient(srv, clk))

	st := srv.Stats()
	if st.Attempts != 4 {
		t.Errorf("the provider saw %d attempts, want 4 (2 from the other client, 2 from the SDK call)", st.Attempts)
	}
	sdktest.SDKCall(t, st, 429, 200)
	sdktest.SameBody(t, st, 2)
	if gap := st.Arrivals[3] - st.Arrivals[2]; gap < time.Second {
		t.Errorf("the retry came %v after the 429, earlier than its retry-after of 1s", gap)
	}
}

// After a 200 that says no requests remain, retryhttp holds the next call
// until the reset the headers name, so it never meets a 429.
func TestRateLimitHeadersPaceTheNextCall(t *testing.T) {
	clk := sdktest.NewClock(sdktest.Start)
	srv := sdktest.Provider(t, clk, retrytest.Anthropic, retrytest.Config{RateLimit: retrytest.RateLimit{Rate: 1, Burst: 1}})
	client := testClient(srv, clk)

	askOK(t, client)
	askOK(t, client)

	st := srv.Stats()
	if want := map[int]int{200: 2}; !reflect.DeepEqual(st.Statuses, want) {
		t.Errorf("the provider answered %v, want %v", st.Statuses, want)
	}
	if gap := st.Arrivals[1] - st.Arrivals[0]; gap < time.Second {
		t.Errorf("the second call came %v after the first, before the reset 1s later", gap)
	}
}

// A 400 invalid_request_error is not retried: it reaches the caller as the
// SDK's own typed error after exactly one attempt, and nothing waited.
func TestBadRequestIsTheSDKsErrorAfterOneAttempt(t *testing.T) {
	clk := sdktest.NewClock(sdktest.Start)
	srv := sdktest.Provider(t, clk, retrytest.Anthropic, retrytest.Config{Script: retrytest.MustParseScript("400, 200")})

	_, err := ask(context.Background(), testClient(srv, clk), testModel, "hello")

	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %#v, want an *anthropic.Error", err)
	}
	if apiErr.StatusCode != http.StatusBadRequest || apiErr.Type() != "invalid_request_error" {
		t.Errorf("the SDK error is %d %q, want 400 invalid_request_error", apiErr.StatusCode, apiErr.Type())
	}
	if apiErr.RequestID != "req_retrytest_1" || apiErr.Message == "" {
		t.Errorf("the SDK error has request id %q and message %q: the body or headers did not reach it", apiErr.RequestID, apiErr.Message)
	}
	st := srv.Stats()
	if st.Attempts != 1 {
		t.Errorf("the provider saw %d attempts, want exactly 1", st.Attempts)
	}
	sdktest.SDKCall(t, st, 400)
	if s := clk.Sleeps(); len(s) != 0 {
		t.Errorf("waited %v before failing, want no wait", s)
	}
}

// When the overload outlasts the retries, the last 529 reaches the SDK with
// its body intact, as the SDK's overloaded_error.
func TestOverloadOutlastingRetriesIsTheSDKsError(t *testing.T) {
	clk := sdktest.NewClock(sdktest.Start)
	srv := sdktest.Provider(t, clk, retrytest.Anthropic, retrytest.Config{Script: retrytest.MustParseScript("529*3, 200")})

	_, err := ask(context.Background(), testClient(srv, clk, retryhttp.WithMaxRetries(2)), testModel, "hello")

	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %#v, want an *anthropic.Error", err)
	}
	if apiErr.StatusCode != 529 || apiErr.Type() != "overloaded_error" {
		t.Errorf("the SDK error is %d %q, want 529 overloaded_error", apiErr.StatusCode, apiErr.Type())
	}
	st := srv.Stats()
	if st.Attempts != 3 {
		t.Errorf("the provider saw %d attempts, want 3 (1 + WithMaxRetries(2))", st.Attempts)
	}
	sdktest.SDKCall(t, st, 529, 529, 529)
	sdktest.SameBody(t, st, 0)
}

// The program prints the answer after retrying a 529.
func TestRunPrintsTheAnswer(t *testing.T) {
	clk := sdktest.NewClock(sdktest.Start)
	srv := sdktest.Provider(t, clk, retrytest.Anthropic, retrytest.Config{Script: retrytest.MustParseScript("529, 200")})
	env := map[string]string{"ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_BASE_URL": srv.URL}
	var stdout, stderr bytes.Buffer

	code := run(context.Background(), []string{"hello"}, sdktest.Getenv(env), &stdout, &stderr, retryhttp.WithClock(clk))

	if code != 0 || stdout.String() != "ok\n" {
		t.Errorf("run = %d with stdout %q, want 0 and \"ok\\n\"; stderr:\n%s", code, stdout.String(), stderr.String())
	}
	if st := srv.Stats(); st.Attempts != 2 {
		t.Errorf("the provider saw %d attempts, want 2", st.Attempts)
	}
}

// The program reports an API error and exits 1.
func TestRunReportsAnAPIError(t *testing.T) {
	clk := sdktest.NewClock(sdktest.Start)
	srv := sdktest.Provider(t, clk, retrytest.Anthropic, retrytest.Config{Script: retrytest.MustParseScript("400")})
	env := map[string]string{"ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_BASE_URL": srv.URL}
	var stdout, stderr bytes.Buffer

	code := run(context.Background(), nil, sdktest.Getenv(env), &stdout, &stderr, retryhttp.WithClock(clk))

	if code != 1 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "400 (invalid_request_error)") {
		t.Errorf("run = %d, stdout %q, stderr %q; want 1, nothing, and the API's error", code, stdout.String(), stderr.String())
	}
}

// Without a key the program says what to set and exits 0. It returns before
// it makes a client, so no request can leave for the real API.
func TestRunWithoutAKey(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), nil, sdktest.Getenv(nil), &stdout, &stderr)
	if code != 0 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "ANTHROPIC_API_KEY is not set") {
		t.Errorf("run = %d, stdout %q, stderr %q; want 0, nothing, and a message naming ANTHROPIC_API_KEY", code, stdout.String(), stderr.String())
	}
}

// post sends a request to srv as another client would, without retryhttp,
// and returns its response with the body closed.
func post(t *testing.T, srv *retrytest.Server) *http.Response {
	t.Helper()
	resp, err := srv.Client().Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(`{"other":"client"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}
