package retryhttp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

// WithRateLimit keeps requests under a provider's published limits before
// they leave, instead of finding the limit through 429s. 600 requests a
// minute is 10 a second: one second's worth (10 requests) may go at once,
// then one every 100ms. The fake clock records the waits instead of
// sleeping through them.
func ExampleWithRateLimit() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
	}))
	defer srv.Close()

	clock := retrytest.NewClock()
	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithRateLimit(retryhttp.Limits{RequestsPerMinute: 600}),
		retryhttp.WithClock(clock))}
	defer client.CloseIdleConnections()

	for i := 0; i < 13; i++ {
		resp, err := client.Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
	}
	fmt.Println("requests served:", calls.Load())
	fmt.Println("waits before sending:", clock.Waits()) // none for the first 10
	// Output:
	// requests served: 13
	// waits before sending: [100ms 100ms 100ms]
}

// WithRateLimitBurst sets how much of a limit may go at once. A tenth of a
// second's worth of 600 requests a minute is one request: no bursts at all,
// the requests reach this loopback server 100ms apart. (The opposite use: providers whose token buckets
// hold a whole minute's worth, such as Anthropic's, are matched with
// WithRateLimitBurst(time.Minute); see the Limits example.)
func ExampleWithRateLimitBurst() {
	var mu sync.Mutex
	var arrivals []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
	}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithRateLimit(retryhttp.Limits{RequestsPerMinute: 600}),
		retryhttp.WithRateLimitBurst(100*time.Millisecond))}
	defer client.CloseIdleConnections()

	for i := 0; i < 5; i++ {
		resp, err := client.Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
	}

	mu.Lock()
	defer mu.Unlock()
	// Unlimited, the five would arrive within a few milliseconds. Paced,
	// they are 100ms apart; the check allows 90ms on average, as the first
	// request also pays for opening the connection.
	spread := arrivals[len(arrivals)-1].Sub(arrivals[0])
	fmt.Println("requests:", len(arrivals))
	fmt.Println("about 100ms apart:", spread >= time.Duration(len(arrivals)-1)*90*time.Millisecond)
	// Output:
	// requests: 5
	// about 100ms apart: true
}

// Limits can count tokens too. Each request is charged its input tokens
// (estimated from the body by DefaultTokenEstimator, or set exactly with
// WithTokens) and its max_tokens as output, which is what the providers
// reserve. Here the output limit binds: 8,000 output tokens a minute pays
// for two requests of max_tokens 4,000 at once, and the third waits the 30s
// the bucket takes to refill 4,000. WithRateLimitBurst(time.Minute) matches a
// provider whose bucket holds a whole minute's worth; with the default of one
// second's worth (133 tokens) even the first request would be spread out.
func ExampleLimits() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		fmt.Fprint(w, `{"type":"message"}`)
	}))
	defer srv.Close()

	clock := retrytest.NewClock()
	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithRateLimit(retryhttp.Limits{
			RequestsPerMinute:     50,
			InputTokensPerMinute:  30_000,
			OutputTokensPerMinute: 8_000,
		}),
		retryhttp.WithRateLimitBurst(time.Minute),
		retryhttp.WithClock(clock))}
	defer client.CloseIdleConnections()

	body := `{"model":"claude-sonnet-4-5","max_tokens":4000,"messages":[{"role":"user","content":"Summarise this report."}]}`
	for i := 0; i < 3; i++ {
		resp, err := client.Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(body))
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
	}
	fmt.Println("requests served:", calls.Load())
	fmt.Println("waits before sending:", clock.Waits()[0].Round(time.Millisecond))
	// Output:
	// requests served: 3
	// waits before sending: 30s
}

// WithMaxQueueWait bounds how long a request may wait for its turn. A
// request that could not be admitted in time is not left to wait and fail:
// it fails at once, before anything is sent, with a retryable *Error that
// says when trying again is worth it. Here a free tier allows 2 requests a
// minute, so the second has to wait 30s, more than the 5s allowed.
func ExampleWithMaxQueueWait() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
	}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithRateLimit(retryhttp.Limits{RequestsPerMinute: 2}),
		retryhttp.WithMaxQueueWait(5*time.Second))}
	defer client.CloseIdleConnections()

	start := time.Now()
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()

	_, err = client.Get(srv.URL)
	returnedAt := time.Now()
	fmt.Println("rate limited:", errors.Is(err, retryhttp.ErrRateLimited))
	var e *retryhttp.Error
	if errors.As(err, &e) {
		fmt.Println("failed at once:", returnedAt.Sub(start) < time.Second)
		fmt.Println("retryable:", e.Retryable)
		fmt.Println("attempts:", e.Attempts)
		fmt.Println("retry in:", e.RetryAt.Sub(start).Round(time.Second))
		fmt.Println("for users:", e.UserMessage())
	}
	fmt.Println("requests served:", calls.Load())
	// Output:
	// rate limited: true
	// failed at once: true
	// retryable: true
	// attempts: 0
	// retry in: 30s
	// for users: The service is receiving too many requests right now. Please try again in about 30 seconds.
	// requests served: 1
}

