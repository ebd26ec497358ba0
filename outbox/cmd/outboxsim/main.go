// Command outboxsim is retrysim's "outbox" scenario: an outage that
// outlasts the callers' deadlines, with an outbox that saves the requests
// and delivers them after recovery, none lost.
//
// It starts a fake Anthropic-style provider (package retrytest) on
// 127.0.0.1 that answers 529 overloaded for its first -outage, then 200.
// Callers arrive at -rate, each with a -deadline shorter than the outage,
// and send with outbox.Do through a retryhttp transport with its defaults.
// When the transport gives up (the deadline, the breaker), Do saves the
// request in a bbolt file and returns outbox.ErrDeferred; Run's workers
// replay what was saved on a schedule of -backoff (seconds here, where a
// real outbox waits minutes), through the same transport. The run ends
// when every saved request is delivered, or at -max-time. It prints a
// summary: requests delivered at once, saved, delivered later, lost, and
// the Idempotency-Keys the provider answered 2xx more than once.
//
// It exits 1 when a request was lost (or the run failed), 2 for bad usage.
//
// It lives in the outbox module, not next to retrysim, because the outbox
// needs bbolt and go-redis and the core module must not require them:
// retrysim (in the core module) builds and runs this command as a
// subprocess from the outbox module's directory. Run it by itself from
// the repository's root with
//
//	go -C outbox run ./cmd/outboxsim [flags]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := realMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// realMain runs the command and returns its exit code: 0 when nothing was
// lost, 1 when a request was lost or the run failed, 2 for bad usage.
func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	fmt.Fprintln(stdout, about(cfg))
	rep, err := simulate(ctx, cfg, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "outboxsim:", err)
		return 1
	}
	fmt.Fprintln(stdout)
	printReport(stdout, rep)
	if rep.Lost > 0 {
		return 1
	}
	return 0
}

// parseFlags reads and checks the flags, reporting problems on stderr.
func parseFlags(args []string, stderr io.Writer) (simConfig, error) {
	cfg := defaultSimConfig()
	fs := flag.NewFlagSet("outboxsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	backoff := joinDurations(cfg.Backoff)
	fs.IntVar(&cfg.Requests, "requests", cfg.Requests, "requests the callers send (1 to 10000)")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "requests arriving per second, each in its own goroutine")
	fs.DurationVar(&cfg.Outage, "outage", cfg.Outage, "how long the provider answers 529 before it recovers")
	fs.DurationVar(&cfg.Deadline, "deadline", cfg.Deadline, "each caller's deadline, retries and waits included; shorter than\n-outage, so that the transport alone cannot deliver")
	fs.StringVar(&backoff, "backoff", backoff, "the outbox's replay schedule, comma-separated: the wait after the\nfirst failed send, after the second, ...; the last one repeats")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "replay workers (outbox.Options.Workers)")
	fs.DurationVar(&cfg.Poll, "poll", cfg.Poll, "how often an idle worker looks for due entries\n(outbox.Options.PollInterval)")
	fs.DurationVar(&cfg.Lease, "lease", cfg.Lease, "how long a worker holds the entries it claimed, and so the\nlongest one replay may take (outbox.Options.Lease)")
	fs.StringVar(&cfg.DB, "db", cfg.DB, `the bbolt file to keep the outbox in; "" makes one in a temporary
directory and removes it at the end`)
	fs.DurationVar(&cfg.MaxTime, "max-time", cfg.MaxTime, "cap on the whole run: what is not delivered by then counts as lost")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: outboxsim [flags]\n\n"+
			"retrysim's outbox scenario: an outage that outlasts the callers' deadlines; outbox.Do saves\n"+
			"the requests, Run delivers them after recovery. Exits 1 if a request is lost.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	problem := ""
	var err error
	if cfg.Backoff, err = parseDurations(backoff); err != nil {
		problem = "-backoff: " + err.Error()
	}
	switch {
	case problem != "":
	case fs.NArg() > 0:
		problem = fmt.Sprintf("unexpected argument %q: outboxsim takes flags only", fs.Arg(0))
	case cfg.Requests < 1 || cfg.Requests > 10000:
		problem = fmt.Sprintf("-requests must be between 1 and 10000, got %d", cfg.Requests)
	case !(cfg.Rate > 0):
		problem = fmt.Sprintf("-rate must be positive, got %v", cfg.Rate)
	case cfg.Outage <= 0 || cfg.Deadline <= 0 || cfg.Poll <= 0 || cfg.Lease <= 0 || cfg.MaxTime <= 0:
		problem = "-outage, -deadline, -poll, -lease and -max-time must be positive"
	case cfg.Workers < 1:
		problem = fmt.Sprintf("-workers must be 1 or more, got %d", cfg.Workers)
	}
	if problem != "" {
		fmt.Fprintf(stderr, "outboxsim: %s\nRun 'outboxsim -h' for the flags.\n", problem)
		return cfg, errors.New(problem)
	}
	return cfg, nil
}

func joinDurations(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.String()
	}
	return strings.Join(s, ",")
}

// parseDurations reads a comma-separated list of positive durations.
func parseDurations(list string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(list, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if d <= 0 {
			return nil, fmt.Errorf("%v is not positive", d)
		}
		out = append(out, d)
	}
	return out, nil
}
