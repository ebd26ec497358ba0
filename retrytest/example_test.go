package retrytest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

// A rate-limited Anthropic API on a loopback server. The clock is fixed so
// the reset dates come out the same on every run; a real test would use a
// clock it advances.
func ExampleNewServer() {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	srv := retrytest.NewServer(retrytest.Config{
		Family:    retrytest.Anthropic,
		RateLimit: retrytest.RateLimit{Rate: 1, Burst: 2}, // 1 request/s, 2 at once
		Now:       func() time.Time { return now },
	})
	defer srv.Close()

	for range 3 {
		resp, err := srv.Client().Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(`{}`))
		if err != nil {
			panic(err)
		}
		var body struct {
			Error struct{ Type string }
		}
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		fmt.Printf("%d remaining=%s reset=%s retry-after=%q error=%q\n", resp.StatusCode,
			resp.Header.Get("anthropic-ratelimit-requests-remaining"),
			resp.Header.Get("anthropic-ratelimit-requests-reset"),
			resp.Header.Get("retry-after"), body.Error.Type)
	}
	// Output:
	// 200 remaining=1 reset=2026-11-30T12:00:01Z retry-after="" error=""
	// 200 remaining=0 reset=2026-11-30T12:00:02Z retry-after="" error=""
	// 429 remaining=0 reset=2026-11-30T12:00:02Z retry-after="1" error="rate_limit_error"
}

// A GitHub-style server whose clock runs 3 seconds ahead of the client's,
// with GitHub's hourly fixed window and its reset truncated to the second,
// as many servers write it. The Date header is on the server's clock too: a
// client that measures the reset from the Date rather than from its own
// clock waits as long as the server means.
func Example_serverClock() {
	now := time.Date(2026, 11, 30, 12, 0, 0, 600_000_000, time.UTC) // the client's clock
	srv := retrytest.NewServer(retrytest.Config{
		Family:      retrytest.GitHub,
		RateLimit:   retrytest.RateLimit{Window: time.Hour, Burst: 2},
		Rounding:    retrytest.RoundDown,
		ClockOffset: 3 * time.Second,
		Now:         func() time.Time { return now },
	})
	defer srv.Close()

	for range 3 {
		resp, err := srv.Client().Get(srv.URL + "/repos/o/r")
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		date, _ := http.ParseTime(resp.Header.Get("Date"))
		epoch, _ := strconv.ParseInt(resp.Header.Get("X-RateLimit-Reset"), 10, 64)
		reset := time.Unix(epoch, 0).UTC()
		fmt.Printf("%d date=%s remaining=%s reset=%s (date+%v) retry-after=%q\n", resp.StatusCode,
			date.Format(time.TimeOnly), resp.Header.Get("X-RateLimit-Remaining"),
			reset.Format(time.TimeOnly), reset.Sub(date), resp.Header.Get("Retry-After"))
	}
	// Output:
	// 200 date=12:00:03 remaining=1 reset=13:00:03 (date+1h0m0s) retry-after=""
	// 200 date=12:00:03 remaining=0 reset=13:00:03 (date+1h0m0s) retry-after=""
	// 403 date=12:00:03 remaining=0 reset=13:00:03 (date+1h0m0s) retry-after="3600"
}

// The same reset, 1.7 seconds past a whole one, as each Rounding writes it.
func ExampleRounding() {
	start := time.Date(2026, 11, 30, 12, 0, 0, 700_000_000, time.UTC)
	for _, r := range []retrytest.Rounding{retrytest.RoundUp, retrytest.RoundDown, retrytest.RoundNearest} {
		provider := retrytest.NewTransport(retrytest.Config{
			Family:    retrytest.Anthropic,
			RateLimit: retrytest.RateLimit{Rate: 1, Burst: 1}, // full again a second after the first request
			Rounding:  r,
			Now:       func() time.Time { return start },
		})
		resp, err := provider.RoundTrip(must(http.NewRequest(http.MethodPost, "https://api.anthropic.test/v1/messages", nil)))
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Printf("%-5s %s\n", r, resp.Header.Get("anthropic-ratelimit-requests-reset"))
	}
	// Output:
	// ceil  2026-11-30T12:00:02Z
	// floor 2026-11-30T12:00:01Z
	// round 2026-11-30T12:00:02Z
}

// steppingClock returns a clock that moves on by step at every reading. The
// provider reads its clock once at its start and once per arrival, so
// arrival k comes k·step after the start whatever the real timing.
func steppingClock(step time.Duration) func() time.Time {
	var mu sync.Mutex
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t := now
		now = now.Add(step)
		return t
	}
}

// An outage: the provider answers 529 for its first 250ms, and a retrying
// client gets through once it is over.
func ExampleWindow() {
	provider := retrytest.NewTransport(retrytest.Config{
		Family:   retrytest.Anthropic,
		Overload: []retrytest.Window{{From: 0, Until: 250 * time.Millisecond, Status: 529}},
		Now:      steppingClock(100 * time.Millisecond), // arrivals at 100ms, 200ms, 300ms...
	})
	client := &http.Client{Transport: retryhttp.New(provider,
		retryhttp.WithBackoff(time.Millisecond, time.Millisecond), retryhttp.WithJitter(0))}

	resp, err := client.Get("https://api.anthropic.test/v1/models")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	st := provider.Stats()
	fmt.Println(resp.StatusCode, "after", retryhttp.Attempts(resp), "attempts")
	fmt.Println("arrivals:", st.Arrivals)
	fmt.Println("answers:", st.Statuses)
	// Output:
	// 200 after 3 attempts
	// arrivals: [100ms 200ms 300ms]
	// answers: map[200:1 529:2]
}

