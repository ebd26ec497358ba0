package retryhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

// The per-request options, one example each. Most use retrytest.NewClock
// (see ExampleWithClock) so that waits of seconds pass at once and can be shown.

// failFirst answers status to the first n requests, then 200 "ok".
func failFirst(n int32, status int) *httptest.Server {
	var calls atomic.Int32
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= n {
			w.WriteHeader(status)
			return
		}
		fmt.Fprint(w, "ok")
	}))
}

// get sends a GET with ctx and prints the status and the attempts.
func get(client *http.Client, ctx context.Context, url string) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", attempts(resp))
}

func attempts(resp *http.Response) string {
	if n := retryhttp.Attempts(resp); n != 1 {
		return fmt.Sprint(n, " attempts")
	}
	return "1 attempt"
}

// MaxRetries gives one request its own number of retries: here one, where
// the transport allows five.
func ExampleMaxRetries() {
	srv := failFirst(3, http.StatusServiceUnavailable)
	defer srv.Close()
	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithClock(retrytest.NewClock()))}

	get(client, retryhttp.ContextWithOptions(context.Background(), retryhttp.MaxRetries(1)), srv.URL)
	// Output: 503 after 2 attempts
}

// Backoff gives one request its own waits: 100ms doubling up to 250ms,
// where the transport waits 1s doubling up to 32s.
func ExampleBackoff() {
	srv := failFirst(3, http.StatusServiceUnavailable)
	defer srv.Close()
	clock := retrytest.NewClock()
	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithClock(clock), retryhttp.WithJitter(0))}

	get(client, retryhttp.ContextWithOptions(context.Background(),
		retryhttp.Backoff(100*time.Millisecond, 250*time.Millisecond)), srv.URL)
	fmt.Println("waits:", clock.Waits())
	// Output:
	// 200 after 4 attempts
	// waits: [100ms 200ms 250ms]
}

// BackoffMultiplier makes one request's waits triple instead of double.
func ExampleBackoffMultiplier() {
	srv := failFirst(3, http.StatusServiceUnavailable)
	defer srv.Close()
	clock := retrytest.NewClock()
	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithClock(clock), retryhttp.WithJitter(0))}

	get(client, retryhttp.ContextWithOptions(context.Background(), retryhttp.BackoffMultiplier(3)), srv.URL)
	fmt.Println("waits:", clock.Waits())
	// Output:
	// 200 after 4 attempts
	// waits: [1s 3s 9s]
}

// Jitter changes the random time added to one request's waits; 0 makes
// them exact, where the transport adds up to 1s.
func ExampleJitter() {
	srv := failFirst(2, http.StatusServiceUnavailable)
	defer srv.Close()
	clock := retrytest.NewClock()
	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithClock(clock))}

	get(client, retryhttp.ContextWithOptions(context.Background(), retryhttp.Jitter(0)), srv.URL)
	fmt.Println("waits:", clock.Waits())
	// Output:
	// 200 after 3 attempts
	// waits: [1s 2s]
}

// UseJitterStrategy gives one request another jitter strategy: with
// FullJitter each wait is drawn from [0, computed wait).
func ExampleUseJitterStrategy() {
	srv := failFirst(2, http.StatusServiceUnavailable)
	defer srv.Close()
	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithClock(retrytest.NewClock()),
		retryhttp.WithHooks(retryhttp.Hooks{OnRetry: func(e retryhttp.Event) {
			computed := time.Second << (e.Attempt - 1) // 1s, 2s
			fmt.Printf("retry %d: wait below %v: %v\n", e.Attempt, computed, e.Wait < computed)
		}}))}

	get(client, retryhttp.ContextWithOptions(context.Background(),
		retryhttp.UseJitterStrategy(retryhttp.FullJitter)), srv.URL)
	// Output:
	// retry 1: wait below 1s: true
	// retry 2: wait below 2s: true
	// 200 after 3 attempts
}

// MaxRetryAfter lets one request, a batch job's, honour a Retry-After of
// two minutes, longer than the transport's limit of 60s.
func ExampleMaxRetryAfter() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	clock := retrytest.NewClock()
	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithClock(clock), retryhttp.WithJitter(0))}

	get(client, retryhttp.ContextWithOptions(context.Background(), retryhttp.MaxRetryAfter(5*time.Minute)), srv.URL)
	fmt.Println("waits:", clock.Waits())
	// Output:
	// 200 after 2 attempts
	// waits: [2m0s]
}

