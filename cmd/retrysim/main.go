// Command retrysim shows what a retry policy does to a client of a
// rate-limited, failing API, and helps choose retryhttp's settings.
//
// It starts fake providers from package retrytest on 127.0.0.1 and runs
// scenarios against them:
//
//   - burst: many goroutines at once against a rate limit that answers 429
//     with Retry-After and a provider's rate-limit headers; -family picks
//     the provider, -window makes its limit a fixed window, and -rounding
//     and -clock-offset make the times in its headers as coarse and as
//     skewed as real servers' are;
//   - outage: 529 overloaded for the first seconds, then 200;
//   - flaky: connection resets, 503s, slow headers, bodies cut short;
//   - contention: many clients each making one write against a provider of
//     fixed capacity, as in AWS's "Exponential Backoff and Jitter" study,
//     comparing jitter strategies;
//   - capacity: goroutines sending back to back against a provider that
//     serves a fixed number of requests at once and refuses any beyond
//     (503, or 529 with -refusal), with no rate-limit headers, printing
//     each policy's throughput as a share of what the capacity allows;
//     -halve-at halves the capacity mid-run.
//   - outbox: an outage that outlasts the callers' deadlines, with the
//     outbox module saving the requests the transport gives up on and
//     delivering them after recovery: none may be lost.
//
// Each scenario but outbox is run with several policies side by side: no
// retries, a hand-written loop with a fixed delay, one with exponential
// backoff and no jitter, retryhttp's defaults, and retryhttp with settings
// given as flags. While they run it shows progress on stderr (a bar on a
// terminal, plain lines otherwise). At the end it prints a summary table,
// writes an SVG chart of attempts over time by outcome, with the time
// requests spent waiting in the client, and says where the chart is (its
// absolute path).
//
// The outbox scenario runs after the others, as a subprocess, with
// settings of its own, and prints a table of its own. The outbox is a
// module of its own because it stores requests with bbolt (or Redis),
// which this module, the library's, must not require of its users; so the
// scenario's code is the outbox module's outboxsim command, which retrysim
// builds from the outbox/ directory of the clone it runs in and runs,
// streaming what it prints. The run fails if that command reports a lost
// request. It needs a clone of the repository: leave it out with
// -scenario burst,outage,flaky,contention,capacity where there is none.
//
// Usage:
//
//	go run ./cmd/retrysim [flags]
//
// Run it with -h for the flags. With none it runs every scenario at a
// modest size in well under a minute.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/retryhttp/retryhttp/internal/simkit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := realMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// realMain runs the command and returns its exit code: 0 on success, 1 when
// the run itself fails, 2 for bad usage.
func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.maxTime) // the outbox scenario's time counts too
	defer cancel()
	cfg, withOutbox := takeOutbox(cfg) // a subprocess: see outbox.go
	if len(cfg.scenarios) > 0 {
		if _, err := run(ctx, cfg, stdout, newProgress(stderr, totalRequests(cfg))); err != nil {
			fmt.Fprintln(stderr, "retrysim:", err)
			return 1
		}
	}
	if withOutbox {
		if err := runOutbox(ctx, stdout, stderr); err != nil {
			fmt.Fprintln(stderr, "retrysim:", err)
			return 1
		}
	}
	return 0
}

// totalRequests is how many requests the whole run sends, for the bar.
func totalRequests(cfg config) int {
	cfg, _ = takeOutbox(cfg) // its requests are the subprocess's
	n := 0
	for _, key := range cfg.scenarios {
		sc := buildScenario(cfg, key)
		n += sc.requests * len(sc.policies)
	}
	return n
}

