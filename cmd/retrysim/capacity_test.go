package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp/retrytest"

	"github.com/retryhttp/retryhttp/internal/simkit"
)

// The least time the capacity allows: the physical limit the summary
// divides by.
func TestCapacityShapeIdeal(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		c    capacityShape
		want time.Duration
	}{
		{capacityShape{slots: 50, service: 20 * ms, callers: 150, each: 10}, 600 * ms},                           // 1500 at 2500/s
		{capacityShape{slots: 50, service: 20 * ms, callers: 30, each: 20}, 400 * ms},                            // the 30 callers are the bound: 1500/s
		{capacityShape{slots: 50, service: 20 * ms, callers: 150, each: 10, halveAt: 300 * ms}, 900 * ms},        // 750 at 2500/s, 750 at 1250/s
		{capacityShape{slots: 50, service: 20 * ms, callers: 150, each: 10, halveAt: 2 * time.Second}, 600 * ms}, // done before it halves
		{capacityShape{slots: 5, service: 10 * ms, callers: 10, each: 5, halveAt: 20 * ms}, 220 * ms},            // 10 in 20ms at 500/s, then 40 at 2 slots: 200/s for 200ms
	} {
		assert.Equal(t, tc.want, tc.c.ideal(), "%+v", tc.c)
	}
	assert.Equal(t, 1, capacityShape{slots: 1}.lowSlots(), "a halving leaves at least one slot")
	assert.Nil(t, capacityShape{slots: 4}.changes(), "no -halve-at, no change")
	assert.Equal(t, "429", perSecond(3/0.007))
	assert.Equal(t, "0.0167", perSecond(1/60.0))
}

// The defaults are issue 12's scenario; the flags reach the provider.
func TestCapacityScenarioProvider(t *testing.T) {
	cfg, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	sc := buildScenario(cfg, "capacity")
	p := sc.provider()
	require.NoError(t, p.Validate())
	assert.Equal(t, retrytest.Capacity{Max: 50, Hold: 20 * time.Millisecond, Status: 503}, p.Capacity, "no Retry-After")
	assert.Equal(t, closedLoop, sc.load)
	assert.Equal(t, 150, sc.workers)
	assert.Equal(t, 1500, sc.requests)
	assert.True(t, sc.serial, "it measures throughput: every run alone")
	assert.Len(t, sc.policies, 4, "the shared policies")
	assert.Equal(t, "Anthropic-style API serving 50 requests at once, each for 20ms (2500 requests/s at most), and answering 503 "+
		"at once, with no Retry-After and no rate-limit headers, to any beyond; 150 goroutines send 10 requests each, "+
		"back to back", sc.about)

	cfg, err = parseFlags([]string{"-slots", "20", "-service", "50ms", "-callers", "100", "-each", "3",
		"-halve-at", "300ms", "-refusal", "529", "-refusal-retry-after", "2s"}, io.Discard)
	require.NoError(t, err)
	assert.Empty(t, cfg.policySet, "they shape the provider, not the policy")
	sc = buildScenario(cfg, "capacity")
	p = sc.provider()
	require.NoError(t, p.Validate())
	assert.Equal(t, retrytest.Capacity{Max: 20, Hold: 50 * time.Millisecond, Status: 529, RetryAfter: 2 * time.Second,
		Changes: []retrytest.CapacityChange{{At: 300 * time.Millisecond, Max: 10}}}, p.Capacity)
	assert.Equal(t, 300, sc.requests)
	assert.Contains(t, sc.about, "(400 requests/s at most, halving to 10 slots at 300ms), and answering 529 overloaded_error "+
		"at once, with Retry-After 2s and no rate-limit headers")
}