// MaxQueueWait lets one request wait longer for its turn than the
// transport allows. At 2 requests a minute the next turn is 30s away: too
// long for the transport's 5s, not for this request's minute.
func ExampleMaxQueueWait() {
	srv := failFirst(0, 0) // always 200
	defer srv.Close()
	clock := retrytest.NewClock()
	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithClock(clock),
		retryhttp.WithRateLimit(retryhttp.Limits{RequestsPerMinute: 2}),
		retryhttp.WithMaxQueueWait(5*time.Second))}

	get(client, context.Background(), srv.URL)
	_, err := client.Get(srv.URL)
	fmt.Println("without MaxQueueWait, rate limited:", errors.Is(err, retryhttp.ErrRateLimited))
	get(client, retryhttp.ContextWithOptions(context.Background(), retryhttp.MaxQueueWait(time.Minute)), srv.URL)
	fmt.Println("waits:", clock.Waits())
	// Output:
	// 200 after 1 attempt
	// without MaxQueueWait, rate limited: true
	// 200 after 1 attempt
	// waits: [30s]
}

// AttemptTimeout gives up on one request's slow attempt and tries again,
// where the transport sets no per-attempt timeout.
func ExampleAttemptTimeout() {
	release := make(chan struct{})
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 { // the first attempt hangs until the client gives up
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		fmt.Fprint(w, "fast this time")
	}))
	defer srv.Close()
	defer close(release)
	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithBackoff(time.Millisecond, 10*time.Millisecond), retryhttp.WithJitter(0))}

	get(client, retryhttp.ContextWithOptions(context.Background(),
		retryhttp.AttemptTimeout(100*time.Millisecond)), srv.URL)
	// Output: 200 after 2 attempts
}

// MaxBufferedBody changes, for one request, how much of a body that cannot
// be read twice is kept to send again. Here none is: the stream is sent
// once and not retried.
func ExampleMaxBufferedBody() {
	srv := failFirst(1, http.StatusServiceUnavailable)
	defer srv.Close()
	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithClock(retrytest.NewClock()))}

	ctx := retryhttp.ContextWithOptions(context.Background(), retryhttp.MaxBufferedBody(0))
	stream := io.MultiReader(strings.NewReader("a stream")) // no GetBody, no Seek
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, stream)
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", retryhttp.Attempts(resp), "attempt")
	fmt.Println("replayable:", !errors.Is(retryhttp.CheckResponse(resp, nil), retryhttp.ErrBodyNotReplayable))
	// Output:
	// 503 after 1 attempt
	// replayable: false
}

// Classify gives one request its own classifier: for this call a 409
// Conflict means "locked, come back shortly", which the built-in rules
// would treat as final.
func ExampleClassify() {
	srv := failFirst(1, http.StatusConflict)
	defer srv.Close()
	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithClock(retrytest.NewClock()))}

	lockedIsTransient := func(resp *http.Response, err error) retryhttp.Verdict {
		if resp != nil && resp.StatusCode == http.StatusConflict {
			return retryhttp.Retry
		}
		return retryhttp.Default
	}
	get(client, retryhttp.ContextWithOptions(context.Background(), retryhttp.Classify(lockedIsTransient)), srv.URL)
	// Output: 200 after 2 attempts
}

// IdempotencyKey stamps one random Idempotency-Key on the attempts of one
// POST, where the transport stamps none.
func ExampleIdempotencyKey() {
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, r.Header.Get(retryhttp.IdempotencyKeyHeader))
		if len(keys) == 1 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithClock(retrytest.NewClock()))}

	ctx := retryhttp.ContextWithOptions(context.Background(), retryhttp.IdempotencyKey())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"amount":500}`))
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	fmt.Println(resp.StatusCode, "after", retryhttp.Attempts(resp), "attempts")
	fmt.Println("same key on both:", len(keys) == 2 && keys[0] != "" && keys[0] == keys[1])
	// Output:
	// 200 after 2 attempts
	// same key on both: true
}

// IdempotencyGuard keeps one POST from being retried after a 500, which
// may mean it was carried out, while the transport retries others.
func ExampleIdempotencyGuard() {
	var calls sync.Map // path -> *atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := calls.LoadOrStore(r.URL.Path, new(atomic.Int32))
		if n.(*atomic.Int32).Add(1) == 1 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithClock(retrytest.NewClock()))}

	for _, c := range []struct {
		path string
		ctx  context.Context
	}{
		{"/report", context.Background()},
		{"/payment", retryhttp.ContextWithOptions(context.Background(), retryhttp.IdempotencyGuard())},
	} {
		req, _ := http.NewRequestWithContext(c.ctx, http.MethodPost, srv.URL+c.path, strings.NewReader("{}"))
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Printf("%s: %d after %s\n", c.path, resp.StatusCode, attempts(resp))
	}
	// Output:
	// /report: 200 after 2 attempts
	// /payment: 500 after 1 attempt
}
