package redisquota

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

// The helper process: the test binary started again with helperEnv set
// (see TestMain). It sends its requests through a retryhttp transport that
// shares its limit through Redis, once the test says go.
const (
	helperEnv      = "REDISQUOTA_TEST_HELPER"
	helperRedis    = "REDISQUOTA_TEST_REDIS"
	helperURL      = "REDISQUOTA_TEST_URL"
	helperRequests = "REDISQUOTA_TEST_REQUESTS"
	helperShare    = "REDISQUOTA_TEST_SHARE"
)

// The fleet of TestThreeProcessesShareOneLimit: an account allowing 100
// requests a second, 10 at once, shared by three processes.
const (
	fleetRate     = 100 // per second
	fleetBurst    = 10
	fleetSize     = 3
	fleetRequests = 600 // in all
	fleetWorkers  = 20  // requests in flight per process
)

// fleetQuotaTimeout is the fleet's WithQuotaTimeout: the default, except
// under the race detector. Five race-instrumented processes (three helpers,
// the test with its provider, and Redis) on a two-CPU machine stretch a
// loopback round trip to Redis past 50ms (60ms measured), which would be
// taken for an outage; that is no part of what this test checks.
var fleetQuotaTimeout = map[bool]time.Duration{false: retryhttp.DefaultQuotaTimeout, true: 500 * time.Millisecond}[raceEnabled]

// fleetTransport is how each process of the fleet is configured: the
// account's rate, shared, with half the provider's bucket as its burst. The
// other half is headroom for arrivals that bunch up on the way: a burst
// that reaches the provider late (a connection to open, a process not
// scheduled) has the requests booked after it, on time, catch up with it,
// and the provider refills none of the time it was late. Retries after a
// 429 leave at the server's (millisecond) Retry-After, so a rare 429 costs
// little time.
func fleetTransport(base http.RoundTripper, b *Backend, share float64, logger *slog.Logger) *retryhttp.RetryTransport {
	return retryhttp.New(base,
		retryhttp.WithRateLimit(retryhttp.Limits{RequestsPerMinute: fleetRate * 60}),
		retryhttp.WithRateLimitBurst(fleetBurst/2*time.Second/fleetRate),
		retryhttp.WithQuotaBackend(b, share),
		retryhttp.WithQuotaTimeout(fleetQuotaTimeout),
		retryhttp.WithBackoff(10*time.Millisecond, 100*time.Millisecond),
		retryhttp.WithJitter(10*time.Millisecond),
		retryhttp.WithMaxRetries(20),
		retryhttp.WithLogger(logger))
}

// helperResult is what a helper process reports on its stdout.
type helperResult struct {
	OK, Failed int
	Errors     []string
}

func helperMain() int {
	n, _ := strconv.Atoi(os.Getenv(helperRequests))
	share, _ := strconv.ParseFloat(os.Getenv(helperShare), 64)
	url := os.Getenv(helperURL)
	// Connections open and scripts loaded before the start, as a service
	// would have them after its first requests.
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(helperRedis), ContextTimeoutEnabled: true, MinIdleConns: fleetWorkers})
	defer rdb.Close()
	backend := New(rdb)
	if err := backend.Preload(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "helper: redis:", err)
		return 1
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	rt := fleetTransport(nil, backend, share, logger)
	defer rt.CloseIdleConnections()

	for deadline := time.Now().Add(10 * time.Second); rdb.PoolStats().IdleConns < fleetWorkers && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // MinIdleConns are dialled in the background
	}
	// One request first, as a running service has sent: the transport's
	// first request to an upstream goes alone, as a probe, and the others
	// wait for its answer; requests whose turns pass meanwhile would leave
	// together when it comes, a cold start this test is not about. The
	// provider's bucket and the shared one both count it, so they agree.
	if err := get(rt, url); err != nil {
		fmt.Fprintln(os.Stderr, "helper: warm-up:", err)
		return 1
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return 1
	}
	var res helperResult
	var mu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < fleetWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				err := get(rt, url)
				mu.Lock()
				if err != nil {
					res.Failed++
					res.Errors = append(res.Errors, err.Error())
				} else {
					res.OK++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	json.NewEncoder(os.Stdout).Encode(res)
	return 0
}

