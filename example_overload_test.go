package retryhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/retryhttp/retryhttp"
)

// WithCircuitBreaker tunes the breaker every upstream has. This one suits a
// batch job that would rather wait than add load: it opens only after 10
// upstream failures in a row, and while the upstream stays down its probes
// back off from one every second to one every 30 seconds. A healthy server
// never notices the breaker: the request goes once.
func ExampleWithCircuitBreaker() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"type":"message"}`)
	}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithCircuitBreaker(retryhttp.CircuitBreaker{
			Failures:   10,
			OpenFor:    time.Second,
			MaxOpenFor: 30 * time.Second,
		}))}
	defer client.CloseIdleConnections()

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println("status:", resp.StatusCode)
	fmt.Println("attempts:", retryhttp.Attempts(resp))
	// Output:
	// status: 200
	// attempts: 1
}

// A service that fans out to an upstream of its own may want to stop a
// client's breaker from second-guessing it: Disabled turns it off, leaving
// WithMaxRetries and the retry budget to bound the load.
func ExampleWithCircuitBreaker_disabled() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithCircuitBreaker(retryhttp.CircuitBreaker{Disabled: true}))}
	defer client.CloseIdleConnections()

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println("status:", resp.StatusCode)
	// Output:
	// status: 200
}

// WithRetryBudget bounds the retries per upstream to a share of its
// requests. Here one retry per ten requests, plus one a second whatever the
// traffic, counted over 30 seconds: while an upstream fails, retries add at
// most about 10% (and one a second) to the load on it. First attempts are
// never held back, so a healthy server sees each request once.
func ExampleWithRetryBudget() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"type":"message"}`)
	}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithRetryBudget(retryhttp.RetryBudget{
			Ratio:        0.1,
			MinPerSecond: 1,
			Window:       30 * time.Second,
		}))}
	defer client.CloseIdleConnections()

	for i := 0; i < 3; i++ {
		resp, err := client.Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println("status:", resp.StatusCode, "attempts:", retryhttp.Attempts(resp))
	}
	// Output:
	// status: 200 attempts: 1
	// status: 200 attempts: 1
	// status: 200 attempts: 1
}

// BreakerState names the states a breaker reports, for logs and metrics.
func ExampleBreakerState() {
	for _, s := range []retryhttp.BreakerState{retryhttp.BreakerClosed, retryhttp.BreakerOpen, retryhttp.BreakerHalfOpen} {
		fmt.Println(int(s), s)
	}
	// Output:
	// 0 closed
	// 1 open
	// 2 half-open
}

// Stats reports per upstream what the transport has sent and what it holds
// back: poll it for a dashboard or a metrics exporter. OnBreaker hears of
// every change of an upstream's circuit breaker as it happens.
func ExampleRetryTransport_Stats() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"type":"message"}`)
	}))
	defer srv.Close()

	rt := retryhttp.New(nil, retryhttp.WithHooks(retryhttp.Hooks{
		OnBreaker: func(e retryhttp.BreakerEvent) { fmt.Println(e.Key, e.From, "->", e.To) },
	}))
	client := &http.Client{Transport: rt}
	defer client.CloseIdleConnections()
	for i := 0; i < 3; i++ {
		resp, err := client.Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
	}
	for _, s := range rt.Stats() {
		fmt.Println("requests:", s.Requests, "attempts:", s.Attempts, "retries:", s.Retries)
		fmt.Println("breaker:", s.Breaker, "queued:", s.Queued, "failures:", s.Failures)
	}
	// Output:
	// requests: 3 attempts: 3 retries: 0
	// breaker: closed queued: 0 failures: 0
}
