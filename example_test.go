package retryhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

// The examples talk to loopback test servers that fail on purpose. Where the
// example is not about the backoff itself, they shorten it with
// WithBackoff(time.Millisecond, 10*time.Millisecond) and WithJitter(0) so
// they run in milliseconds; real programs keep the defaults (1s doubling to
// 32s, plus up to 1s of jitter).

// This is the pattern for vendor SDKs (Anthropic, OpenAI, Stripe, ...): build
// one *http.Client whose transport retries, hand it to the SDK, and turn the
// SDK's own retries off so the two do not multiply (6 × 6 attempts).
func Example() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(retryhttp.StatusOverloaded) // 529: the API is overloaded
			return
		}
		fmt.Fprint(w, `{"type":"message"}`)
	}))
	defer srv.Close()

	// In production this is simply retryhttp.New(nil).
	httpClient := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithBackoff(time.Millisecond, 10*time.Millisecond), retryhttp.WithJitter(0))}

	// Hand httpClient to the SDK with its retries off, for example
	//
	//	client := sdk.NewClient(option.WithHTTPClient(httpClient), option.WithMaxRetries(0))
	//
	// Every call the SDK makes now goes through retryhttp, as this one does:
	resp, err := httpClient.Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(`{"max_tokens":16}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body), "attempts:", retryhttp.Attempts(resp))
	// Output: 200 {"type":"message"} attempts: 2
}

// New wraps a base transport (nil: a pooled one of its own) and is used as
// the Transport of an ordinary http.Client.
func ExampleNew() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			http.Error(w, "try later", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithBackoff(time.Millisecond, 10*time.Millisecond), retryhttp.WithJitter(0))}

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s after %d attempts\n", resp.StatusCode, body, retryhttp.Attempts(resp))
	// Output: 200 hello after 3 attempts
}

// RoundTrip can be called directly. When retries end on a transport error,
// the error is a *retryhttp.Error that says how many attempts were made.
func ExampleRetryTransport_RoundTrip() {
	// A server that is gone: every connection is refused.
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()

	rt := retryhttp.New(nil, retryhttp.WithMaxRetries(2),
		retryhttp.WithBackoff(time.Millisecond, 10*time.Millisecond), retryhttp.WithJitter(0))
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	resp, err := rt.RoundTrip(req)

	var e *retryhttp.Error
	if errors.As(err, &e) {
		fmt.Println("response:", resp != nil)
		fmt.Println("attempts:", e.Attempts)
		fmt.Println("retryable later:", e.Retryable)
		fmt.Println("stopped:", e.StopReason)
	}
	// Output:
	// response: false
	// attempts: 3
	// retryable later: true
	// stopped: retries exhausted
}

// WithMaxRetries bounds the retries after the first attempt. When they run
// out on a response, that last response is returned as it is, not an error.
func ExampleWithMaxRetries() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithMaxRetries(2),
		retryhttp.WithBackoff(time.Millisecond, 10*time.Millisecond), retryhttp.WithJitter(0))}

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body) // the last response's body is intact
	fmt.Printf("%d %q after %d attempts\n", resp.StatusCode, body, retryhttp.Attempts(resp))
	fmt.Println("server saw", calls.Load(), "requests")
	// Output:
	// 503 "down for maintenance\n" after 3 attempts
	// server saw 3 requests
}

// WithBackoff sets the first wait and its cap: the waits double from base
// until they reach max. The OnRetry hook shows the schedule; WithJitter(0)
// keeps it exact.
func ExampleWithBackoff() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 4 {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithBackoff(2*time.Millisecond, 5*time.Millisecond),
		retryhttp.WithJitter(0),
		retryhttp.WithHooks(retryhttp.Hooks{OnRetry: func(e retryhttp.Event) {
			fmt.Printf("retry %d in %v\n", e.Attempt, e.Wait)
		}}))}

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", retryhttp.Attempts(resp), "attempts")
	// Output:
	// retry 1 in 2ms
	// retry 2 in 4ms
	// retry 3 in 5ms
	// retry 4 in 5ms
	// 200 after 5 attempts
}

// WithBackoffMultiplier changes how fast the waits grow: here each wait is
// three times the one before.
func ExampleWithBackoffMultiplier() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 3 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithBackoff(time.Millisecond, 100*time.Millisecond),
		retryhttp.WithBackoffMultiplier(3),
		retryhttp.WithJitter(0),
		retryhttp.WithHooks(retryhttp.Hooks{OnRetry: func(e retryhttp.Event) {
			fmt.Println("wait", e.Wait)
		}}))}

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	fmt.Println(resp.StatusCode)
	// Output:
	// wait 1ms
	// wait 3ms
	// wait 9ms
	// 200
}

// WithJitter adds a random amount, below the given maximum, to every computed
// wait, so that clients that failed together do not all come back together.
// The waits are random, so this example only checks their range.
func ExampleWithJitter() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()

	const base, jitter = 4 * time.Millisecond, 2 * time.Millisecond
	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithBackoff(base, base), // a constant 4ms...
		retryhttp.WithJitter(jitter),      // ...plus up to 2ms
		retryhttp.WithHooks(retryhttp.Hooks{OnRetry: func(e retryhttp.Event) {
			fmt.Printf("retry %d: wait in [4ms, 6ms): %v\n", e.Attempt, e.Wait >= base && e.Wait < base+jitter)
		}}))}

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	fmt.Println(resp.StatusCode)
	// Output:
	// retry 1: wait in [4ms, 6ms): true
	// retry 2: wait in [4ms, 6ms): true
	// retry 3: wait in [4ms, 6ms): true
	// 200
}

// WithJitterStrategy picks how randomness is applied. With FullJitter each
// wait is drawn from [0, computed wait), so a retry may leave almost at once;
// WithJitter is not used.
func ExampleWithJitterStrategy() {
	fmt.Println("strategies:", retryhttp.AdditiveJitter, retryhttp.FullJitter, retryhttp.DecorrelatedJitter)

	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()

	const computed = 8 * time.Millisecond
	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithJitterStrategy(retryhttp.FullJitter),
		retryhttp.WithBackoff(computed, computed),
		retryhttp.WithHooks(retryhttp.Hooks{OnRetry: func(e retryhttp.Event) {
			fmt.Printf("retry %d: wait below 8ms: %v\n", e.Attempt, e.Wait >= 0 && e.Wait < computed)
		}}))}

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	fmt.Println(resp.StatusCode)
	// Output:
	// strategies: additive full decorrelated
	// retry 1: wait below 8ms: true
	// retry 2: wait below 8ms: true
	// 200
}

// WithMaxRetryAfter bounds how long a server may ask the client to wait. A
// longer Retry-After ends retrying at once: the 429 is returned, and its
// error says when trying again is worth it.
func ExampleWithMaxRetryAfter() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "120") // two minutes
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithMaxRetryAfter(10*time.Second))}

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", retryhttp.Attempts(resp), "attempt")

	var e *retryhttp.Error
	if errors.As(retryhttp.CheckResponse(resp, nil), &e) {
		fmt.Println("stopped:", e.StopReason)
		fmt.Println(e.UserMessage())
	}
	// Output:
	// 429 after 1 attempt
	// stopped: server asked to wait 2m0s, longer than the limit 10s
	// The service is receiving too many requests right now. Please try again in about 2 minutes.
}

// WithAttemptTimeout gives up on an attempt whose response headers are slow
// to come and tries again, while the request as a whole may take longer.
func ExampleWithAttemptTimeout() {
	release := make(chan struct{})
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			// The first attempt hangs until the client gives up on it.
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		fmt.Fprint(w, "fast this time")
	}))
	defer srv.Close()
	defer close(release) // never leave a handler blocked: Close waits for it

	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithAttemptTimeout(200*time.Millisecond),
		retryhttp.WithBackoff(time.Millisecond, 10*time.Millisecond), retryhttp.WithJitter(0))}

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %q after %d attempts\n", resp.StatusCode, body, retryhttp.Attempts(resp))
	// Output: 200 "fast this time" after 2 attempts
}

// WithMaxBufferedBody bounds the copy kept of a request body that cannot be
// read twice (a stream: no GetBody, no Seek). A larger body is sent once and
// not retried, and the outcome says why.
func ExampleWithMaxBufferedBody() {
	var mu sync.Mutex
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		again := seen[string(b)]
		seen[string(b)] = true
		mu.Unlock()
		if !again { // each body fails the first time it arrives
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "stored %d bytes", len(b))
	}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithMaxBufferedBody(64),
		retryhttp.WithBackoff(time.Millisecond, 10*time.Millisecond), retryhttp.WithJitter(0))}

	for _, size := range []int{32, 1000} {
		// io.MultiReader hides the strings.Reader: the body is a plain stream.
		stream := io.MultiReader(strings.NewReader(strings.Repeat("x", size)))
		resp, err := client.Post(srv.URL, "text/plain", stream)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d-byte body: %d %q, attempts: %d\n", size, resp.StatusCode, body, retryhttp.Attempts(resp))

		var e *retryhttp.Error
		if errors.As(retryhttp.CheckResponse(resp, nil), &e) {
			fmt.Println("  stopped:", e.StopReason)
		}
	}
	// Output:
	// 32-byte body: 200 "stored 32 bytes", attempts: 2
	// 1000-byte body: 503 "", attempts: 1
	//   stopped: request body cannot be replayed: it is larger than the 64-byte buffer (WithMaxBufferedBody)
}

// WithLogger sends a debug line per attempt, an info line per retry and a
// warning on giving up to a slog.Logger. This handler drops the time and
// shows the test server's random address as "server", so the output is
// stable.
func ExampleWithLogger() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			switch a.Key {
			case slog.TimeKey:
				return slog.Attr{}
			case "url":
				return slog.String("url", strings.Replace(a.Value.String(), srv.URL, "http://server", 1))
			}
			return a
		},
	}))
	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithLogger(logger),
		retryhttp.WithMaxRetries(1),
		retryhttp.WithBackoff(time.Millisecond, 10*time.Millisecond), retryhttp.WithJitter(0))}

	resp, err := client.Get(srv.URL + "/v1/models?api_key=sk-secret")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	// Output:
	// level=DEBUG msg="retryhttp: attempt" method=GET url="http://server/v1/models?api_key=REDACTED" attempt=1
	// level=INFO msg="retryhttp: retrying" method=GET url="http://server/v1/models?api_key=REDACTED" attempt=1 status=503 wait=1ms reason="503 Service Unavailable"
	// level=DEBUG msg="retryhttp: attempt" method=GET url="http://server/v1/models?api_key=REDACTED" attempt=2
	// level=WARN msg="retryhttp: giving up" method=GET url="http://server/v1/models?api_key=REDACTED" attempt=2 status=503 reason="retries exhausted"
}

// WithClock replaces the system clock. A test clock such as
// retrytest.NewClock, on which every wait passes at once, checks the default schedule (1s, 2s, 4s, ...) and the server's
// Retry-After without sleeping through them.
func ExampleWithClock() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch calls.Add(1) {
		case 1, 3:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 2:
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()

	clock := retrytest.NewClock()
	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithClock(clock), retryhttp.WithJitter(0))}

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", retryhttp.Attempts(resp), "attempts")
	fmt.Println("waits:", clock.Waits()) // backoff 1s, the server's 30s, backoff 4s
	// Output:
	// 200 after 4 attempts
	// waits: [1s 30s 4s]
}

// WithClassifier teaches the transport about an API's own signals. Here a
// 409 Conflict means "a lock is held, come back shortly", which the built-in
// rules would treat as final; every other outcome is left to them.
func ExampleWithClassifier() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			http.Error(w, "resource locked", http.StatusConflict)
			return
		}
		fmt.Fprint(w, "done")
	}))
	defer srv.Close()

	lockedIsTransient := func(resp *http.Response, err error) retryhttp.Verdict {
		if resp != nil && resp.StatusCode == http.StatusConflict {
			return retryhttp.Retry
		}
		return retryhttp.Default
	}
	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithClassifier(lockedIsTransient),
		retryhttp.WithBackoff(time.Millisecond, 10*time.Millisecond), retryhttp.WithJitter(0))}

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s after %d attempts\n", resp.StatusCode, body, retryhttp.Attempts(resp))
	// Output: 200 done after 2 attempts
}

// WithHooks reports each attempt, retry and give-up, for metrics. Hooks run
// on the request's goroutine, so they should only count or record.
func ExampleWithHooks() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer srv.Close()

	var attempts, retries, giveUps atomic.Int64 // stand-ins for metric counters
	hooks := retryhttp.Hooks{
		OnAttempt: func(e retryhttp.Event) { attempts.Add(1) },
		OnRetry: func(e retryhttp.Event) {
			retries.Add(1)
			fmt.Printf("attempt %d failed (%s), retrying in %v\n", e.Attempt, e.Reason, e.Wait)
		},
		OnGiveUp: func(e retryhttp.Event) {
			giveUps.Add(1)
			fmt.Printf("gave up after attempt %d: %s\n", e.Attempt, e.Reason)
		},
	}
	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithHooks(hooks),
		retryhttp.WithMaxRetries(2),
		retryhttp.WithBackoff(time.Millisecond, 10*time.Millisecond), retryhttp.WithJitter(0))}

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Printf("attempts=%d retries=%d give-ups=%d\n", attempts.Load(), retries.Load(), giveUps.Load())
	// Output:
	// attempt 1 failed (502 Bad Gateway), retrying in 1ms
	// attempt 2 failed (502 Bad Gateway), retrying in 2ms
	// gave up after attempt 3: retries exhausted
	// attempts=3 retries=2 give-ups=1
}

// WithIdempotencyKey stamps one random Idempotency-Key on a POST, the same on
// every attempt, so a server that honours it charges once however often the
// request arrives. A key the caller set is kept.
func ExampleWithIdempotencyKey() {
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get(retryhttp.IdempotencyKeyHeader))
		first := len(keys) == 1
		mu.Unlock()
		if first {
			w.WriteHeader(http.StatusInternalServerError) // did it charge? the key makes it safe to ask again
			return
		}
		fmt.Fprint(w, "charged")
	}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithIdempotencyKey(),
		retryhttp.WithBackoff(time.Millisecond, 10*time.Millisecond), retryhttp.WithJitter(0))}

	resp, err := client.Post(srv.URL+"/v1/charges", "application/json", strings.NewReader(`{"amount":500}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()

	mu.Lock()
	fmt.Println(resp.StatusCode, "after", retryhttp.Attempts(resp), "attempts")
	fmt.Println("same key on every attempt:", len(keys) == 2 && keys[0] == keys[1])
	fmt.Println("key length:", len(keys[0])) // a UUID
	mu.Unlock()

	// The caller's own key goes out unchanged.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/charges", strings.NewReader(`{"amount":500}`))
	req.Header.Set(retryhttp.IdempotencyKeyHeader, "order-42")
	resp, err = client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	mu.Lock()
	fmt.Println("caller's key:", keys[len(keys)-1])
	mu.Unlock()
	// Output:
	// 200 after 2 attempts
	// same key on every attempt: true
	// key length: 36
	// caller's key: order-42
}

