package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/internal/fakeclock"
)

// TestMain fails the run if the provider, a worker or a connection outlives
// the test that started it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fastRun runs the simulator on a fake clock: every backoff and Retry-After
// wait passes at once and is recorded, so the test sleeps through nothing.
func fastRun(t *testing.T, cfg config) ([]result, string, *retryWaits) {
	t.Helper()
	clk := fakeclock.NewAuto(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	waits := &retryWaits{}
	var out bytes.Buffer
	results, err := run(context.Background(), &out, cfg, retryhttp.WithClock(clk),
		retryhttp.WithHooks(retryhttp.Hooks{OnRetry: waits.record}))
	require.NoError(t, err)
	require.Len(t, results, 2)
	return results, out.String(), waits
}

// retryWaits records the wait before every retry, as the OnRetry hook
// reports it. (The fake clock also sees the upstream's slow-start and hold
// timers, which are not retries.)
type retryWaits struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (r *retryWaits) record(e retryhttp.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = append(r.waits, e.Wait)
}

func (r *retryWaits) Sleeps() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.waits...)
}

// leadingFailures is how many attempts of request id the script fails before
// one succeeds, looking at most limit attempts ahead.
func leadingFailures(s script, id, limit int) int {
	k := 0
	for k < limit && s.decide(id, k) != outcomeOK {
		k++
	}
	return k
}

func TestRunRetryhttpRecoversWhatPlainClientLoses(t *testing.T) {
	cfg := config{requests: 60, concurrency: 8, failRate: 0.3, seed: 1, maxRetries: 5}
	results, out, clk := fastRun(t, cfg)
	plain, retry := results[0], results[1]
	s := script{seed: cfg.seed, failRate: cfg.failRate}

	// The plain client sends each request once and loses every one whose
	// first attempt the script fails.
	assert.Equal(t, cfg.requests, plain.serverAttempts)
	assert.Equal(t, cfg.requests, plain.clientAttempts())
	assert.Greater(t, len(plain.requests)-plain.succeeded(), 0, "the plain client must see failures")
	assert.Less(t, len(plain.requests)-plain.succeeded(), cfg.requests/2)

	// retryhttp with moderate failures gets every request through.
	assert.Equal(t, cfg.requests, retry.succeeded())
	assert.Greater(t, retry.serverAttempts, cfg.requests)
	assert.Equal(t, retry.serverAttempts, retry.clientAttempts(),
		"attempts the provider received must equal the attempts retryhttp reports")

	// Both clients met the same failure script, request by request.
	for id := range cfg.requests {
		lead := leadingFailures(s, id, cfg.maxRetries+1)
		require.Less(t, lead, cfg.maxRetries+1, "request %d: the script fails every attempt; pick another seed", id)
		assert.Equal(t, lead > 0, plain.requests[id].err != nil, "request %d", id)
		assert.Equal(t, lead+1, retry.requests[id].attempts, "request %d", id)
		assert.Equal(t, http.StatusOK, retry.requests[id].status, "request %d", id)
		if lead > 0 {
			assert.Equal(t, statusOf(s.decide(id, 0)), plain.requests[id].status, "request %d", id)
		}
	}

	// Every retry waited, and a 429's wait honoured its Retry-After: 1 floor.
	sleeps := clk.Sleeps()
	assert.Len(t, sleeps, retry.serverAttempts-cfg.requests)
	assert.GreaterOrEqual(t, slicesMax(sleeps), time.Second)

	// The table shows both clients, and its attempts row is what the
	// provider counted.
	assert.Contains(t, out, "plain http.Client")
	assert.Contains(t, out, "retryhttp.New(nil), 5 retries")
	m := regexp.MustCompile(`(?m)^attempts \(server\)\s+(\d+)\s+(\d+)\s*$`).FindStringSubmatch(out)
	require.NotNil(t, m, "no attempts row in:\n%s", out)
	assert.Equal(t, strconv.Itoa(plain.serverAttempts), m[1])
	assert.Equal(t, strconv.Itoa(retry.serverAttempts), m[2])
	assert.Regexp(t, `(?m)^succeeded\s+\d+ \(\d+\.\d%\)\s+60 \(100\.0%\)\s*$`, out)

	// The plain client's first failure is shown through CheckResponse.
	first := plain.firstFailure()
	require.GreaterOrEqual(t, first, 0)
	e := plain.requests[first].err
	assert.Contains(t, out, "plain http.Client, request "+strconv.Itoa(first)+", via retryhttp.CheckResponse:")
	assert.Contains(t, out, "err.Error():       "+e.Error())
	assert.Contains(t, out, "err.UserMessage(): "+e.UserMessage())
	assert.NotEmpty(t, e.UserMessage())
	assert.NotContains(t, e.UserMessage(), strconv.Itoa(e.StatusCode), "a user message holds no status code")
	assert.Contains(t, out, "every request succeeded")
}

