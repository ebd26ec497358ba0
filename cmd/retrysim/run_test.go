package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

// tinyConfig shrinks every scenario to a few dozen requests and every wait
// to milliseconds, so all of them run in about a second of real time.
// "retryhttp defaults" keeps its defaults but for the waits, which
// defaultsExtra brings down from seconds.
func tinyConfig(t *testing.T, scenarios ...string) config {
	t.Helper()
	cfg := defaultConfig()
	cfg.scenarios = scenarios
	cfg.requests, cfg.concurrency, cfg.rate = 24, 24, 400
	cfg.family, cfg.limit, cfg.limitBurst = retrytest.OpenAI, 400, 4 // retry-after-ms: waits of ms
	cfg.outage = 60 * time.Millisecond
	cfg.resets, cfg.unavailable, cfg.slow, cfg.slowDelay, cfg.truncations = 0.15, 0.15, 0.1, 20*time.Millisecond, 0.04
	cfg.clients, cfg.capacity, cfg.hold = 16, 4, 2*time.Millisecond
	cfg.slots, cfg.service, cfg.callers, cfg.each = 4, 2*time.Millisecond, 12, 3
	cfg.timeout, cfg.maxTime = 5*time.Second, 30*time.Second
	cfg.base, cfg.max, cfg.jitter = 5*time.Millisecond, 40*time.Millisecond, 5*time.Millisecond
	cfg.svg = ""
	cfg.defaultsExtra = []retryhttp.Option{
		retryhttp.WithBackoff(5*time.Millisecond, 40*time.Millisecond),
		retryhttp.WithJitter(5 * time.Millisecond),
		retryhttp.WithCircuitBreaker(retryhttp.CircuitBreaker{OpenFor: 10 * time.Millisecond}),
	}
	return cfg
}

// runTiny runs cfg and returns its groups by scenario and what it printed.
func runTiny(t *testing.T, cfg config) ([][]*runResult, string, string) {
	t.Helper()
	var out, progressOut bytes.Buffer
	groups, err := run(context.Background(), cfg, &out, newProgress(&progressOut, totalRequests(cfg)))
	require.NoError(t, err, "output:\n%s", out.String())
	require.Len(t, groups, len(cfg.scenarios))
	return groups, out.String(), progressOut.String()
}

// tableRow is one row of the printed summary table, parsed back.
type tableRow struct {
	name                                           string // scenario and policy as printed
	requests, ok, failed, attempts, r429, r5xx, na int
	durations                                      []string // wait/req, wall, p50, p99
}

// parseTable reads the summary table out of the command's output.
func parseTable(t *testing.T, out string) []tableRow {
	t.Helper()
	lines := strings.Split(out, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "scenario") && strings.Contains(l, "attempts") {
			start = i
			break
		}
	}
	require.GreaterOrEqual(t, start, 0, "no table in:\n%s", out)
	assert.Equal(t, strings.Fields(strings.Join(tableHeader, " ")), strings.Fields(lines[start]), "the header")
	var rows []tableRow
	for _, l := range lines[start+1:] {
		if strings.TrimSpace(l) == "" {
			break
		}
		f := strings.Fields(l)
		require.GreaterOrEqual(t, len(f), 12, "row %q", l)
		nums := f[len(f)-11:]
		n := func(i int) int {
			v, err := strconv.Atoi(nums[i])
			require.NoError(t, err, "row %q column %d", l, i)
			return v
		}
		rows = append(rows, tableRow{
			name:     strings.Join(f[:len(f)-11], " "),
			requests: n(0), ok: n(1), failed: n(2), attempts: n(3), r429: n(4), r5xx: n(5), na: n(6),
			durations: nums[7:],
		})
	}
	return rows
}