// WithMaxConcurrency caps the requests in flight at once, for an API that
// limits concurrent requests rather than (or as well as) their rate. Ten
// goroutines share a cap of two; the server never sees more than two at a
// time. A slot is held until the response body is closed.
func ExampleWithMaxConcurrency() {
	var inFlight, peak, served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(20 * time.Millisecond) // a slow endpoint, so requests overlap
		inFlight.Add(-1)
		served.Add(1)
	}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithMaxConcurrency(2))}
	defer client.CloseIdleConnections()

	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get(srv.URL)
			if err != nil {
				fmt.Println(err)
				return
			}
			resp.Body.Close() // frees the slot
		}()
	}
	wg.Wait()
	fmt.Println("requests served:", served.Load())
	fmt.Println("most in flight at once:", peak.Load())
	// Output:
	// requests served: 10
	// most in flight at once: 2
}

// WithKeyFunc groups requests by what the provider counts against: here the
// API key, when several keys with their own quotas share one host. A 429
// with Retry-After pauses every request of that key (so they do not each
// find the limit again), but not those of the other key. The key function
// keeps the host in the key, so one API key used on two hosts is still two
// upstreams.
func ExampleWithKeyFunc() {
	var mu sync.Mutex
	served := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Authorization")
		mu.Lock()
		served[key]++
		mu.Unlock()
		if key == "Bearer key-A" {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()

	perAPIKey := func(r *http.Request) string {
		return r.URL.Host + " " + r.Header.Get("Authorization")
	}
	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithKeyFunc(perAPIKey),
		retryhttp.WithMaxRetries(0),              // show the 429 instead of waiting it out
		retryhttp.WithMaxQueueWait(time.Second))} // and do not queue behind a 30s hold
	defer client.CloseIdleConnections()

	get := func(apiKey string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+apiKey)
		return client.Do(req)
	}

	resp, err := get("key-A")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println("key A:", resp.StatusCode)

	start := time.Now()
	resp, err = get("key-B")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println("key B:", resp.StatusCode, "went at once:", time.Since(start) < time.Second)

	_, err = get("key-A")
	var e *retryhttp.Error
	if errors.As(err, &e) && errors.Is(err, retryhttp.ErrRateLimited) {
		fmt.Println("key A again: held, not sent:", e.UserMessage())
	}

	mu.Lock()
	fmt.Println("served: key A", served["Bearer key-A"], "key B", served["Bearer key-B"])
	mu.Unlock()
	// Output:
	// key A: 429
	// key B: 200 went at once: true
	// key A again: held, not sent: The service is receiving too many requests right now. Please try again in about 30 seconds.
	// served: key A 1 key B 1
}