// WithIdempotencyGuard retries a POST only when the server clearly did not act
// on it. A 500 may mean the payment went through, so it is returned at once;
// a 503 means it was turned away, so it is retried.
func ExampleWithIdempotencyGuard() {
	var calls sync.Map // path -> *atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := calls.LoadOrStore(r.URL.Path, new(atomic.Int32))
		if n.(*atomic.Int32).Add(1) > 1 {
			fmt.Fprint(w, "paid")
			return
		}
		switch r.URL.Path {
		case "/crashed":
			w.WriteHeader(http.StatusInternalServerError)
		case "/busy":
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithIdempotencyGuard(),
		retryhttp.WithBackoff(time.Millisecond, 10*time.Millisecond), retryhttp.WithJitter(0))}

	for _, path := range []string{"/crashed", "/busy"} {
		resp, err := client.Post(srv.URL+path, "application/json", strings.NewReader(`{"amount":500}`))
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Printf("%s: %d, attempts: %d\n", path, resp.StatusCode, retryhttp.Attempts(resp))
	}
	// Output:
	// /crashed: 500, attempts: 1
	// /busy: 200, attempts: 2
}

// ContextWithOptions changes the retry policy for one request. Here a
// batch job's context allows patient retries, and one request made under it
// must answer quickly: it gets one retry instead of the transport's five.
// Options accumulate, outer context first; a later one wins on the same
// setting. Transport-wide options such as WithLogger are not RequestOptions:
// ContextWithOptions(ctx, retryhttp.WithLogger(l)) does not compile.
func ExampleContextWithOptions() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithMaxRetries(5),
		retryhttp.WithBackoff(time.Millisecond, 10*time.Millisecond), retryhttp.WithJitter(0))}

	batch := retryhttp.ContextWithOptions(context.Background(),
		retryhttp.MaxRetries(10), retryhttp.MaxRetryAfter(5*time.Minute))
	ctx := retryhttp.ContextWithOptions(batch, retryhttp.MaxRetries(1))
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/health", nil)
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", retryhttp.Attempts(resp), "attempts")
	// Output: 503 after 2 attempts
}