// checkConsistent asserts what must hold of every run and of its row in
// the printed table.
func checkConsistent(t *testing.T, groups [][]*runResult, rows []tableRow) {
	t.Helper()
	i := 0
	for _, g := range groups {
		for _, r := range g {
			require.Less(t, i, len(rows), "a row per run")
			row, s := rows[i], summarize(r)
			i++
			label := r.scenario.key + " / " + r.policy.name
			assert.True(t, strings.HasSuffix(row.name, r.policy.name), "%s: row %q", label, row.name)

			assert.Equal(t, r.scenario.requests, row.requests, label)
			assert.Equal(t, row.requests, row.ok+row.failed, "%s: succeeded + failed = requests", label)
			assert.Equal(t, s.succeeded, row.ok, label)
			assert.Equal(t, s.attempts, row.attempts, label)
			assert.GreaterOrEqual(t, row.attempts, row.requests, "%s: every request was sent at least once", label)
			assert.LessOrEqual(t, row.r429+row.r5xx+row.na, row.attempts-row.ok,
				"%s: an attempt ends one way; each ok request's last attempt succeeded", label)
			for _, d := range row.durations {
				_, err := time.ParseDuration(d)
				assert.NoError(t, err, "%s: duration %q", label, d)
			}

			// The provider saw exactly the attempts the client made, and
			// answered them as the client counted.
			assert.Equal(t, r.server.Attempts, row.attempts, "%s: attempts the provider received", label)
			assert.Equal(t, r.server.Statuses[429], row.r429, "%s: 429s the provider sent", label)
			fivexx := 0
			for status, n := range r.server.Statuses {
				if status >= 500 {
					fivexx += n
				}
			}
			assert.Equal(t, fivexx, row.r5xx, "%s: 5xx the provider sent", label)
			sent := 0
			for _, tr := range r.requests {
				sent += boolInt(len(tr.attempts) > 0)
			}
			assert.Equal(t, sent, r.server.DistinctBodies(),
				"%s: each request has its own body, and every attempt of it carried the same bytes", label)
			assert.GreaterOrEqual(t, s.p99, s.p50, label)
			assert.Positive(t, s.wall, label)
		}
	}
	assert.Equal(t, i, len(rows), "no extra rows")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestEveryScenarioTinyRunsAndAddsUp(t *testing.T) {
	cfg := tinyConfig(t, allScenarios...)
	cfg.svg = filepath.Join(t.TempDir(), "chart.svg")
	start := time.Now()
	groups, out, progressOut := runTiny(t, cfg)
	t.Logf("ran in %v:\n%s", time.Since(start), out)

	rows := parseTable(t, out)
	checkConsistent(t, groups, rows)
	assert.Len(t, rows, 4*4+4, "four policies for burst, outage, flaky and capacity; four jitter strategies")

	// The chart is written and named at the end.
	assert.FileExists(t, cfg.svg)
	assert.Contains(t, out, "retrysim: chart written to "+cfg.svg)
	assert.True(t, strings.HasSuffix(out, "(open it in a browser)\n"), "the chart's path is the last line")

	// Not a terminal: one plain line per scenario and per finished run.
	assert.Equal(t, len(allScenarios)+len(rows), strings.Count(progressOut, "\n"), progressOut)
	assert.NotContains(t, progressOut, "\r", "no bar redraws in a log")

	// What every policy is, is said before the table.
	for _, name := range []string{"no retries", "fixed 5ms", "exponential", "retryhttp defaults",
		"no jitter", "additive", "full", "decorrelated"} {
		assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(name)+` +\S`, out, "policy %q is described", name)
	}
	assert.Contains(t, out, "it ignores Retry-After", "the hand-written loops are described as they are")
}

// byPolicy finds a run of a group by its policy's name.
func byPolicy(t *testing.T, g []*runResult, name string) row {
	t.Helper()
	for _, r := range g {
		if r.policy.name == name {
			return summarize(r)
		}
	}
	require.Fail(t, "no run of policy "+name)
	return row{}
}

func TestRetryhttpDefaultsSucceedWhereNoRetriesFails(t *testing.T) {
	cfg := tinyConfig(t, "outage", "flaky")
	cfg.policies = []string{"none", "retryhttp"}
	// Every arrival well inside the outage, whatever the machine's load.
	cfg.rate, cfg.outage = 2000, 600*time.Millisecond
	// Enough retries at the tiny backoff (40 ms at most) to outlast it.
	cfg.defaultsExtra = append(cfg.defaultsExtra, retryhttp.WithMaxRetries(30))
	groups, _, _ := runTiny(t, cfg)

	outage := groups[0]
	none, rh := byPolicy(t, outage, "no retries"), byPolicy(t, outage, "retryhttp defaults")
	// Requests meant to arrive during the outage do on any machine not too
	// busy to open 24 connections in 600ms; each of them fails.
	assert.Positive(t, none.failed)
	assert.Equal(t, none.failed, none.byKind[kind5xx])
	assert.Equal(t, map[string]int{"529 Overloaded": none.failed}, none.failures)
	assert.Equal(t, cfg.requests, rh.succeeded, "retryhttp waits the outage out")
	assert.Greater(t, rh.waitPerRequest, time.Duration(0), "and the waiting shows")

	flaky := groups[1]
	none, rh = byPolicy(t, flaky, "no retries"), byPolicy(t, flaky, "retryhttp defaults")
	assert.Positive(t, none.failed)
	assert.Greater(t, rh.succeeded, none.succeeded)
	for reason := range rh.failures {
		assert.Equal(t, "body cut short", reason,
			"retryhttp retries resets and 503s; only a body cut short after the response was returned gets through")
	}
}