// ParseRateLimits reads the rate-limit headers of the common families into
// one form: per dimension, the limit, what remains and when it resets. The
// transport uses it to pace requests; it is exported for dashboards, logs
// and schedulers of one's own. Resets are shown relative to now, whatever
// the header's form: a Go duration (OpenAI), an RFC 3339 time (Anthropic),
// Unix seconds (GitHub) or delay-seconds (IETF).
func ExampleParseRateLimits() {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	header := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	families := []struct {
		name string
		h    http.Header
	}{
		{"OpenAI", header(
			"x-ratelimit-limit-requests", "500",
			"x-ratelimit-remaining-requests", "499",
			"x-ratelimit-reset-requests", "120ms",
			"x-ratelimit-limit-tokens", "30000",
			"x-ratelimit-remaining-tokens", "29000",
			"x-ratelimit-reset-tokens", "2s",
		)},
		{"Anthropic", header(
			"anthropic-ratelimit-requests-limit", "50",
			"anthropic-ratelimit-requests-remaining", "49",
			"anthropic-ratelimit-requests-reset", "2026-11-30T12:00:01Z",
			"anthropic-ratelimit-input-tokens-limit", "30000",
			"anthropic-ratelimit-input-tokens-remaining", "28000",
			"anthropic-ratelimit-input-tokens-reset", "2026-11-30T12:00:04Z",
			"anthropic-ratelimit-output-tokens-limit", "8000",
			"anthropic-ratelimit-output-tokens-remaining", "7000",
			"anthropic-ratelimit-output-tokens-reset", "2026-11-30T12:00:08Z",
		)},
		{"GitHub", header(
			"x-ratelimit-limit", "5000",
			"x-ratelimit-remaining", "4999",
			"x-ratelimit-used", "1",
			"x-ratelimit-reset", fmt.Sprint(now.Add(time.Hour).Unix()),
			"x-ratelimit-resource", "core",
		)},
		{"IETF", header(
			"RateLimit-Policy", `"default";q=100;w=60`,
			"RateLimit", `"default";r=50;t=30`,
		)},
	}
	dims := []retryhttp.Dimension{retryhttp.Requests, retryhttp.Tokens, retryhttp.InputTokens, retryhttp.OutputTokens}
	for _, f := range families {
		l := retryhttp.ParseRateLimits(f.h, now)
		fmt.Printf("%s (token bucket: %t, window: %v)\n", f.name, l.Replenishing, l.Window)
		for _, d := range dims {
			if q := l.Quota(d); q.Known() {
				fmt.Printf("  %s: limit %d, remaining %d, resets in %v\n", d, q.Limit, q.Remaining, q.Reset.Sub(now))
			}
		}
	}
	none := retryhttp.ParseRateLimits(header("Content-Type", "application/json"), now)
	fmt.Println("no rate-limit headers, known:", none.Known())
	// Output:
	// OpenAI (token bucket: true, window: 0s)
	//   requests: limit 500, remaining 499, resets in 120ms
	//   tokens: limit 30000, remaining 29000, resets in 2s
	// Anthropic (token bucket: true, window: 0s)
	//   requests: limit 50, remaining 49, resets in 1s
	//   input-tokens: limit 30000, remaining 28000, resets in 4s
	//   output-tokens: limit 8000, remaining 7000, resets in 8s
	// GitHub (token bucket: false, window: 0s)
	//   requests: limit 5000, remaining 4999, resets in 1h0m0s
	// IETF (token bucket: false, window: 1m0s)
	//   requests: limit 100, remaining 50, resets in 30s
	// no rate-limit headers, known: false
}

// RateLimits.Quota picks a dimension by name, so code can ask which limit
// ran out and until when; here Anthropic's input-token quota is spent while
// requests remain. A Quota that is Exhausted is what makes the transport
// hold new requests on that upstream until its reset.
func ExampleRateLimits_Quota() {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	h := http.Header{}
	h.Set("anthropic-ratelimit-requests-limit", "50")
	h.Set("anthropic-ratelimit-requests-remaining", "12")
	h.Set("anthropic-ratelimit-requests-reset", "2026-11-30T12:00:45Z")
	h.Set("anthropic-ratelimit-input-tokens-limit", "30000")
	h.Set("anthropic-ratelimit-input-tokens-remaining", "0")
	h.Set("anthropic-ratelimit-input-tokens-reset", "2026-11-30T12:00:20Z")

	l := retryhttp.ParseRateLimits(h, now)
	for _, d := range []retryhttp.Dimension{retryhttp.Requests, retryhttp.Tokens, retryhttp.InputTokens, retryhttp.OutputTokens} {
		q := l.Quota(d)
		switch {
		case !q.Known():
			fmt.Printf("%s: not reported\n", d)
		case q.Exhausted():
			fmt.Printf("%s: exhausted until %s (in %v)\n", d, q.Reset.Format(time.TimeOnly), q.Reset.Sub(now))
		default:
			fmt.Printf("%s: %d of %d left\n", d, q.Remaining, q.Limit)
		}
	}
	// Output:
	// requests: 12 of 50 left
	// tokens: not reported
	// input-tokens: exhausted until 12:00:20 (in 20s)
	// output-tokens: not reported
}

// A request that cannot be admitted in time shows up as an error that
// matches ErrRateLimited, with no attempt sent. Handling it is a matter of
// trying again after RetryAt, or telling the user when. The caller's
// deadline bounds the wait as WithMaxQueueWait does: here a 1 request a
// minute limit cannot admit a second request within a 10s deadline.
func ExampleWithMaxQueueWait_deadline() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithRateLimit(retryhttp.Limits{RequestsPerMinute: 1}))}
	defer client.CloseIdleConnections()

	for i := 1; i <= 2; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := client.Do(req)
		cancel()
		var e *retryhttp.Error
		switch {
		case err == nil:
			resp.Body.Close()
			fmt.Printf("request %d: %d\n", i, resp.StatusCode)
		case errors.Is(err, retryhttp.ErrRateLimited) && errors.As(err, &e):
			fmt.Printf("request %d: rate limited locally after %d attempts, retry in about %v\n",
				i, e.Attempts, time.Until(e.RetryAt).Round(10*time.Second))
		default:
			fmt.Println(err)
		}
	}
	// Output:
	// request 1: 200
	// request 2: rate limited locally after 0 attempts, retry in about 1m0s
}