func statusOf(o outcome) int {
	switch o {
	case outcomeUnavailable:
		return http.StatusServiceUnavailable
	case outcomeOverloaded:
		return 529
	case outcomeRateLimited:
		return http.StatusTooManyRequests
	}
	return http.StatusOK
}

func slicesMax(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

func TestRunMaxRetriesZeroSendsOnce(t *testing.T) {
	cfg := config{requests: 30, concurrency: 4, failRate: 0.4, seed: 9, maxRetries: 0}
	results, out, clk := fastRun(t, cfg)
	plain, retry := results[0], results[1]

	assert.Equal(t, cfg.requests, retry.serverAttempts)
	assert.Empty(t, clk.Sleeps())
	assert.Greater(t, len(plain.requests)-plain.succeeded(), 0)
	for id := range cfg.requests {
		assert.Equal(t, plain.requests[id].status, retry.requests[id].status, "request %d", id)
	}
	assert.Contains(t, out, "retryhttp.New(nil), 0 retries, request ")
}

func TestRunStopsWhenCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := run(ctx, io.Discard, config{requests: 1000, concurrency: 4, failRate: 0.5, seed: 1, maxRetries: 5})
	assert.ErrorIs(t, err, context.Canceled)
}

func TestScriptIsDeterministicAndHoldsItsRate(t *testing.T) {
	s := script{seed: 7, failRate: 0.25}
	counts := map[outcome]int{}
	const n = 20000
	for i := range n / 2 {
		for k := range 2 {
			o := s.decide(i, k)
			require.Equal(t, o, s.decide(i, k), "decide(%d, %d) must not change", i, k)
			counts[o]++
		}
	}
	failed := n - counts[outcomeOK]
	assert.InDelta(t, 0.25, float64(failed)/n, 0.02)
	for _, o := range []outcome{outcomeUnavailable, outcomeOverloaded, outcomeRateLimited} {
		assert.InDelta(t, 1.0/3, float64(counts[o])/float64(failed), 0.05, "outcome %d", o)
	}

	other := script{seed: 8, failRate: 0.25}
	same := 0
	for i := range 200 {
		if s.decide(i, 0) == other.decide(i, 0) {
			same++
		}
	}
	assert.Less(t, same, 200, "another seed must give another script")

	for i := range 100 {
		assert.Equal(t, outcomeOK, script{seed: 1, failRate: 0}.decide(i, 0))
		assert.NotEqual(t, outcomeOK, script{seed: 1, failRate: 1}.decide(i, 0))
	}
}