func TestContentionReportsCallsAndFinishPerStrategy(t *testing.T) {
	cfg := tinyConfig(t, "contention")
	// Serving 16 writes takes at least 4 rounds of 10ms: for no client to
	// collide, arrivals would have to spread over 40ms.
	cfg.hold = 10 * time.Millisecond
	groups, out, _ := runTiny(t, cfg)
	rows := parseTable(t, out)
	require.Len(t, rows, 4)
	calls := 0
	for i, name := range []string{"no jitter", "additive", "full", "decorrelated"} {
		r := groups[0][i]
		s := summarize(r)
		calls += s.attempts
		assert.Equal(t, name, r.policy.name)
		assert.Equal(t, cfg.clients, s.succeeded, "%s: with enough retries every client finishes", name)
		assert.GreaterOrEqual(t, s.attempts, cfg.clients, name)
		assert.LessOrEqual(t, r.server.PeakInService, cfg.capacity)
		assert.Equal(t, r.server.Statuses[503], s.attempts-cfg.clients, "%s: every extra call was a 503", name)
	}
	assert.Greater(t, calls, 4*cfg.clients, "clients collided and retried")
}

func TestBurstAgainstRateLimitCountsThrottling(t *testing.T) {
	cfg := tinyConfig(t, "burst")
	cfg.policies = []string{"none", "fixed"}
	// A slow refill, so that connecting 24 goroutines does not refill the
	// bucket of 4 as fast as they arrive; retries spread over 200ms.
	cfg.limit, cfg.maxRetries, cfg.base = 100, 10, 20*time.Millisecond
	groups, _, _ := runTiny(t, cfg)
	none, fixed := byPolicy(t, groups[0], "no retries"), byPolicy(t, groups[0], "fixed 20ms")
	assert.Positive(t, none.byKind[kindThrottled], "a burst of %d against a bucket of %d meets 429s", cfg.requests, cfg.limitBurst)
	assert.Equal(t, none.byKind[kindThrottled], none.failed, "without retries each 429 is a failure")
	assert.Greater(t, fixed.succeeded, none.succeeded)
}

// A fixed window admits its quota and no more until it ends: with an hour's
// window nothing refills during the run.
func TestBurstAgainstFixedWindow(t *testing.T) {
	cfg := tinyConfig(t, "burst")
	cfg.policies = []string{"none"}
	cfg.family, cfg.window, cfg.limit = retrytest.GitHub, time.Hour, 0.001 // 4 requests an hour
	cfg.rounding, cfg.clockOffset = retrytest.RoundDown, -3*time.Second
	groups, out, _ := runTiny(t, cfg)
	assert.Contains(t, out, "GitHub-style API limited to 4 requests per fixed window of 1h0m0s")
	none := byPolicy(t, groups[0], "no retries")
	assert.Equal(t, 4, none.succeeded)
	assert.Equal(t, cfg.requests-4, none.byKind[kindThrottled], "the rest are throttled")
	assert.Equal(t, map[int]int{200: 4, 403: cfg.requests - 4}, groups[0][0].server.Statuses)
}

func TestRunStopsAtMaxTime(t *testing.T) {
	cfg := tinyConfig(t, "outage")
	cfg.policies = []string{"none", "fixed"}
	cfg.outage = time.Hour // nothing succeeds
	cfg.base = time.Hour   // the loop waits far longer than the run may take
	cfg.rate = 20          // arrivals would take over a second
	cfg.maxTime = 150 * time.Millisecond
	cfg.svg = filepath.Join(t.TempDir(), "chart.svg")

	var out bytes.Buffer
	start := time.Now()
	groups, err := run(context.Background(), cfg, &out, newProgress(&bytes.Buffer{}, totalRequests(cfg)))
	assert.Less(t, time.Since(start), 2*time.Second, "the cap ends the run")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "stopped at -max-time 150ms")
	assert.NoFileExists(t, cfg.svg, "a cut run writes no chart")

	rows := parseTable(t, out.String())
	require.Len(t, rows, 2)
	for _, r := range rows {
		assert.Equal(t, cfg.requests, r.ok+r.failed, "%s: every request is accounted for", r.name)
		assert.Zero(t, r.ok)
	}
	fixed := summarize(groups[0][1])
	assert.Positive(t, fixed.failures["not sent: -max-time reached"])
	assert.Positive(t, fixed.failures["stopped: -max-time reached"], "requests waiting to retry are stopped")
}

func TestEachRequestHasADeadline(t *testing.T) {
	cfg := tinyConfig(t, "flaky")
	cfg.policies = []string{"none"}
	cfg.requests = 4
	cfg.resets, cfg.unavailable, cfg.truncations = 0, 0, 0
	cfg.slow, cfg.slowDelay = 1, time.Hour
	cfg.timeout = 50 * time.Millisecond
	start := time.Now()
	groups, _, _ := runTiny(t, cfg)
	assert.Less(t, time.Since(start), 2*time.Second)
	s := summarize(groups[0][0])
	assert.Equal(t, map[string]int{"deadline exceeded": 4}, s.failures)
	assert.Equal(t, 4, s.byKind[kindNoAnswer])
}

