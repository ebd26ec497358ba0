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

	"github.com/openai/openai-go/v3"
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
func testClient(srv *retrytest.Server, clk *sdktest.Clock, opts ...retryhttp.Option) openai.Client {
	opts = append([]retryhttp.Option{
		retryhttp.WithClock(clk),
		retryhttp.WithBackoff(time.Millisecond, time.Millisecond),
		retryhttp.WithJitter(0),
	}, opts...)
	return newClient(srv.URL+"/v1", "sk-test", opts...)
}

func askOK(t *testing.T, client openai.Client) {
	t.Helper()
	completion, err := ask(context.Background(), client, testModel, "hello")
	if err != nil {
		t.Fatalf("the SDK call failed: %v", err)
	}
	if len(completion.Choices) != 1 || completion.Choices[0].Message.Content != "ok" {
		t.Fatalf("the SDK decoded %+v, want one choice \"ok\"", completion.Choices)
	}
}

// A 429 with x-ratelimit-* headers and only retry-after-ms to say when:
// retryhttp reads it, waits that long, and the call succeeds on its second
// attempt.
func TestRateLimitedWaitsForRetryAfterMs(t *testing.T) {
	clk := sdktest.NewClock(sdktest.Start)
	srv := sdktest.Provider(t, clk, retrytest.OpenAI, retrytest.Config{
		RateLimit:  retrytest.RateLimit{Rate: 50, Burst: 1}, // one request per 20ms
		RetryAfter: retrytest.RetryAfterMillis,
	})

	// Another client spends the quota, then is refused: its 429 shows what
	// the SDK's first attempt will meet.
	post(t, srv)
	refused := post(t, srv)
	if refused.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the probe got %d, want 429", refused.StatusCode)
	}
	for h, want := range map[string]string{
		"x-ratelimit-limit-requests":     "1",
		"x-ratelimit-remaining-requests": "0",
		"x-ratelimit-reset-requests":     "20ms",
		"retry-after-ms":                 "20",
		"retry-after":                    "",
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
	if gap := st.Arrivals[3] - st.Arrivals[2]; gap < 20*time.Millisecond {
		t.Errorf("the retry came %v after the 429, earlier than its retry-after-ms of 20", gap)
	}
}

// A 429 whose only word on when to come back is retry-after-ms, far longer
// than the backoff: the retry waits for it, so retryhttp read the header.
func TestRetryAfterMsAloneSetsTheWait(t *testing.T) {
	clk := sdktest.NewClock(sdktest.Start)
	srv := sdktest.Provider(t, clk, retrytest.OpenAI, retrytest.Config{
		RetryAfter: retrytest.RetryAfterMillis,
		Script:     retrytest.MustParseScript("429@250ms, 200"),
	})

	askOK(t, testClient(srv, clk))

	st := srv.Stats()
	sdktest.SDKCall(t, st, 429, 200)
	sdktest.SameBody(t, st, 0)
	if gap := st.Arrivals[1] - st.Arrivals[0]; gap < 250*time.Millisecond {
		t.Errorf("the retry came %v after the 429, earlier than its retry-after-ms of 250", gap)
	}
}

// After a 200 that says no requests remain, retryhttp holds the next call
// until the reset the headers name, so it never meets a 429.
func TestRateLimitHeadersPaceTheNextCall(t *testing.T) {
	clk := sdktest.NewClock(sdktest.Start)
	srv := sdktest.Provider(t, clk, retrytest.OpenAI, retrytest.Config{RateLimit: retrytest.RateLimit{Rate: 50, Burst: 1}})
	client := testClient(srv, clk)

	askOK(t, client)
	askOK(t, client)

	st := srv.Stats()
	if want := map[int]int{200: 2}; !reflect.DeepEqual(st.Statuses, want) {
		t.Errorf("the provider answered %v, want %v", st.Statuses, want)
	}
	if gap := st.Arrivals[1] - st.Arrivals[0]; gap < 20*time.Millisecond {
		t.Errorf("the second call came %v after the first, before the reset 20ms later", gap)
	}
}