// A provider that serves two requests at once and refuses any beyond with
// 529 overloaded_error and no Retry-After, as an overloaded LLM API does.
// Its Success handler keeps the two it admits in service until the third
// has been refused, so the output is the same on every run; with Hold
// instead, each admitted request would stay in service that long.
func ExampleCapacity() {
	admitted, release := make(chan struct{}), make(chan struct{})
	provider := retrytest.NewTransport(retrytest.Config{
		Family:   retrytest.OpenAI,
		Capacity: retrytest.Capacity{Max: 2, Status: 529},
		Success: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			admitted <- struct{}{}
			<-release
			io.WriteString(w, `{"ok":true}`)
		}),
	})
	post := func() *http.Response {
		return must(provider.RoundTrip(must(http.NewRequest(http.MethodPost,
			"https://api.openai.test/v1/chat/completions", strings.NewReader(`{}`)))))
	}

	served := make(chan int, 2)
	for range 2 {
		go func() {
			resp := post()
			resp.Body.Close()
			served <- resp.StatusCode
		}()
		<-admitted
	}
	refused := post()
	body, _ := io.ReadAll(refused.Body)
	refused.Body.Close()
	fmt.Printf("third: %d retry-after=%q %s\n", refused.StatusCode, refused.Header.Get("Retry-After"),
		strings.TrimSpace(string(body)))
	fmt.Println("in service:", provider.Stats().InService)
	close(release)
	fmt.Println("first two:", <-served, <-served)
	fmt.Println("answers:", provider.Stats().Statuses)
	// Output:
	// third: 529 retry-after="" {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_retrytest_3"}
	// in service: 2
	// first two: 200 200
	// answers: map[200:2 529:1]
}

// A scripted sequence: a 429 that asks for 2ms (in retry-after-ms, as the
// LLM APIs send it), an overload, then success.
func ExampleParseScript() {
	script, err := retrytest.ParseScript("429@2ms, 529, 200")
	if err != nil {
		panic(err)
	}
	fmt.Println(retrytest.FormatScript(script))

	provider := retrytest.NewTransport(retrytest.Config{
		Family:     retrytest.OpenAI,
		RetryAfter: retrytest.RetryAfterMillis,
		Script:     script,
	})
	client := &http.Client{Transport: retryhttp.New(provider,
		retryhttp.WithBackoff(time.Millisecond, time.Millisecond), retryhttp.WithJitter(0))}
	resp, err := client.Get("https://api.openai.test/v1/models")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", retryhttp.Attempts(resp), "attempts")
	// Output:
	// 429@2ms, 529, 200
	// 200 after 3 attempts
}

// The Transport form answers in-process: any URL, no socket. Here it is an
// OpenAI account out of credit, which sends a 429 that must not be retried.
func ExampleNewTransport() {
	client := &http.Client{Transport: retrytest.NewTransport(retrytest.Config{
		Family: retrytest.OpenAI,
		Script: retrytest.MustParseScript("429:insufficient_quota"),
	})}
	resp, err := client.Get("https://api.openai.test/v1/chat/completions")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, resp.Header.Get("x-request-id"))
	fmt.Println(string(body))
	// Output:
	// 429 req_retrytest_1
	// {"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}
}

// Stats shows what the provider saw: here, that a retrying client sent the
// same body on every attempt, and how each attempt of one logical request
// was answered.
func ExampleStats() {
	provider := retrytest.NewTransport(retrytest.Config{
		Script:          retrytest.MustParseScript("503, 503, 200"),
		RequestIDHeader: "X-Request-Name",
	})
	client := &http.Client{Transport: retryhttp.New(provider,
		retryhttp.WithBackoff(time.Millisecond, time.Millisecond), retryhttp.WithJitter(0))}
	req, _ := http.NewRequest(http.MethodPost, "https://api.test/v1/jobs", strings.NewReader(`{"job":42}`))
	req.Header.Set("X-Request-Name", "job-42")
	resp, err := client.Do(req)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()

	st := provider.Stats()
	fmt.Println("attempts:", st.Attempts)
	fmt.Println("answers:", st.Statuses)
	fmt.Println("distinct bodies:", st.DistinctBodies())
	fmt.Println("job-42:", st.Requests["job-42"].Statuses)
	// Output:
	// attempts: 3
	// answers: map[200:1 503:2]
	// distinct bodies: 1
	// job-42: [503 503 200]
}

// A flaky network with a seed: the same faults on every run.
func ExampleFlaky() {
	provider := retrytest.NewTransport(retrytest.Config{
		Seed:  7,
		Flaky: retrytest.Flaky{Reset: 0.2, Truncate: 0.2},
	})
	var seen []string
	for range 12 {
		resp, err := provider.RoundTrip(must(http.NewRequest(http.MethodGet, "https://api.test/", nil)))
		if err != nil {
			seen = append(seen, "reset")
			continue
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			seen = append(seen, "truncated")
			continue
		}
		seen = append(seen, "ok")
	}
	fmt.Println(strings.Join(seen, " "))
	// Output:
	// ok ok reset reset ok ok truncated truncated reset ok ok truncated
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A test of one's own code that retries: the scripted 529, then 429 with
// Retry-After: 1s, then 200 runs in microseconds, while the transport sees
// its backoff and the server's wait pass on the clock.
func ExampleNewClock() {
	srv := retrytest.NewServer(retrytest.Config{Script: retrytest.MustParseScript("529, 429@1s, 200")})
	defer srv.Close()

	clock := retrytest.NewClock()
	client := &http.Client{Transport: retryhttp.New(srv.Client().Transport,
		retryhttp.WithClock(clock), retryhttp.WithJitter(0))}
	resp, err := client.Get(srv.URL + "/v1/messages")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", retryhttp.Attempts(resp), "attempts; waits:", clock.Waits())
	// Output: 200 after 3 attempts; waits: [1s 1s]
}