// summarizeCapacity's arithmetic, on a run built by hand: 2 slots of 10ms
// and 2 callers of 2 requests allow 200 requests/s, so the 4 requests take
// at least 20ms; 3 served in 40ms is 75/s, 0.375 of it.
func TestCapacitySummaryOfAHandBuiltRun(t *testing.T) {
	sc := &scenario{key: "capacity", title: "Fixed capacity", about: "2 slots",
		capacity: &capacityShape{slots: 2, service: 10 * time.Millisecond, callers: 2, each: 2, status: 503}}
	r := fakeRun(sc, "fixed 5ms",
		traced(0, 0, 10, true, try(0, 10, kindOK, 200)),
		traced(1, 0, 40, true, try(0, 1, kind5xx, 503), try(6, 40, kindOK, 200)),
		traced(2, 10, 30, true, try(10, 30, kindOK, 200)),
		traced(3, 30, 31, false, try(30, 31, kind5xx, 503)))
	r.server = retrytest.Stats{Attempts: 5, Statuses: map[int]int{200: 3, 503: 2}}

	cr := summarizeCapacity(r)
	assert.InDelta(t, 75, cr.goodput, 1e-9)
	assert.InDelta(t, 0.375, cr.ofLimit, 1e-9)
	assert.Equal(t, 1, cr.failed)
	assert.Equal(t, 2, cr.refused)
	assert.Equal(t, "40.0%", cr.refusedShare())
	assert.Equal(t, 10*time.Millisecond, cr.p50, "of 1, 10, 20 and 40ms")
	assert.Equal(t, 40*time.Millisecond, cr.p99)
	assert.Equal(t, "3/4 ok, 0.38 of capacity, 40.0% refused, p99 40ms", capacityStats(r))
	assert.Equal(t, "capacity / fixed 5ms: 4 requests, 3 ok, 1 failed, 5 attempts, 40ms, 0.38 of capacity", finishedLine(r))

	var out bytes.Buffer
	printCapacity(&out, [][]*runResult{{r}})
	assert.Equal(t, `
Capacity: 2 slots x 10ms = 200 requests/s at most; 4 requests from 2 goroutines take at least 20ms (200 requests/s).
  policy     req/s  of capacity  failed  refused  refused %   p50   p99
  fixed 5ms     75         0.38       1        2      40.0%  10ms  40ms
req/s: requests served per second until the last one ended. of capacity: that over the 200/s
the capacity allows this load. refused: attempts the provider answered 503, and their share of all
attempts. p50, p99: request latency, failed requests included.
`, out.String())

	out.Reset()
	printCapacity(&out, chartFixture())
	assert.Empty(t, out.String(), "no capacity scenario, no capacity table")
}

// capacityTable reads the capacity table's rows back out of the output:
// the policy, then req/s, of capacity, failed, refused, refused %.
func capacityTable(t *testing.T, out string) map[string][]string {
	t.Helper()
	_, table, found := strings.Cut(out, "\nCapacity: ")
	require.True(t, found, "no capacity table in:\n%s", out)
	rows := map[string][]string{}
	for _, l := range strings.Split(table, "\n")[2:] {
		if strings.HasPrefix(l, "req/s:") {
			break
		}
		f := strings.Fields(l)
		require.GreaterOrEqual(t, len(f), 8, "row %q", l)
		rows[strings.Join(f[:len(f)-7], " ")] = f[len(f)-7:]
	}
	return rows
}