// get sends one request and fails unless it ends in 200.
func get(rt http.RoundTripper, url string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d after %d attempts", resp.StatusCode, retryhttp.Attempts(resp))
	}
	return nil
}

// helper is one running helper process.
type helper struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr bytes.Buffer
}

func startHelper(t *testing.T, env ...string) *helper {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	h := &helper{cmd: exec.Command(exe)}
	dieWithTest(h.cmd)
	h.cmd.Env = append(append(os.Environ(), helperEnv+"=1"), env...)
	h.cmd.Stderr = &h.stderr
	h.stdin, err = h.cmd.StdinPipe()
	require.NoError(t, err)
	out, err := h.cmd.StdoutPipe()
	require.NoError(t, err)
	h.stdout = bufio.NewReader(out)
	require.NoError(t, h.cmd.Start())
	t.Cleanup(func() {
		h.cmd.Process.Kill()
		h.cmd.Wait()
		if t.Failed() && h.stderr.Len() > 0 {
			t.Logf("helper %d stderr:\n%s", h.cmd.Process.Pid, h.stderr.String())
		}
	})
	return h
}

// line reads the helper's next line of output, failing after limit.
func (h *helper) line(t *testing.T, limit time.Duration) string {
	t.Helper()
	ch := make(chan string, 1)
	go func() {
		s, _ := h.stdout.ReadString('\n')
		ch <- s
	}()
	select {
	case s := <-ch:
		return s
	case <-time.After(limit):
		h.cmd.Process.Kill()
		t.Fatalf("helper said nothing for %v; stderr:\n%s", limit, h.stderr.String())
		return ""
	}
}

// TestThreeProcessesShareOneLimit runs three OS processes that share a 100
// requests/s limit through one Redis, against one provider that allows 100
// requests/s with a bucket of 10 and answers 429 beyond. Together they keep
// under the limit, and lose no time to it.
func TestThreeProcessesShareOneLimit(t *testing.T) {
	srv := startRedis(t)
	provider := retrytest.NewServer(retrytest.Config{
		RateLimit:   retrytest.RateLimit{Rate: fleetRate, Burst: fleetBurst},
		RetryAfter:  retrytest.RetryAfterMillis,
		MaxAttempts: 10 * fleetRequests,
	})
	defer provider.Close()

	share := strconv.FormatFloat(1.0/fleetSize, 'g', -1, 64)
	var helpers []*helper
	for i := 0; i < fleetSize; i++ {
		helpers = append(helpers, startHelper(t, helperRedis+"="+srv.Addr(), helperURL+"="+provider.URL,
			helperRequests+"="+strconv.Itoa(fleetRequests/fleetSize), helperShare+"="+share))
	}
	for _, h := range helpers {
		require.Equal(t, "ready\n", h.line(t, 30*time.Second))
	}

	start := time.Now()
	for _, h := range helpers {
		_, err := io.WriteString(h.stdin, "go\n")
		require.NoError(t, err)
	}
	var results []helperResult
	for _, h := range helpers {
		var res helperResult
		require.NoError(t, json.Unmarshal([]byte(h.line(t, time.Minute)), &res))
		results = append(results, res)
	}
	wall := time.Since(start)

	for i, res := range results {
		assert.Equal(t, fleetRequests/fleetSize, res.OK, "process %d: every request succeeded", i)
		assert.Zero(t, res.Failed, "process %d: %v", i, res.Errors)
	}
	stats := provider.Stats()
	throttled := stats.Statuses[http.StatusTooManyRequests]
	ideal := time.Duration(float64(fleetRequests-fleetBurst) / fleetRate * float64(time.Second))
	t.Logf("%d processes, %d requests: %d attempts, %d answered 429 (%.2f%%); wall %v, ideal %v (%.3fx)",
		fleetSize, fleetRequests, stats.Attempts, throttled, 100*float64(throttled)/float64(fleetRequests),
		wall.Round(time.Millisecond), ideal, wall.Seconds()/ideal.Seconds())
	assert.Equal(t, fleetRequests+fleetSize, stats.Statuses[http.StatusOK], "the requests and the warm-ups")
	assert.LessOrEqual(t, float64(throttled), 0.02*fleetRequests, "429s at most 2%% of requests")
	assert.LessOrEqual(t, wall, time.Duration(1.15*float64(ideal)), "wall time within 1.15x the ideal")
}