func TestProviderAnswers(t *testing.T) {
	s := script{seed: 3, failRate: 0.5}
	p, err := startProvider(s)
	require.NoError(t, err)
	defer p.Close()

	post := func(id string, body string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, p.URL+"/v1/messages", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set(requestIDHeader, id)
		req.Header.Set(clientHeader, "test")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	bodyOf := func(id int) string {
		b, _ := json.Marshal(simRequest{ID: id, Prompt: "x"})
		return string(b)
	}
	firstWith := func(o outcome) int {
		for i := range 1000 {
			if s.decide(i, 0) == o {
				return i
			}
		}
		t.Fatalf("no request with outcome %d", o)
		return -1
	}

	// A body that is not the request's own is refused, not counted.
	assert.Equal(t, http.StatusBadRequest, post("1", bodyOf(2)).StatusCode)
	assert.Equal(t, http.StatusBadRequest, post("x", bodyOf(1)).StatusCode)
	assert.Equal(t, http.StatusBadRequest, post("1", `{"id":1`).StatusCode)
	assert.Equal(t, 0, p.Attempts("test"))

	id := firstWith(outcomeOverloaded)
	resp := post(strconv.Itoa(id), bodyOf(id))
	assert.Equal(t, 529, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.JSONEq(t, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, string(b))
	assert.Equal(t, "req_sim_"+strconv.Itoa(id)+"_0", resp.Header.Get("Request-Id"))

	id = firstWith(outcomeRateLimited)
	resp = post(strconv.Itoa(id), bodyOf(id))
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))

	id = firstWith(outcomeUnavailable)
	assert.Equal(t, http.StatusServiceUnavailable, post(strconv.Itoa(id), bodyOf(id)).StatusCode)

	// The next attempt of the same request follows the script's attempt 1.
	resp = post(strconv.Itoa(id), bodyOf(id))
	assert.Equal(t, statusOf(s.decide(id, 1)), resp.StatusCode)
	assert.Equal(t, 2, p.requestAttempts("test", id))
	assert.Equal(t, 4, p.Attempts("test"))

	get, err := http.Get(p.URL + "/v1/messages")
	require.NoError(t, err)
	get.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, get.StatusCode)
	http.DefaultClient.CloseIdleConnections()
}

func TestFlags(t *testing.T) {
	bad := []struct {
		args []string
		want string
	}{
		{[]string{"-n", "0"}, "-n must be between 1 and 100000, got 0"},
		{[]string{"-n", "-5"}, "-n must be between 1 and 100000, got -5"},
		{[]string{"-n", "abc"}, `invalid value "abc" for flag -n`},
		{[]string{"-c", "0"}, "-c must be between 1 and 1000, got 0"},
		{[]string{"-fail", "1.5"}, "-fail must be a probability between 0 and 1, got 1.5"},
		{[]string{"-fail", "-0.1"}, "-fail must be a probability between 0 and 1, got -0.1"},
		{[]string{"-fail", "NaN"}, "-fail must be a probability between 0 and 1, got NaN"},
		{[]string{"-max-retries", "-1"}, "-max-retries must be 0 or more, got -1"},
		{[]string{"-seed", "-1"}, `invalid value "-1" for flag -seed`},
		{[]string{"-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	}
	for _, tc := range bad {
		var stdout, stderr bytes.Buffer
		code := realMain(context.Background(), tc.args, &stdout, &stderr)
		assert.Equal(t, 2, code, "args %q", tc.args)
		assert.Contains(t, stderr.String(), tc.want, "args %q", tc.args)
		assert.Empty(t, stdout.String(), "args %q", tc.args)
	}

	var stdout, stderr bytes.Buffer
	assert.Equal(t, 0, realMain(context.Background(), []string{"-h"}, &stdout, &stderr))
	for _, f := range []string{"-n", "-c", "-fail", "-seed", "-max-retries"} {
		assert.Contains(t, stderr.String(), "  "+f+" ", "-h must explain %s", f)
	}

	cfg, err := parseFlags([]string{"-n", "7", "-c", "3", "-fail", "0.5", "-seed", "42", "-max-retries", "2"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, config{requests: 7, concurrency: 3, failRate: 0.5, seed: 42, maxRetries: 2}, cfg)
	cfg, err = parseFlags(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, config{requests: 200, concurrency: 20, failRate: 0.25, seed: 1, maxRetries: retryhttp.DefaultMaxRetries}, cfg)
}

// TestRealMainRuns runs the command end to end on the system clock; with no
// failures there is nothing to wait for.
func TestRealMainRuns(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := realMain(context.Background(), []string{"-n", "10", "-c", "3", "-fail", "0"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	assert.Empty(t, stderr.String())
	assert.Regexp(t, `(?m)^attempts \(server\)\s+10\s+10\s*$`, stdout.String())
	assert.Contains(t, stdout.String(), "plain http.Client: every request succeeded; 0 of them after retries.")
}
