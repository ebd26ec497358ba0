package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

// config is what the flags set.
type config struct {
	scenarios []string // in run order
	policies  []string // for burst, outage, flaky and capacity

	// Sizes of the scenarios.
	requests    int     // requests per run in burst, outage and flaky
	concurrency int     // goroutines sending the burst
	rate        float64 // arrivals per second in outage and flaky
	limit       float64 // burst: the provider's rate limit, requests per second
	limitBurst  int     // burst: the bucket's size
	family      retrytest.Family
	rounding    retrytest.Rounding // burst: how absolute times in headers are cut to seconds
	clockOffset time.Duration      // burst: the provider's clock minus the client's
	window      time.Duration      // burst: > 0 makes the limit a fixed window
	outage      time.Duration
	resets      float64
	unavailable float64
	slow        float64
	slowDelay   time.Duration
	truncations float64
	clients     int
	capacity    int
	hold        time.Duration

	// The capacity scenario: slots x service time, callers x each.
	slots             int
	service           time.Duration
	callers, each     int
	halveAt           time.Duration // > 0: the slots halve then
	refusal           int           // 503 or 529
	refusalRetryAfter time.Duration // > 0: sent with each refusal

	seed     int64
	timeout  time.Duration // per request
	maxTime  time.Duration // the whole run
	parallel bool
	svg      string

	// The policy flags: the hand-written loops use the first four; the
	// custom retryhttp policy uses them all.
	maxRetries     int
	base, max      time.Duration
	multiplier     float64
	jitter         time.Duration
	strategy       retryhttp.JitterStrategy
	attemptTimeout time.Duration
	breaker        bool
	budget         bool

	// policySet names the policy flags given on the command line, in
	// flag order; any of them adds the custom policy.
	policySet []string

	// defaultsExtra is appended to the options of the "retryhttp defaults"
	// policy. It is nil in the command; tests use it to shrink the
	// defaults' one-second waits so a scenario runs in milliseconds.
	defaultsExtra []retryhttp.Option
}

// allScenarios lists the scenarios in the order "all" runs them.
var allScenarios = []string{"burst", "outage", "flaky", "contention", "capacity"}

// allPolicies lists the policies the -policies flag may name.
var allPolicies = []string{"none", "fixed", "exponential", "retryhttp", "custom"}

// policyFlags are the flags that shape the custom retryhttp policy.
var policyFlags = []string{"max-retries", "base", "max", "multiplier", "jitter", "strategy", "attempt-timeout", "breaker", "budget"}

// defaultConfig is the configuration with no flags: sizes picked so the
// default run takes well under a minute on two cores.
func defaultConfig() config {
	return config{
		scenarios:   scenarioNames,
		policies:    []string{"none", "fixed", "exponential", "retryhttp"},
		requests:    200,
		concurrency: 200,
		rate:        50,
		limit:       100,
		limitBurst:  10,
		family:      retrytest.Anthropic,
		rounding:    retrytest.RoundUp,
		outage:      2 * time.Second,
		resets:      0.05,
		unavailable: 0.10,
		slow:        0.05,
		slowDelay:   time.Second,
		truncations: 0.02,
		clients:     100,
		capacity:    5,
		hold:        10 * time.Millisecond,
		slots:       50,
		service:     20 * time.Millisecond,
		callers:     150,
		each:        10,
		refusal:     http.StatusServiceUnavailable,
		seed:        1,
		timeout:     10 * time.Second,
		maxTime:     3 * time.Minute,
		parallel:    true,
		svg:         "retrysim.svg",

		maxRetries: retryhttp.DefaultMaxRetries,
		base:       retryhttp.DefaultBackoffBase,
		max:        retryhttp.DefaultBackoffMax,
		multiplier: retryhttp.DefaultMultiplier,
		jitter:     retryhttp.DefaultJitter,
		strategy:   retryhttp.AdditiveJitter,
		breaker:    true,
		budget:     true,
	}
}

