package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

// TestMain fails the run if a provider, a worker or a connection outlives
// the test that started it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// allFlags lists every flag the command defines.
func allFlags(t *testing.T) []*flag.Flag {
	t.Helper()
	cfg := defaultConfig()
	var tf textFlags
	fs := newFlagSet(&cfg, &tf, io.Discard)
	var flags []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f) })
	require.NotEmpty(t, flags)
	return flags
}

func TestHelpExplainsEveryFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := realMain(context.Background(), []string{"-h"}, &stdout, &stderr)
	assert.Equal(t, 0, code, "-h is not an error")
	assert.Empty(t, stdout.String(), "help goes to stderr, the summary's stream stays clean")
	help := stderr.String()

	assert.True(t, strings.HasPrefix(help, "Usage: retrysim [flags]\n"), "help starts with the usage line:\n%s", help)
	for _, name := range scenarioNames {
		assert.Contains(t, help, "\n  "+name+" ", "the header explains scenario %s", name)
	}
	for _, name := range allPolicies {
		assert.Contains(t, help, "\n  "+name+" ", "the header explains policy %s", name)
	}
	for _, f := range allFlags(t) {
		assert.Regexp(t, `\n  -`+regexp.QuoteMeta(f.Name)+`[ \n]`, help, "-h lists -%s", f.Name)
		assert.GreaterOrEqual(t, len(f.Usage), 20, "-%s has a real explanation", f.Name)
	}
	// The defaults shown are the ones the command runs with.
	assert.Contains(t, help, `(default "all")`)
	assert.Contains(t, help, `(default "retrysim.svg")`)
	assert.Contains(t, help, `(default "ceil")`)
}

func TestPolicyFlagsAreTheOnesThatAddCustom(t *testing.T) {
	names := map[string]bool{}
	for _, f := range allFlags(t) {
		names[f.Name] = true
	}
	for _, p := range policyFlags {
		assert.True(t, names[p], "policy flag -%s exists", p)
	}
}

func TestParseFlagsDefaults(t *testing.T) {
	cfg, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, scenarioNames, cfg.scenarios)
	assert.Equal(t, []string{"none", "fixed", "exponential", "retryhttp"}, cfg.policies,
		"no policy flag: no custom policy")
	assert.Equal(t, retrytest.Anthropic, cfg.family)
	assert.Equal(t, retrytest.RoundUp, cfg.rounding)
	assert.Zero(t, cfg.clockOffset)
	assert.Zero(t, cfg.window)
	// The default burst is today's: a token bucket, times rounded up, a
	// clock in step with the client's.
	p := buildScenario(cfg, "burst").provider()
	assert.Equal(t, retrytest.RateLimit{Rate: 100, Burst: 10}, p.RateLimit)
	assert.Equal(t, retrytest.RoundUp, p.Rounding)
	assert.Zero(t, p.ClockOffset)
	assert.Equal(t, "Anthropic-style API limited to 100 requests/s (bucket of 10), answering 429 with Retry-After "+
		"and its rate-limit headers; 200 requests from 200 goroutines at once", buildScenario(cfg, "burst").about)
	assert.Equal(t, retryhttp.DefaultMaxRetries, cfg.maxRetries)
	assert.Equal(t, retryhttp.DefaultBackoffBase, cfg.base)
	assert.Equal(t, retryhttp.AdditiveJitter, cfg.strategy)
	assert.Equal(t, "retrysim.svg", cfg.svg)
	assert.True(t, cfg.breaker && cfg.budget && cfg.parallel)

	// The default run is bounded: every request has a deadline, the run a
	// cap, and the sizes stay modest (the run must take well under a minute).
	assert.Positive(t, cfg.timeout)
	assert.Positive(t, cfg.maxTime)
	capacity := len(cfg.policies) * cfg.callers * cfg.each
	assert.LessOrEqual(t, totalRequests(cfg)-capacity, 3000)
	assert.LessOrEqual(t, capacity, 6000, "the capacity scenario's runs go one by one; at the capacity each takes 0.6s")
	assert.LessOrEqual(t, cfg.timeout, 10*time.Second, "a slow policy's tail is cut at the deadline")
}