// run runs the chosen scenarios one after the other, then prints the
// summary to w and writes the chart. It returns every run's result, grouped
// by scenario.
func run(ctx context.Context, cfg config, w io.Writer, prog progress) ([][]*runResult, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.maxTime)
	defer cancel()

	scenarios := make([]*scenario, len(cfg.scenarios))
	for i, key := range cfg.scenarios {
		sc := buildScenario(cfg, key)
		scenarios[i] = &sc
	}
	printPreamble(w, cfg, scenarios)

	start := time.Now()
	var groups [][]*runResult
	for _, sc := range scenarios {
		if ctx.Err() != nil {
			break
		}
		prog.scenario(sc)
		groups = append(groups, runScenario(ctx, cfg, sc, prog))
	}
	prog.done()
	elapsed := time.Since(start)

	var rows []row
	for _, g := range groups {
		for _, r := range g {
			rows = append(rows, summarize(r))
		}
	}
	fmt.Fprintln(w)
	printTable(w, rows)
	printFailures(w, rows)
	fmt.Fprintf(w, "\nok: requests that got a 2xx with its whole body. attempts: tries sent, retries included.\n"+
		"429, 5xx, no answer: attempts that ended so. wait/req: mean time a request spent waiting in the\n"+
		"client. wall: until the last request ended. p50, p99: request latency, failed requests included.\n")
	printCapacity(w, groups)
	fmt.Fprintf(w, "\nretrysim: ran %d scenario(s) in %s.\n", len(groups), simkit.Round3(elapsed))

	if err := ctx.Err(); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("stopped at -max-time %s; the table shows what finished", cfg.maxTime)
		}
		return groups, err
	}
	if cfg.svg != "" {
		if err := os.WriteFile(cfg.svg, writeChart(cfg, groups), 0o644); err != nil {
			return groups, fmt.Errorf("write chart: %w", err)
		}
		fmt.Fprintf(w, "retrysim: chart written to %s (open it in a browser)\n", absPath(cfg.svg))
	}
	return groups, nil
}

// absPath is path made absolute, so the last line of a run says where the
// chart is whatever directory the command ran in; path itself if the
// working directory cannot be found.
func absPath(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// countPacing is how many of ps pace by the provider's rate (retryhttp's).
func countPacing(ps []policy) int {
	n := 0
	for _, p := range ps {
		if p.paces {
			n++
		}
	}
	return n
}

// printPreamble says what is about to run: each scenario and each policy.
func printPreamble(w io.Writer, cfg config, scenarios []*scenario) {
	fmt.Fprintf(w, "retrysim: %d scenario(s) against fake providers (package retrytest) on 127.0.0.1, seed %d.\n",
		len(scenarios), cfg.seed)
	fmt.Fprintln(w, "Every policy sends through go-cleanhttp's pooled transport, with a recorder under it that times each attempt.")
	if cfg.parallel {
		fmt.Fprintln(w, "A scenario's policies run at the same time, each against a provider of its own (-parallel=false: one by one).")
		for _, sc := range scenarios {
			if sc.serial {
				fmt.Fprintf(w, "In the %s scenario, the policies run one after another, each alone: it measures throughput,\n"+
					"which runs side by side would take from one another on the machine's cores.\n", sc.key)
				continue
			}
			if !sc.pacedAlone {
				continue
			}
			switch n := countPacing(sc.policies); {
			case n == 1:
				fmt.Fprintf(w, "In the %s, retryhttp runs first, on its own: it learns the provider's rate from the timing of its\n"+
					"answers, which the others' herds of goroutines would delay on a busy machine.\n", sc.key)
			case n > 1:
				fmt.Fprintf(w, "In the %s, retryhttp's policies run first, one at a time: they learn the provider's rate from the\n"+
					"timing of their answers, which the others' herds of goroutines would delay on a busy machine.\n", sc.key)
			}
		}
	}
	fmt.Fprintln(w)
	for _, sc := range scenarios {
		fmt.Fprintf(w, "%-11s %s: %s.\n", sc.key, sc.title, sc.about)
	}
	var shared, jitter []policy
	var sharedBy []string
	for _, sc := range scenarios {
		if sc.load == manyClients {
			jitter = sc.policies
		} else {
			shared = sc.policies
			sharedBy = append(sharedBy, sc.key)
		}
	}
	if len(shared) > 0 {
		fmt.Fprintf(w, "\nPolicies (%s):\n", strings.Join(sharedBy, ", "))
		for _, p := range shared {
			fmt.Fprintf(w, "  %-18s %s\n", p.name, p.about)
		}
	}
	if len(jitter) > 0 {
		fmt.Fprintln(w, "\nJitter strategies (contention):")
		for _, p := range jitter {
			fmt.Fprintf(w, "  %-18s %s\n", p.name, p.about)
		}
	}
}