const usageHeader = `Usage: retrysim [flags]

retrysim shows what a retry policy does to a client of a rate-limited, failing
API. It starts fake providers (package retrytest) on 127.0.0.1, runs scenarios
against them with several policies side by side, and prints a summary table
and writes an SVG chart of requests over time by outcome.

Scenarios (-scenario):
  burst       many goroutines at once against a rate limit (429s); -family,
              -window, -rounding and -clock-offset pick the server imitated
  outage      529 overloaded for the first -outage, then 200
  flaky       connection resets, 503s, slow headers and bodies cut short
  contention  -clients clients each making one write against a provider
              with -capacity slots, as in AWS's "Exponential Backoff and
              Jitter": total calls and time until the last client finishes,
              per jitter strategy (none, additive, full, decorrelated)
  capacity    -callers goroutines each sending -each requests back to back
              against a provider serving -slots at once for -service each,
              refusing any beyond with -refusal and no rate-limit headers:
              throughput as a share of what the capacity allows, refusals
  outbox      an outage longer than the callers' deadlines: the outbox
              module saves the requests and delivers them after recovery;
              fails the run if one is lost. Runs last, as a subprocess
              (the outbox module's outbox/cmd/outboxsim, built from this
              clone: the outbox needs bbolt, which the library's module
              must not require), with settings of its own: of the flags
              below only -max-time applies to it (its own: go -C outbox
              run ./cmd/outboxsim -h)

Policies (-policies) for burst, outage, flaky and capacity:
  none         a plain http.Client: one attempt
  fixed        a hand-written loop: -max-retries retries, -base apart
  exponential  a hand-written loop: -base doubling (-multiplier) up to -max,
               no jitter
  retryhttp    retryhttp.New(nil) with its defaults
  custom       retryhttp.New(nil, options from the policy flags); added
               whenever a policy flag is given
The hand-written loops retry 408, 429, 5xx and network errors and ignore
Retry-After, as loops written by hand often do.

With no flags it runs every scenario at a modest size in well under a minute.
Faults are drawn from a source seeded by -seed; timing on a real network
stack still varies a little from run to run.

Flags:
`

// textFlags are the flags parsed as strings and converted by fill.
type textFlags struct {
	scenarios, policies, family, rounding, strategy string
}

// parseFlags reads and checks the flags. Problems are reported on stderr;
// the error only tells the caller to stop.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := defaultConfig()
	var tf textFlags
	fs := newFlagSet(&cfg, &tf, stderr)
	if err := fs.Parse(args); err != nil {
		return cfg, err // flag has printed the problem and the usage
	}
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(policyFlags, f.Name) {
			cfg.policySet = append(cfg.policySet, f.Name)
		}
	})

	problem := cfg.fill(tf)
	if problem == "" && fs.NArg() > 0 {
		problem = fmt.Sprintf("unexpected argument %q: retrysim takes flags only", fs.Arg(0))
	}
	if problem != "" {
		fmt.Fprintf(stderr, "retrysim: %s\nRun 'retrysim -h' for the flags.\n", problem)
		return cfg, errors.New(problem)
	}
	return cfg, nil
}

