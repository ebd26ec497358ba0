package retryhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/retryhttp/retryhttp"
)

// Every upstream learns how many attempts it can serve at once from its
// answers: no limit until it pushes back (a 503 or 529 while it serves
// other requests, a timeout, a latency that climbs), then about as many as
// it was serving. Stats shows the limit learned (0: none) and the attempts
// in flight; OnLimit hears of each large change. Here the tuning suits a
// service that shares a small upstream with others: it backs off by half
// at each refusal, never goes below 2 attempts at once, and ignores
// latency. A healthy server never pushes back, so nothing is limited.
func ExampleWithAdaptiveConcurrency() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"type":"message"}`)
	}))
	defer srv.Close()

	rt := retryhttp.New(nil,
		retryhttp.WithAdaptiveConcurrency(retryhttp.AdaptiveConcurrency{
			Min:              2,
			Backoff:          0.5,
			LatencyTolerance: -1,
		}),
		retryhttp.WithHooks(retryhttp.Hooks{
			OnLimit: func(e retryhttp.LimitEvent) { fmt.Println(e.Key, e.From, "->", e.To, e.Reason) },
		}))
	client := &http.Client{Transport: rt}
	defer client.CloseIdleConnections()

	for i := 0; i < 3; i++ {
		resp, err := client.Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close() // the attempt's slot is given back here
	}
	for _, s := range rt.Stats() {
		fmt.Println("limit:", s.Limit, "in flight:", s.InFlight)
	}
	// Output:
	// limit: 0 in flight: 0
}

// Disabled turns the adaptive limit off, leaving WithMaxConcurrency (a
// fixed cap, here 8) as the only bound on the attempts in flight.
func ExampleWithAdaptiveConcurrency_disabled() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()

	client := &http.Client{Transport: retryhttp.New(nil,
		retryhttp.WithAdaptiveConcurrency(retryhttp.AdaptiveConcurrency{Disabled: true}),
		retryhttp.WithMaxConcurrency(8))}
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
