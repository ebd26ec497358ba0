// Command retrysim shows what retryhttp changes for a client of a flaky API.
//
// It starts an embedded provider on loopback that fails a share of attempts
// the way LLM APIs do (503, 529 overloaded, 429 with Retry-After), sends the
// same batch of POST requests through a plain http.Client and then through
// retryhttp.New(nil), and prints the two outcomes side by side.
//
// Usage:
//
//	go run ./cmd/retrysim [-n 200] [-c 20] [-fail 0.25] [-seed 1] [-max-retries 5]
//
// The provider's failures follow a script fixed by the seed (see script in
// provider.go): attempt k of request i fails, or not, the same way for both
// clients and on every run with that seed. Only timings differ between runs.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-cleanhttp"

	"github.com/retryhttp/retryhttp"
)

// config is what the flags set.
type config struct {
	requests    int
	concurrency int
	failRate    float64
	seed        uint64
	maxRetries  int
}

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
	if _, err := run(ctx, stdout, cfg); err != nil {
		fmt.Fprintln(stderr, "retrysim:", err)
		return 1
	}
	return 0
}

// parseFlags reads and checks the flags. Problems are reported on stderr;
// the error only tells the caller to stop.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := config{}
	fs := flag.NewFlagSet("retrysim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.requests, "n", 200, "number of requests in the batch each client sends (1 to 100000)")
	fs.IntVar(&cfg.concurrency, "c", 20, "how many requests each client has in flight at once (1 to 1000)")
	fs.Float64Var(&cfg.failRate, "fail", 0.25, "probability that the provider fails an attempt, from 0 to 1;\na failure is a 503, a 529 overloaded or a 429 with Retry-After: 1,\nin equal shares")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the provider's failure script: the same seed fails the same\nattempts of the same requests, for both clients and on every run")
	fs.IntVar(&cfg.maxRetries, "max-retries", retryhttp.DefaultMaxRetries, "retries after the first attempt for the retryhttp client\n(retryhttp.WithMaxRetries); 0 sends each request once")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: retrysim [flags]

retrysim starts a provider on loopback that fails some attempts the way LLM
APIs do, sends the same batch of POST requests through a plain http.Client
and through retryhttp.New(nil), and prints a side-by-side summary.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err // flag has printed the problem and the usage
	}
	var problem string
	switch {
	case fs.NArg() > 0:
		problem = fmt.Sprintf("unexpected argument %q: retrysim takes flags only", fs.Arg(0))
	case cfg.requests < 1 || cfg.requests > 100000:
		problem = fmt.Sprintf("-n must be between 1 and 100000, got %d", cfg.requests)
	case cfg.concurrency < 1 || cfg.concurrency > 1000:
		problem = fmt.Sprintf("-c must be between 1 and 1000, got %d", cfg.concurrency)
	case !(cfg.failRate >= 0 && cfg.failRate <= 1): // also rejects NaN
		problem = fmt.Sprintf("-fail must be a probability between 0 and 1, got %v", cfg.failRate)
	case cfg.maxRetries < 0:
		problem = fmt.Sprintf("-max-retries must be 0 or more, got %d", cfg.maxRetries)
	}
	if problem != "" {
		fmt.Fprintf(stderr, "retrysim: %s\nRun 'retrysim -h' for the flags.\n", problem)
		return cfg, errors.New(problem)
	}
	return cfg, nil
}

// Client labels, sent in clientHeader so the provider counts each apart.
const (
	plainLabel = "plain"
	retryLabel = "retryhttp"
)

// run starts the provider, sends the batch through both clients in turn and
// writes the summary to w. extra options go to retryhttp.New after
// WithMaxRetries; tests use them to put in a fake clock.
func run(ctx context.Context, w io.Writer, cfg config, extra ...retryhttp.Option) ([]result, error) {
	p, err := startProvider(script{seed: cfg.seed, failRate: cfg.failRate})
	if err != nil {
		return nil, err
	}
	defer p.Close()

	fmt.Fprintf(w, "retrysim: %d POST requests, %d at a time, to an embedded provider at %s\n",
		cfg.requests, cfg.concurrency, p.URL)
	fmt.Fprintf(w, "provider: each attempt fails with probability %g (503, 529 overloaded, 429 with Retry-After: 1); script seed %d\n\n",
		cfg.failRate, cfg.seed)

	// Both clients get the same kind of connection pool (go-cleanhttp's
	// pooled transport, which retryhttp.New(nil) wraps), so the table compares
	// retrying, not pool sizes.
	plain := &http.Client{Transport: cleanhttp.DefaultPooledTransport()}
	opts := append([]retryhttp.Option{retryhttp.WithMaxRetries(cfg.maxRetries)}, extra...)
	retrying := &http.Client{Transport: retryhttp.New(nil, opts...)}

	clients := []struct {
		name, label string
		client      *http.Client
	}{
		{"plain http.Client", plainLabel, plain},
		{fmt.Sprintf("retryhttp.New(nil), %d retries", cfg.maxRetries), retryLabel, retrying},
	}
	var results []result
	for _, c := range clients {
		fmt.Fprintf(w, "sending through %s...\n", c.name)
		r, err := runBatch(ctx, p, cfg, c.label, c.client)
		c.client.CloseIdleConnections()
		if err != nil {
			return nil, err
		}
		r.name = c.name
		results = append(results, r)
	}
	fmt.Fprintln(w)
	printSummary(w, results)
	return results, nil
}

// request is the outcome of one request of the batch, as its client saw it.
type request struct {
	status   int              // final status; 0 when no response came back
	attempts int              // attempts the client reports (1 for the plain client)
	latency  time.Duration    // from sending until the body was read
	err      *retryhttp.Error // from retryhttp.CheckResponse; nil on success
}