// newFlagSet defines every flag, writing into cfg and tf, with -h's text.
func newFlagSet(cfg *config, tf *textFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("retrysim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tf.family, tf.rounding, tf.strategy = string(cfg.family), string(cfg.rounding), cfg.strategy.String()
	fs.StringVar(&tf.scenarios, "scenario", "all", "scenarios to run, comma-separated: burst, outage, flaky, contention,\ncapacity, outbox, or all")
	fs.StringVar(&tf.policies, "policies", strings.Join(cfg.policies, ","), "policies to compare in burst, outage, flaky and capacity,\ncomma-separated: none, fixed, exponential, retryhttp, custom")

	fs.IntVar(&cfg.requests, "requests", cfg.requests, "requests each policy sends in burst, outage and flaky (1 to 10000)")
	fs.IntVar(&cfg.concurrency, "concurrency", cfg.concurrency, "burst: goroutines sending at once, each its next request as soon as\nthe last one is done (1 to 1000)")
	fs.Float64Var(&cfg.rate, "rate", cfg.rate, "outage and flaky: requests arriving per second, each in its own goroutine")
	fs.Float64Var(&cfg.limit, "limit", cfg.limit, "burst: the provider's rate limit in requests per second")
	fs.IntVar(&cfg.limitBurst, "limit-burst", cfg.limitBurst, "burst: how many requests the provider's bucket lets through at once")
	fs.StringVar(&tf.family, "family", tf.family, "burst: whose rate-limit headers and error bodies the provider sends:\nanthropic, openai, github, ietf or plain")
	fs.DurationVar(&cfg.window, "window", cfg.window, "burst: when positive, the provider's limit is a fixed window of this\nlength, as GitHub's API counts, admitting -limit x -window requests\nin each (-limit-burst is then unused); 0 is a token bucket")
	fs.StringVar(&tf.rounding, "rounding", tf.rounding, "burst: how the provider cuts the absolute times in its headers\n(resets, Retry-After dates) to whole seconds: ceil (never early),\nfloor (truncated, as many servers do) or round")
	fs.DurationVar(&cfg.clockOffset, "clock-offset", cfg.clockOffset, "burst: the provider's clock minus the client's, e.g. -3s: its Date,\nresets and Retry-After dates are written on that clock (-24h to 24h)")
	fs.DurationVar(&cfg.outage, "outage", cfg.outage, "outage: how long the provider answers 529 before it recovers")
	fs.Float64Var(&cfg.resets, "resets", cfg.resets, "flaky: probability that an attempt's connection is reset")
	fs.Float64Var(&cfg.unavailable, "unavailable", cfg.unavailable, "flaky: probability that an attempt is answered 503")
	fs.Float64Var(&cfg.slow, "slow", cfg.slow, "flaky: probability that an answer's headers come -slow-delay late")
	fs.DurationVar(&cfg.slowDelay, "slow-delay", cfg.slowDelay, "flaky: how late a slow answer's headers come")
	fs.Float64Var(&cfg.truncations, "truncations", cfg.truncations, "flaky: probability that a 200's body is cut short (no policy can\nretry that: the response has already been handed to the caller)")
	fs.IntVar(&cfg.clients, "clients", cfg.clients, "contention: clients, each with its own retrying transport, making\none write each (1 to 10000)")
	fs.IntVar(&cfg.capacity, "capacity", cfg.capacity, "contention: writes the provider serves at once; it answers 503 to\nany beyond")
	fs.DurationVar(&cfg.hold, "hold", cfg.hold, "contention: how long each write takes; the strategies' backoff\nstarts at this and is capped at 100 times it")
	fs.IntVar(&cfg.slots, "slots", cfg.slots, "capacity: requests the provider serves at once (1 to 10000)")
	fs.DurationVar(&cfg.service, "service", cfg.service, "capacity: how long the provider takes to serve each request")
	fs.IntVar(&cfg.callers, "callers", cfg.callers, "capacity: goroutines sending, each its next request as soon as its\nlast one is done (1 to 1000)")
	fs.IntVar(&cfg.each, "each", cfg.each, "capacity: requests each of the -callers sends (1 to 1000; at most\n20000 in all)")
	fs.DurationVar(&cfg.halveAt, "halve-at", cfg.halveAt, "capacity: when positive, the provider's slots halve at this time\nfrom its start, as a server losing half its replicas; 0 keeps them")
	fs.IntVar(&cfg.refusal, "refusal", cfg.refusal, "capacity: status of a refusal: 503, or 529 (Anthropic's\noverloaded_error, as an overloaded LLM API sends)")
	fs.DurationVar(&cfg.refusalRetryAfter, "refusal-retry-after", cfg.refusalRetryAfter, "capacity: when positive, each refusal carries this Retry-After\n(in whole seconds, rounded up); 0 sends none")

	fs.Int64Var(&cfg.seed, "seed", cfg.seed, "seed of the providers' random faults: the same seed gives the same\nfaults in the same order")
	fs.DurationVar(&cfg.timeout, "timeout", cfg.timeout, "deadline of each request, retries and waits included")
	fs.DurationVar(&cfg.maxTime, "max-time", cfg.maxTime, "cap on the whole run: requests still going then are cancelled")
	fs.BoolVar(&cfg.parallel, "parallel", cfg.parallel, "run a scenario's policies at the same time, each against its own\nprovider (in the burst, retryhttp's still run alone, first); false\nruns them all one after another (slower)")
	fs.StringVar(&cfg.svg, "svg", cfg.svg, `file to write the chart to; "" writes none`)

	fs.IntVar(&cfg.maxRetries, "max-retries", cfg.maxRetries, "policy: retries after the first attempt (fixed, exponential, custom)")
	fs.DurationVar(&cfg.base, "base", cfg.base, "policy: the first wait: between every try for fixed, doubling for\nexponential and custom (retryhttp.WithBackoff)")
	fs.DurationVar(&cfg.max, "max", cfg.max, "policy: the longest computed wait (exponential, custom)")
	fs.Float64Var(&cfg.multiplier, "multiplier", cfg.multiplier, "policy: growth factor between waits (exponential, custom)")
	fs.DurationVar(&cfg.jitter, "jitter", cfg.jitter, "policy: most random time added to each wait with the additive\nstrategy (custom; retryhttp.WithJitter)")
	fs.StringVar(&tf.strategy, "strategy", tf.strategy, "policy: jitter strategy of custom: additive, full or decorrelated\n(retryhttp.WithJitterStrategy)")
	fs.DurationVar(&cfg.attemptTimeout, "attempt-timeout", cfg.attemptTimeout, "policy: bound on each attempt until its headers, 0 for none\n(custom; retryhttp.WithAttemptTimeout)")
	fs.BoolVar(&cfg.breaker, "breaker", cfg.breaker, "policy: circuit breaker on (custom; retryhttp.WithCircuitBreaker)")
	fs.BoolVar(&cfg.budget, "budget", cfg.budget, "policy: retry budget on (custom; retryhttp.WithRetryBudget)")

	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageHeader)
		fs.PrintDefaults()
	}
	return fs
}