func TestRealMainWritesChartAndExitsZero(t *testing.T) {
	dir := t.TempDir()
	svg := filepath.Join(dir, "out.svg")
	var stdout, stderr bytes.Buffer
	code := realMain(context.Background(), []string{"-scenario", "contention", "-clients", "6", "-capacity", "3",
		"-hold", "1ms", "-svg", svg}, &stdout, &stderr)
	assert.Equal(t, 0, code, "stderr:\n%s", stderr.String())
	data, err := os.ReadFile(svg)
	require.NoError(t, err)
	assert.Contains(t, string(data), "<svg")
	assert.Contains(t, stdout.String(), "chart written to "+svg)
	assert.Contains(t, stderr.String(), "retrysim: contention / full: 6 requests, 6 ok, 0 failed")
}

func TestFlakyFaultsAreFixedBySeedNotByTiming(t *testing.T) {
	cfg := tinyConfig(t, "flaky")
	cfg.resets, cfg.slow, cfg.truncations, cfg.unavailable = 0, 0, 0, 0.4
	sc := buildScenario(cfg, "flaky")
	none := policyFor(cfg, "none")
	sc.policies = []policy{none, none, none} // at the same time, each against its own provider

	outcomes := func(r *runResult) string {
		var b strings.Builder
		for _, tr := range r.requests {
			b.WriteString(strconv.FormatBool(tr.ok)[:1])
		}
		return b.String()
	}
	runs := runScenario(context.Background(), cfg, &sc, &lines{w: &bytes.Buffer{}})
	first := outcomes(runs[0])
	assert.Contains(t, first, "t")
	assert.Contains(t, first, "f")
	for _, r := range runs[1:] {
		assert.Equal(t, first, outcomes(r), "request i's attempt k meets the same answer in every run")
	}

	cfg.seed++
	other := buildScenario(cfg, "flaky")
	other.policies = []policy{none}
	assert.NotEqual(t, first, outcomes(runScenario(context.Background(), cfg, &other, &lines{w: &bytes.Buffer{}})[0]),
		"another seed, other faults")
}

// In the burst, retryhttp learns the provider's rate from the timing of its
// answers: its run goes first and alone, so the others' herds cannot delay
// them; the hand-written loops then run together. Results keep the policy
// order.
func TestBurstRunsThePacingPoliciesAloneFirst(t *testing.T) {
	cfg := tinyConfig(t, "burst")
	cfg.policies = []string{"none", "fixed", "retryhttp"}
	cfg.maxRetries, cfg.base = 10, 20*time.Millisecond // the loop's run lasts a while
	groups, out, _ := runTiny(t, cfg)
	g := groups[0]
	require.Len(t, g, 3)
	none, fixed, rh := g[0], g[1], g[2]
	assert.Equal(t, "no retries", none.policy.name)
	assert.Equal(t, "fixed 20ms", fixed.policy.name)
	assert.Equal(t, "retryhttp defaults", rh.policy.name)

	rhEnd := rh.start.Add(rh.wall)
	assert.False(t, none.start.Before(rhEnd), "no retries starts after retryhttp's run ended")
	assert.False(t, fixed.start.Before(rhEnd), "fixed starts after retryhttp's run ended")
	assert.True(t, fixed.start.Before(none.start.Add(none.wall+time.Second)), "the loops run together")
	assert.Contains(t, out, "In the burst, retryhttp runs first, on its own")

	// Other scenarios run every policy at the same time.
	cfg = tinyConfig(t, "outage")
	cfg.policies = []string{"none", "retryhttp"}
	cfg.rate = 40 // the run of no retries lasts over half a second
	groups, out, _ = runTiny(t, cfg)
	none, rh = groups[0][0], groups[0][1]
	assert.True(t, rh.start.Before(none.start.Add(none.wall)), "outage: retryhttp runs alongside")
	assert.NotContains(t, out, "runs first, on its own")
}

// The last line of a run says where the chart is, as an absolute path, so
// it can be found (and opened) whatever directory the command ran in.
func TestRunSaysWhereItWroteTheChart(t *testing.T) {
	dir := t.TempDir()
	back, err := os.Getwd()
	require.NoError(t, err)
	require.NoError(t, os.Chdir(dir))
	t.Cleanup(func() { require.NoError(t, os.Chdir(back)) })
	wd, err := os.Getwd()
	require.NoError(t, err)

	cfg := tinyConfig(t, "contention")
	cfg.svg = "chart.svg" // relative to the working directory
	_, out, _ := runTiny(t, cfg)
	where := filepath.Join(wd, "chart.svg")
	assert.FileExists(t, where)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	assert.Equal(t, "retrysim: chart written to "+where+" (open it in a browser)", lines[len(lines)-1],
		"the last line, one line, with the absolute path")
}