// result is one client's run of the batch.
type result struct {
	name           string
	requests       []request // indexed by request id
	serverAttempts int       // attempts the provider received from this client
	wall           time.Duration
}

// runBatch sends cfg.requests requests through client, cfg.concurrency at a
// time, and collects what each one ended with.
func runBatch(ctx context.Context, p *provider, cfg config, label string, client *http.Client) (result, error) {
	reqs := make([]request, cfg.requests)
	ids := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range min(cfg.concurrency, cfg.requests) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				reqs[id] = send(ctx, client, p.URL+"/v1/messages", label, id)
			}
		}()
	}
feed:
	for id := range cfg.requests {
		select {
		case ids <- id:
		case <-ctx.Done():
			break feed
		}
	}
	close(ids)
	wg.Wait()
	wall := time.Since(start)
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	return result{requests: reqs, serverAttempts: p.Attempts(label), wall: wall}, nil
}

// send makes request id of the batch and reads its response to the end.
func send(ctx context.Context, client *http.Client, url, label string, id int) request {
	body, _ := json.Marshal(simRequest{ID: id, Prompt: "Say ok."})
	start := time.Now()
	// A bytes.Reader body gets GetBody from NewRequest, so retries resend it
	// without a copy.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	var resp *http.Response
	if err == nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(requestIDHeader, strconv.Itoa(id))
		req.Header.Set(clientHeader, label)
		resp, err = client.Do(req)
	}
	r := request{attempts: 1}
	if cerr := retryhttp.CheckResponse(resp, err); cerr != nil {
		errors.As(cerr, &r.err) // CheckResponse always returns a *retryhttp.Error
		r.status, r.attempts = r.err.StatusCode, max(r.err.Attempts, 1)
	} else {
		r.status, r.attempts = resp.StatusCode, max(retryhttp.Attempts(resp), 1)
	}
	if resp != nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	r.latency = time.Since(start)
	return r
}

// succeeded counts the requests that ended without an error.
func (r result) succeeded() int {
	n := 0
	for _, q := range r.requests {
		if q.err == nil {
			n++
		}
	}
	return n
}

// failedWith counts the failed requests whose final status was status (0:
// no response).
func (r result) failedWith(status int) int {
	n := 0
	for _, q := range r.requests {
		if q.err != nil && q.status == status {
			n++
		}
	}
	return n
}

// clientAttempts sums the attempts the client reports for its requests.
func (r result) clientAttempts() int {
	n := 0
	for _, q := range r.requests {
		n += q.attempts
	}
	return n
}

// percentile returns the nearest-rank p-quantile (0 < p <= 1) of latency.
func (r result) percentile(p float64) time.Duration {
	if len(r.requests) == 0 {
		return 0
	}
	ls := make([]time.Duration, len(r.requests))
	for i, q := range r.requests {
		ls[i] = q.latency
	}
	slices.Sort(ls)
	i := int(math.Ceil(p*float64(len(ls)))) - 1
	return ls[min(max(i, 0), len(ls)-1)]
}

// firstFailure returns the lowest-numbered failed request, or -1.
func (r result) firstFailure() int {
	for id, q := range r.requests {
		if q.err != nil {
			return id
		}
	}
	return -1
}

// printSummary writes the side-by-side table, then one failure of each client
// as its callers would see it through retryhttp.CheckResponse.
func printSummary(w io.Writer, results []result) {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	row := func(label string, cell func(result) string) {
		fmt.Fprint(tw, label)
		for _, r := range results {
			fmt.Fprint(tw, "\t"+cell(r))
		}
		fmt.Fprintln(tw)
	}
	row("", func(r result) string { return r.name })
	row("requests", func(r result) string { return strconv.Itoa(len(r.requests)) })
	row("succeeded", func(r result) string {
		return fmt.Sprintf("%d (%.1f%%)", r.succeeded(), 100*float64(r.succeeded())/float64(max(len(r.requests), 1)))
	})
	row("failed", func(r result) string { return strconv.Itoa(len(r.requests) - r.succeeded()) })
	for _, status := range failureStatuses(results) {
		label := "  final status " + strconv.Itoa(status)
		if status == 0 {
			label = "  no response"
		}
		row(label, func(r result) string { return strconv.Itoa(r.failedWith(status)) })
	}
	row("attempts (server)", func(r result) string { return strconv.Itoa(r.serverAttempts) })
	row("wall time", func(r result) string { return fmtDuration(r.wall) })
	row("latency p50", func(r result) string { return fmtDuration(r.percentile(0.50)) })
	row("latency p99", func(r result) string { return fmtDuration(r.percentile(0.99)) })
	tw.Flush()

	for _, r := range results {
		id := r.firstFailure()
		if id < 0 {
			retried := 0
			for _, q := range r.requests {
				if q.attempts > 1 {
					retried++
				}
			}
			fmt.Fprintf(w, "\n%s: every request succeeded; %d of them after retries.\n", r.name, retried)
			continue
		}
		e := r.requests[id].err
		fmt.Fprintf(w, "\n%s, request %d, via retryhttp.CheckResponse:\n", r.name, id)
		fmt.Fprintf(w, "  err.Error():       %s\n", e.Error())
		fmt.Fprintf(w, "  err.UserMessage(): %s\n", e.UserMessage())
	}
}

// failureStatuses lists, in order, the final statuses of failed requests in
// any of the results.
func failureStatuses(results []result) []int {
	var statuses []int
	for _, r := range results {
		for _, q := range r.requests {
			if q.err != nil && !slices.Contains(statuses, q.status) {
				statuses = append(statuses, q.status)
			}
		}
	}
	slices.Sort(statuses)
	return statuses
}

// fmtDuration rounds d to three or so significant digits for the table.
func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(10 * time.Millisecond).String()
	}
}