// A 503 and a 500, each with OpenAI's server_error body, are retried beneath
// the SDK; the call succeeds on the third attempt with the same body.
func TestServerErrorsThenSuccess(t *testing.T) {
	clk := sdktest.NewClock(sdktest.Start)
	srv := sdktest.Provider(t, clk, retrytest.OpenAI, retrytest.Config{Script: retrytest.MustParseScript("503, 500, 200")})

	askOK(t, testClient(srv, clk))

	st := srv.Stats()
	if st.Attempts != 3 {
		t.Errorf("the provider saw %d attempts, want 3", st.Attempts)
	}
	sdktest.SDKCall(t, st, 503, 500, 200)
	sdktest.SameBody(t, st, 0)
	if got, want := clk.Sleeps(), []time.Duration{time.Millisecond, time.Millisecond}; !reflect.DeepEqual(got, want) {
		t.Errorf("waits %v, want %v (two backoffs)", got, want)
	}
}

// A 400 is not retried: it reaches the caller as the SDK's own typed error
// after exactly one attempt, and nothing waited.
func TestBadRequestIsTheSDKsErrorAfterOneAttempt(t *testing.T) {
	clk := sdktest.NewClock(sdktest.Start)
	srv := sdktest.Provider(t, clk, retrytest.OpenAI, retrytest.Config{Script: retrytest.MustParseScript("400, 200")})

	_, err := ask(context.Background(), testClient(srv, clk), testModel, "hello")

	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %#v, want an *openai.Error", err)
	}
	if apiErr.StatusCode != http.StatusBadRequest || apiErr.Type != "invalid_request_error" || apiErr.Message == "" {
		t.Errorf("the SDK error is %d %q %q, want 400 invalid_request_error with a message", apiErr.StatusCode, apiErr.Type, apiErr.Message)
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

// A 429 insufficient_quota is a billing state, not a rate limit: no wait
// makes it pass, so it reaches the SDK after one attempt.
func TestInsufficientQuotaIsNotRetried(t *testing.T) {
	clk := sdktest.NewClock(sdktest.Start)
	srv := sdktest.Provider(t, clk, retrytest.OpenAI, retrytest.Config{Script: retrytest.MustParseScript("429:insufficient_quota, 200")})

	_, err := ask(context.Background(), testClient(srv, clk), testModel, "hello")

	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %#v, want an *openai.Error", err)
	}
	if apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "insufficient_quota" {
		t.Errorf("the SDK error is %d code %q, want 429 insufficient_quota", apiErr.StatusCode, apiErr.Code)
	}
	if st := srv.Stats(); st.Attempts != 1 {
		t.Errorf("the provider saw %d attempts, want exactly 1", st.Attempts)
	}
}

// When the outage outlasts the retries, the last 503 reaches the SDK with
// its body intact, as the SDK's error.
func TestOutageOutlastingRetriesIsTheSDKsError(t *testing.T) {
	clk := sdktest.NewClock(sdktest.Start)
	srv := sdktest.Provider(t, clk, retrytest.OpenAI, retrytest.Config{Script: retrytest.MustParseScript("503*3, 200")})

	_, err := ask(context.Background(), testClient(srv, clk, retryhttp.WithMaxRetries(2)), testModel, "hello")

	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %#v, want an *openai.Error", err)
	}
	if apiErr.StatusCode != http.StatusServiceUnavailable || apiErr.Type != "server_error" {
		t.Errorf("the SDK error is %d %q, want 503 server_error", apiErr.StatusCode, apiErr.Type)
	}
	st := srv.Stats()
	if st.Attempts != 3 {
		t.Errorf("the provider saw %d attempts, want 3 (1 + WithMaxRetries(2))", st.Attempts)
	}
	sdktest.SDKCall(t, st, 503, 503, 503)
	sdktest.SameBody(t, st, 0)
}

// The program prints the answer after retrying a 503.
func TestRunPrintsTheAnswer(t *testing.T) {
	clk := sdktest.NewClock(sdktest.Start)
	srv := sdktest.Provider(t, clk, retrytest.OpenAI, retrytest.Config{Script: retrytest.MustParseScript("503, 200")})
	env := map[string]string{"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": srv.URL + "/v1"}
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
	srv := sdktest.Provider(t, clk, retrytest.OpenAI, retrytest.Config{Script: retrytest.MustParseScript("400")})
	env := map[string]string{"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": srv.URL + "/v1"}
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
	if code != 0 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "OPENAI_API_KEY is not set") {
		t.Errorf("run = %d, stdout %q, stderr %q; want 0, nothing, and a message naming OPENAI_API_KEY", code, stdout.String(), stderr.String())
	}
}

// post sends a request to srv as another client would, without retryhttp,
// and returns its response with the body closed.
func post(t *testing.T, srv *retrytest.Server) *http.Response {
	t.Helper()
	resp, err := srv.Client().Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"other":"client"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}