// fill converts the string flags and checks every value, returning what is
// wrong, or "".
func (cfg *config) fill(tf textFlags) string {
	var err string
	if cfg.scenarios, err = pickList("-scenario", tf.scenarios, scenarioNames); err != "" {
		return err
	}
	if cfg.policies, err = pickList("-policies", tf.policies, allPolicies); err != "" {
		return err
	}
	if len(cfg.policySet) > 0 && !slices.Contains(cfg.policies, "custom") {
		cfg.policies = append(cfg.policies, "custom")
	}
	switch f := retrytest.Family(strings.ToLower(tf.family)); f {
	case retrytest.Anthropic, retrytest.OpenAI, retrytest.GitHub, retrytest.IETF:
		cfg.family = f
	case "plain":
		cfg.family = retrytest.Plain
	default:
		return fmt.Sprintf("-family must be anthropic, openai, github, ietf or plain, got %q", tf.family)
	}
	switch r := retrytest.Rounding(strings.ToLower(tf.rounding)); r {
	case retrytest.RoundUp, retrytest.RoundDown, retrytest.RoundNearest:
		cfg.rounding = r
	default:
		return fmt.Sprintf("-rounding must be ceil, floor or round, got %q", tf.rounding)
	}
	switch strings.ToLower(tf.strategy) {
	case "additive":
		cfg.strategy = retryhttp.AdditiveJitter
	case "full":
		cfg.strategy = retryhttp.FullJitter
	case "decorrelated":
		cfg.strategy = retryhttp.DecorrelatedJitter
	default:
		return fmt.Sprintf("-strategy must be additive, full or decorrelated, got %q", tf.strategy)
	}
	between := func(name string, v, lo, hi int) string {
		if v < lo || v > hi {
			return fmt.Sprintf("%s must be between %d and %d, got %d", name, lo, hi, v)
		}
		return ""
	}
	positive := func(name string, v float64) string {
		if !(v > 0) || math.IsInf(v, 1) {
			return fmt.Sprintf("%s must be a positive number, got %v", name, v)
		}
		return ""
	}
	probability := func(name string, v float64) string {
		if !(v >= 0 && v <= 1) { // also rejects NaN
			return fmt.Sprintf("%s must be a probability between 0 and 1, got %v", name, v)
		}
		return ""
	}
	nonNegative := func(name string, d time.Duration) string {
		if d < 0 {
			return fmt.Sprintf("%s must not be negative, got %v", name, d)
		}
		return ""
	}
	durBetween := func(name string, d, lo, hi time.Duration) string {
		if d < lo || d > hi {
			return fmt.Sprintf("%s must be between %v and %v, got %v", name, lo, hi, d)
		}
		return ""
	}
	positiveDur := func(name string, d time.Duration) string {
		if d <= 0 {
			return fmt.Sprintf("%s must be positive, got %v", name, d)
		}
		return ""
	}
	checks := []string{
		between("-requests", cfg.requests, 1, 10000),
		between("-concurrency", cfg.concurrency, 1, 1000),
		positive("-rate", cfg.rate),
		positive("-limit", cfg.limit),
		between("-limit-burst", cfg.limitBurst, 1, 1000000),
		durBetween("-window", cfg.window, 0, 24*time.Hour),
		durBetween("-clock-offset", cfg.clockOffset, -24*time.Hour, 24*time.Hour),
		positiveDur("-outage", cfg.outage),
		probability("-resets", cfg.resets),
		probability("-unavailable", cfg.unavailable),
		probability("-slow", cfg.slow),
		nonNegative("-slow-delay", cfg.slowDelay),
		probability("-truncations", cfg.truncations),
		between("-clients", cfg.clients, 1, 10000),
		between("-capacity", cfg.capacity, 1, 10000),
		positiveDur("-hold", cfg.hold),
		between("-slots", cfg.slots, 1, 10000),
		durBetween("-service", cfg.service, time.Microsecond, time.Minute),
		between("-callers", cfg.callers, 1, 1000),
		between("-each", cfg.each, 1, 1000),
		between("-callers x -each", cfg.callers*cfg.each, 1, 20000),
		nonNegative("-halve-at", cfg.halveAt),
		nonNegative("-refusal-retry-after", cfg.refusalRetryAfter),
		positiveDur("-timeout", cfg.timeout),
		positiveDur("-max-time", cfg.maxTime),
		between("-max-retries", cfg.maxRetries, 0, 100),
		nonNegative("-base", cfg.base),
		nonNegative("-max", cfg.max),
		nonNegative("-jitter", cfg.jitter),
		nonNegative("-attempt-timeout", cfg.attemptTimeout),
	}
	if !slices.Contains(refusalStatuses, cfg.refusal) {
		checks = append(checks, fmt.Sprintf("-refusal must be 503 or 529, got %d", cfg.refusal))
	}
	if !(cfg.multiplier >= 1) || math.IsInf(cfg.multiplier, 1) {
		checks = append(checks, fmt.Sprintf("-multiplier must be 1 or more, got %v", cfg.multiplier))
	}
	for _, c := range checks {
		if c != "" {
			return c
		}
	}
	return ""
}

// pickList parses a comma-separated list of names from allowed ("all" for
// every one), keeping the order of allowed and dropping repeats.
func pickList(flagName, list string, allowed []string) ([]string, string) {
	var picked []string
	for _, name := range strings.Split(list, ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		switch {
		case name == "":
		case name == "all":
			picked = append(picked, allowed...)
		case slices.Contains(allowed, name):
			picked = append(picked, name)
		default:
			return nil, fmt.Sprintf("%s: unknown name %q; choose from %s, or all", flagName, name, strings.Join(allowed, ", "))
		}
	}
	var out []string
	for _, name := range allowed {
		if slices.Contains(picked, name) {
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		return nil, flagName + " names nothing to run"
	}
	return out, ""
}