// NoRetry sends one request exactly once, whatever the transport's policy.
func ExampleNoRetry() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil)}

	req, _ := http.NewRequestWithContext(retryhttp.NoRetry(context.Background()), http.MethodGet, srv.URL, nil)
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", retryhttp.Attempts(resp), "attempt")
	// Output: 503 after 1 attempt
}

// Attempts tells how many attempts a response took: 1 when it was not
// retried, 0 when it did not come through a RetryTransport.
func ExampleAttempts() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusGatewayTimeout)
		}
	}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithBackoff(time.Millisecond, 10*time.Millisecond), retryhttp.WithJitter(0))}
	for i := 0; i < 2; i++ {
		resp, err := client.Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println("retryhttp client:", resp.StatusCode, retryhttp.Attempts(resp))
	}

	resp, err := srv.Client().Get(srv.URL) // a plain client
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println("plain client:", resp.StatusCode, retryhttp.Attempts(resp))
	// Output:
	// retryhttp client: 200 2
	// retryhttp client: 200 1
	// plain client: 200 0
}

// CheckResponse turns a failed status into a *retryhttp.Error that carries
// what the provider said, and leaves the body readable.
func ExampleCheckResponse() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Request-Id", "req_011")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: must be at least 1"}}`)
	}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil)}
	resp, err := client.Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(`{"max_tokens":0}`))
	if err := retryhttp.CheckResponse(resp, err); err != nil {
		var e *retryhttp.Error
		if errors.As(err, &e) {
			fmt.Println("status:", e.StatusCode)
			fmt.Println("retryable:", e.Retryable)
			fmt.Println("type:", e.ProviderType)
			fmt.Println("message:", e.Message)
			fmt.Println("request id:", e.RequestID)
			fmt.Println("for users:", e.UserMessage())
		}
	}
	if resp != nil {
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		fmt.Println("body still readable:", strings.HasPrefix(string(body), `{"type":"error"`))
	}
	// Output:
	// status: 400
	// retryable: false
	// type: invalid_request_error
	// message: max_tokens: must be at least 1
	// request id: req_011
	// for users: The request couldn't be processed. Please check what you entered and try again.
	// body still readable: true
}

// UserMessage is the sentence to show people, not logs: calm, with what to
// do next, and no status codes or internals.
func ExampleError_UserMessage() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/overloaded":
			w.WriteHeader(retryhttp.StatusOverloaded)
		case "/rate-limited":
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
		case "/unauthorized":
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	defer srv.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // connections to it are refused

	// No retries, so the example shows each failure at once. The 429 comes
	// last: it pauses every request to its host for the 30s it asks for.
	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithMaxRetries(0))}
	for _, url := range []string{srv.URL + "/overloaded", srv.URL + "/unauthorized", gone.URL, srv.URL + "/rate-limited"} {
		resp, err := client.Get(url)
		if resp != nil {
			resp.Body.Close()
		}
		var e *retryhttp.Error
		if errors.As(retryhttp.CheckResponse(resp, err), &e) {
			fmt.Println(e.UserMessage())
		}
	}
	// Output:
	// The service is very busy at the moment. Please try again in a few minutes.
	// We couldn't sign in to the service. Please check that the access key is set up correctly.
	// We couldn't reach the service. Please check your connection and try again.
	// The service is receiving too many requests right now. Please try again in about 30 seconds.
}

// ParseRetryAfter reads the wait a server asked for, in every form seen in
// practice.
func ExampleParseRetryAfter() {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, h := range []http.Header{
		{"Retry-After": {"120"}},
		{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}},
		{"Retry-After-Ms": {"1500"}, "Retry-After": {"2"}}, // retry-after-ms wins
		{"Retry-After": {fmt.Sprint(now.Unix() + 45)}},     // a Unix time sent by mistake
		{"Retry-After": {"soon"}},
		{},
	} {
		wait, ok := retryhttp.ParseRetryAfter(h, now)
		fmt.Println(wait, ok)
	}
	// Output:
	// 2m0s true
	// 1m30s true
	// 1.5s true
	// 45s true
	// 0s false
	// 0s false
}

// Retryable is the built-in rule set, for a classifier that wants to refine
// it or code that decides for itself whether to try again later.
func ExampleRetryable() {
	resp := func(status int, header http.Header) *http.Response {
		if header == nil {
			header = http.Header{}
		}
		return &http.Response{StatusCode: status, Header: header}
	}
	fmt.Println("503:", retryhttp.Retryable(resp(503, nil), nil))
	fmt.Println("529:", retryhttp.Retryable(resp(retryhttp.StatusOverloaded, nil), nil))
	fmt.Println("400:", retryhttp.Retryable(resp(400, nil), nil))
	fmt.Println("503 with x-should-retry: false:", retryhttp.Retryable(resp(503, http.Header{"X-Should-Retry": {"false"}}), nil))
	fmt.Println("409 with x-should-retry: true:", retryhttp.Retryable(resp(409, http.Header{"X-Should-Retry": {"true"}}), nil))
	fmt.Println("unexpected EOF:", retryhttp.Retryable(nil, io.ErrUnexpectedEOF))
	fmt.Println("caller canceled:", retryhttp.Retryable(nil, context.Canceled))
	// Output:
	// 503: true
	// 529: true
	// 400: false
	// 503 with x-should-retry: false: false
	// 409 with x-should-retry: true: true
	// unexpected EOF: true
	// caller canceled: false
}