func TestParseFlagsPolicyFlagsAddCustom(t *testing.T) {
	cfg, err := parseFlags([]string{"-scenario", "outage,burst", "-strategy", "full", "-base", "100ms",
		"-max", "2s", "-breaker=false", "-max-retries", "3"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"burst", "outage"}, cfg.scenarios, "scenarios run in the canonical order")
	assert.Equal(t, []string{"none", "fixed", "exponential", "retryhttp", "custom"}, cfg.policies)
	assert.Equal(t, retryhttp.FullJitter, cfg.strategy)
	assert.Equal(t, []string{"base", "breaker", "max", "max-retries", "strategy"}, cfg.policySet)

	p := policyFor(cfg, "custom")
	assert.Equal(t, "retryhttp.New(nil, WithMaxRetries(3), WithBackoff(100ms, 2s), WithJitterStrategy(FullJitter), "+
		"WithCircuitBreaker(CircuitBreaker{Disabled: true}))", p.about)

	// The contention scenario compares the custom policy too.
	sc := buildScenario(cfg, "contention")
	var names []string
	for _, p := range sc.policies {
		names = append(names, p.name)
	}
	assert.Equal(t, []string{"no jitter", "additive", "full", "decorrelated", "custom"}, names)
}

// The server-world flags reach the burst scenario's provider.
func TestParseFlagsServerWorld(t *testing.T) {
	cfg, err := parseFlags([]string{"-family", "github", "-rounding", "FLOOR", "-clock-offset", "-3s",
		"-window", "1h", "-limit", "1.5"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, retrytest.RoundDown, cfg.rounding)
	assert.Equal(t, -3*time.Second, cfg.clockOffset)
	assert.Equal(t, time.Hour, cfg.window)
	assert.Empty(t, cfg.policySet, "they shape the provider, not the policy")

	sc := buildScenario(cfg, "burst")
	p := sc.provider()
	assert.NoError(t, p.Validate())
	assert.Equal(t, retrytest.GitHub, p.Family)
	assert.Equal(t, retrytest.RoundDown, p.Rounding)
	assert.Equal(t, -3*time.Second, p.ClockOffset)
	assert.Equal(t, retrytest.RateLimit{Rate: 1.5, Burst: 5400, Window: time.Hour}, p.RateLimit, "-limit x -window")
	assert.Equal(t, "GitHub-style API limited to 5400 requests per fixed window of 1h0m0s, answering 403 with Retry-After "+
		"and its rate-limit headers (absolute times truncated to the second, its clock 3s behind the client's); "+
		"200 requests from 200 goroutines at once", sc.about)

	cfg, err = parseFlags([]string{"-family", "plain", "-rounding", "round", "-clock-offset", "2m"}, io.Discard)
	require.NoError(t, err)
	sc = buildScenario(cfg, "burst")
	assert.Equal(t, retrytest.RoundNearest, sc.provider().Rounding)
	assert.Equal(t, retrytest.RateLimit{Rate: 100, Burst: 10}, sc.provider().RateLimit, "no -window: a bucket")
	assert.Contains(t, sc.about, "and no rate-limit headers (absolute times rounded to the nearest second, its clock 2m0s ahead of the client's)")

	// Only the burst's provider is touched.
	for _, key := range []string{"outage", "flaky", "contention", "capacity"} {
		p := buildScenario(cfg, key).provider()
		assert.Zero(t, p.ClockOffset, key)
		assert.Empty(t, p.Rounding, key)
	}

	assert.Equal(t, 7, windowQuota(0.07, 100*time.Second), "no floating-point noise")
	assert.Equal(t, 1, windowQuota(0.001, time.Second), "at least one")
}

func TestParseFlagsRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-scenario", "storm"}, `-scenario: unknown name "storm"`},
		{[]string{"-scenario", ","}, "-scenario names nothing to run"},
		{[]string{"-policies", "retry"}, `-policies: unknown name "retry"`},
		{[]string{"-family", "azure"}, "-family must be"},
		{[]string{"-strategy", "equal"}, "-strategy must be additive, full or decorrelated"},
		{[]string{"-rounding", "up"}, `-rounding must be ceil, floor or round, got "up"`},
		{[]string{"-rounding", ""}, "-rounding must be ceil, floor or round"},
		{[]string{"-window", "-1s"}, "-window must be between 0s and 24h0m0s, got -1s"},
		{[]string{"-window", "25h"}, "-window must be between 0s and 24h0m0s"},
		{[]string{"-clock-offset", "-25h"}, "-clock-offset must be between -24h0m0s and 24h0m0s, got -25h0m0s"},

		{[]string{"-requests", "0"}, "-requests must be between 1 and 10000"},
		{[]string{"-concurrency", "5000"}, "-concurrency must be between 1 and 1000"},
		{[]string{"-rate", "0"}, "-rate must be a positive number"},
		{[]string{"-rate", "NaN"}, "-rate must be a positive number"},
		{[]string{"-limit", "-1"}, "-limit must be a positive number"},
		{[]string{"-resets", "1.5"}, "-resets must be a probability"},
		{[]string{"-unavailable", "NaN"}, "-unavailable must be a probability"},
		{[]string{"-outage", "0s"}, "-outage must be positive"},
		{[]string{"-hold", "-1ms"}, "-hold must be positive"},
		{[]string{"-timeout", "0s"}, "-timeout must be positive"},
		{[]string{"-max-retries", "-1"}, "-max-retries must be between 0 and 100"},
		{[]string{"-base", "-1s"}, "-base must not be negative"},
		{[]string{"-multiplier", "0.5"}, "-multiplier must be 1 or more"},
		{[]string{"-slots", "0"}, "-slots must be between 1 and 10000"},
		{[]string{"-service", "0s"}, "-service must be between 1µs and 1m0s"},
		{[]string{"-callers", "2000"}, "-callers must be between 1 and 1000"},
		{[]string{"-each", "0"}, "-each must be between 1 and 1000"},
		{[]string{"-callers", "1000", "-each", "21"}, "-callers x -each must be between 1 and 20000, got 21000"},
		{[]string{"-halve-at", "-1s"}, "-halve-at must not be negative"},
		{[]string{"-refusal", "500"}, "-refusal must be 503 or 529, got 500"},
		{[]string{"-refusal-retry-after", "-1s"}, "-refusal-retry-after must not be negative"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		var stderr bytes.Buffer
		code := realMain(context.Background(), tc.args, io.Discard, &stderr)
		assert.Equal(t, 2, code, "%v", tc.args)
		assert.Contains(t, stderr.String(), tc.want, "%v", tc.args)
		assert.Contains(t, stderr.String(), "Run 'retrysim -h' for the flags.", "%v", tc.args)
	}

	var stderr bytes.Buffer
	assert.Equal(t, 2, realMain(context.Background(), []string{"-no-such-flag"}, io.Discard, &stderr))
	assert.Contains(t, stderr.String(), "flag provided but not defined: -no-such-flag")

	// A duration needs its unit; the flag package says so.
	for _, args := range [][]string{{"-window", "60"}, {"-clock-offset", "3"}} {
		stderr.Reset()
		assert.Equal(t, 2, realMain(context.Background(), args, io.Discard, &stderr), "%v", args)
		assert.Contains(t, stderr.String(), `invalid value "`+args[1]+`" for flag `+args[0], "%v", args)
	}
}

func TestPickList(t *testing.T) {
	got, problem := pickList("-x", " c, A ,a,all", []string{"a", "b", "c"})
	assert.Empty(t, problem)
	assert.Equal(t, []string{"a", "b", "c"}, got, "all, repeats and case are handled; order is canonical")
	got, problem = pickList("-x", "c,a", []string{"a", "b", "c"})
	assert.Empty(t, problem)
	assert.Equal(t, []string{"a", "c"}, got)
}