// A tiny run of the scenario: what each policy got adds up with what the
// provider saw, the capacity table says so, and the runs went one by one.
func TestCapacityScenarioTinyRun(t *testing.T) {
	cfg := tinyConfig(t, "capacity")
	cfg.maxRetries = 20 // the loops retry until they get in
	cfg.svg = filepath.Join(t.TempDir(), "chart.svg")
	groups, out, progressOut := runTiny(t, cfg)
	checkConsistent(t, groups, parseTable(t, out))
	assert.Contains(t, out, "In the capacity scenario, the policies run one after another, each alone")
	assert.Contains(t, out, "\nPolicies (capacity):\n")
	assert.Contains(t, out, "\nCapacity: 4 slots x 2ms = 2000 requests/s at most; 36 requests from 12 goroutines "+
		"take at least 18ms (2000 requests/s).\n")

	rows := capacityTable(t, out)
	g := groups[0]
	require.Len(t, g, 4)
	require.Len(t, rows, 4)
	for i, r := range g {
		s, cr := summarize(r), summarizeCapacity(r)
		label := r.policy.name
		assert.LessOrEqual(t, r.server.PeakInService, cfg.slots, label)
		assert.Equal(t, r.server.Statuses[503], cr.refused, label)
		assert.Equal(t, s.byKind[kind5xx], cr.refused, "%s: every 5xx was a refusal", label)
		// The provider serves at most 4 at once for at least 2ms each: no
		// run can beat 2000 requests/s over its wall time.
		assert.Positive(t, cr.ofLimit, label)
		assert.LessOrEqual(t, cr.ofLimit, 1.0, label)
		assert.Equal(t, []string{strconv.FormatFloat(cr.goodput, 'f', 0, 64), strconv.FormatFloat(cr.ofLimit, 'f', 2, 64),
			strconv.Itoa(s.failed), strconv.Itoa(cr.refused), cr.refusedShare(), simkit.Round3(s.p50), simkit.Round3(s.p99)},
			rows[label], label)
		if i > 0 {
			prev := g[i-1]
			assert.False(t, r.start.Before(prev.start.Add(prev.wall)), "%s starts after %s ended", label, prev.policy.name)
		}
	}
	none := byPolicy(t, g, "no retries")
	assert.Equal(t, none.byKind[kind5xx], none.failed, "without retries each refusal is a failure")
	for _, name := range []string{"fixed 5ms", "exponential", "retryhttp defaults"} {
		p := byPolicy(t, g, name)
		assert.Zero(t, p.failed, "%s retries its refusals until it gets in", name)
	}
	assert.Contains(t, progressOut, "of capacity [", "the progress line says it too")

	data, err := os.ReadFile(cfg.svg)
	require.NoError(t, err)
	stats := 0
	for _, e := range decodeSVG(t, data) {
		if e.name == "text" && e.attrs["class"] == "pstats" {
			assert.Regexp(t, `^\d+/36 ok, [01]\.\d\d of capacity, \d+\.\d% refused, p99 \S+$`, e.text)
			stats++
		}
	}
	assert.Equal(t, 4, stats, "a panel per policy says its share of the capacity")
}

// -halve-at reaches the provider: halved before the first request arrives,
// it never has more than half its slots in service; -refusal 529 refuses
// with 529, which fails the requests of no retries as 529 Overloaded.
func TestCapacityHalvedAndRefusedWith529(t *testing.T) {
	cfg := tinyConfig(t, "capacity")
	cfg.policies = []string{"none"}
	cfg.halveAt, cfg.refusal = time.Microsecond, 529
	groups, out, _ := runTiny(t, cfg)
	r := groups[0][0]
	assert.LessOrEqual(t, r.server.PeakInService, cfg.slots/2)
	assert.Zero(t, r.server.Statuses[503])
	s, cr := summarize(r), summarizeCapacity(r)
	assert.Equal(t, r.server.Statuses[529], cr.refused)
	if s.failed > 0 {
		assert.Equal(t, map[string]int{"529 Overloaded": s.failed}, s.failures)
	}
	assert.Contains(t, out, "Capacity: 4 slots x 2ms = 2000 requests/s at most, 2 slots from 1µs;")
	assert.Contains(t, out, "refused: attempts the provider answered 529")
}

// With -scenario capacity alone the command runs it and exits 0.
func TestRealMainRunsTheCapacityScenario(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := realMain(context.Background(), []string{"-scenario", "capacity", "-policies", "none,retryhttp",
		"-slots", "3", "-service", "1ms", "-callers", "6", "-each", "2", "-svg", ""}, &stdout, &stderr)
	assert.Equal(t, 0, code, "stderr:\n%s", stderr.String())
	rows := capacityTable(t, stdout.String())
	assert.Len(t, rows, 2)
	assert.Contains(t, rows, "retryhttp defaults")
}
