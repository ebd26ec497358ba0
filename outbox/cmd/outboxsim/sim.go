package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/outbox"
	"github.com/retryhttp/retryhttp/retrytest"

	"github.com/retryhttp/retryhttp/internal/simkit"
)

// simConfig is one run of the scenario.
type simConfig struct {
	Requests int           // requests offered
	Rate     float64       // arrivals per second, each in its own goroutine
	Outage   time.Duration // the provider answers 529 from its start until then
	Deadline time.Duration // each caller's deadline, retries and waits included
	// Backoff is the outbox's replay schedule (outbox.Options.Backoff):
	// seconds here, where a real one waits minutes.
	Backoff []time.Duration
	Workers int           // outbox.Options.Workers
	Poll    time.Duration // outbox.Options.PollInterval
	Lease   time.Duration // outbox.Options.Lease: also bounds one replay
	// DB is the bbolt file; "" makes one in a temporary directory, removed
	// at the end.
	DB string
	// MaxTime bounds the whole run: what is not delivered by then is
	// counted lost.
	MaxTime time.Duration
	// Logger receives the outbox's logs (failures to save); nil drops them.
	Logger *slog.Logger
}

// defaultSimConfig is the run with no flags: an outage three times the
// callers' deadline, every request arriving inside it, and a replay
// schedule short enough that the outbox drains in a few seconds.
func defaultSimConfig() simConfig {
	return simConfig{
		Requests: 50,
		Rate:     25,
		Outage:   3 * time.Second,
		Deadline: time.Second,
		Backoff:  []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second},
		Workers:  2,
		Poll:     50 * time.Millisecond,
		Lease:    5 * time.Second,
		MaxTime:  time.Minute,
	}
}

// report is what became of the requests.
type report struct {
	Offered  int // requests the callers made
	AtOnce   int // Do returned a 2xx
	Deferred int // Do returned outbox.ErrDeferred: saved
	Unsaved  int // Do failed without saving: lost unless the caller resends
	// Replayed, Dead and Pending count the saved entries by their state at
	// the end: delivered by Run, dead letters, still waiting.
	Replayed, Dead, Pending int
	// Lost is every request neither delivered at once nor by a replay.
	Lost int
	// Delivered counts the Idempotency-Keys the provider answered 2xx at
	// least once, and Duplicates those it answered 2xx more than once.
	Delivered, Duplicates int
	Attempts              int           // arrivals at the provider, replays and retries included
	Drain                 time.Duration // from the end of the outage to the last replay delivered
	Wall                  time.Duration // from the provider's start to the last delivery
	Unsent                map[string]int
}

// keyCounter answers the provider's successes and counts them by
// Idempotency-Key.
type keyCounter struct {
	mu   sync.Mutex
	oks  map[string]int
	last time.Time
}

func (k *keyCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	k.oks[r.Header.Get(retryhttp.IdempotencyKeyHeader)]++
	k.last = time.Now()
	k.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"type":"message","content":[{"type":"text","text":"ok"}]}`)
}

// simulate runs the scenario: callers send through outbox.Do while the
// provider is down for longer than their deadlines, Run's workers replay
// what was saved, and the run ends when every saved entry is delivered or
// dead, or at MaxTime. It writes what it does to w.
func simulate(ctx context.Context, cfg simConfig, w io.Writer) (*report, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.MaxTime)
	defer cancel()
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	path := cfg.DB
	if path == "" {
		dir, err := os.MkdirTemp("", "outboxsim")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "outbox.db")
	}
	store, err := outbox.OpenBolt(path)
	if err != nil {
		return nil, fmt.Errorf("open the outbox file: %w", err)
	}
	defer store.Close()

	oks := &keyCounter{oks: map[string]int{}}
	srv := retrytest.NewServer(retrytest.Config{
		Family:          retrytest.Anthropic,
		Overload:        []retrytest.Window{{From: 0, Until: cfg.Outage, Status: 529}},
		Success:         oks,
		RequestIDHeader: retryhttp.IdempotencyKeyHeader,
		MaxAttempts:     100 * cfg.Requests, // a fuse: far above what is sent
	})
	defer srv.Close()
	start := time.Now() // the provider's start, near enough: the outage ends at start+Outage

	rt := retryhttp.New(nil) // retryhttp's defaults, for the callers and the replays alike
	defer rt.CloseIdleConnections()
	var mu sync.Mutex
	settled := map[string]outbox.State{} // entry ID -> Delivered or Dead
	changed := make(chan struct{}, 1)
	ob, err := outbox.New(outbox.Options{
		Transport:    rt,
		Store:        store,
		Backoff:      cfg.Backoff,
		Workers:      cfg.Workers,
		PollInterval: cfg.Poll,
		Lease:        cfg.Lease,
		Logger:       logger,
		OnResult: func(r outbox.Result) {
			if r.Entry.State == outbox.Pending {
				return
			}
			mu.Lock()
			settled[r.Entry.ID] = r.Entry.State
			mu.Unlock()
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		return nil, err
	}
	runCtx, stopRun := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { ob.Run(runCtx); close(ran) }()
	defer func() { stopRun(); <-ran }()

	rep := &report{Offered: cfg.Requests, Unsent: map[string]int{}}
	var ids []string
	var wg sync.WaitGroup
	every := time.Duration(float64(time.Second) / cfg.Rate)
	url := srv.URL + "/v1/messages"
	for i := range cfg.Requests {
		if !simkit.Sleep(ctx, time.Until(start.Add(time.Duration(i)*every))) {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, how := call(ctx, ob, url, i, cfg.Deadline)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case how == "":
				rep.AtOnce++
			case id != "":
				rep.Deferred++
				ids = append(ids, id)
			default:
				rep.Unsaved++
				rep.Unsent[how]++
			}
		}()
	}
	wg.Wait()
	fmt.Fprintf(w, "outbox: the callers are done after %s: %d delivered at once, %d saved, %d failed unsaved; "+
		"replaying the saved ones...\n", simkit.Round3(time.Since(start)), rep.AtOnce, rep.Deferred, rep.Unsaved)

	for {
		mu.Lock()
		n := 0
		for _, id := range ids {
			if _, ok := settled[id]; ok {
				n++
			}
		}
		mu.Unlock()
		if n == len(ids) {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	stopRun()
	<-ran

	// The store's word, not OnResult's, decides what was delivered.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer rcancel()
	for _, id := range ids {
		e, err := ob.Get(rctx, id)
		if err != nil {
			return nil, fmt.Errorf("read entry %s back: %w", id, err)
		}
		switch e.State {
		case outbox.Delivered:
			rep.Replayed++
		case outbox.Dead:
			rep.Dead++
		default:
			rep.Pending++
		}
	}
	rep.Lost = rep.Offered - rep.AtOnce - rep.Replayed
	oks.mu.Lock()
	for _, n := range oks.oks {
		rep.Delivered++
		if n > 1 {
			rep.Duplicates++
		}
	}
	if !oks.last.IsZero() {
		rep.Wall = oks.last.Sub(start)
		if rep.Replayed > 0 {
			rep.Drain = max(oks.last.Sub(start.Add(cfg.Outage)), 0)
		}
	}
	oks.mu.Unlock()
	rep.Attempts = srv.Stats().Attempts
	return rep, nil
}

// call is one caller: a POST with its own deadline through ob.Do. It
// returns how the request failed ("" if it got a 2xx) and, if the outbox
// saved it, the entry's ID.
func call(ctx context.Context, ob *outbox.Outbox, url string, i int, deadline time.Duration) (id, how string) {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	body := `{"model":"sim-1","id":` + strconv.Itoa(i) + `,"messages":[{"role":"user","content":"Say ok."}]}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		return "", err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := ob.Do(req)
	var d *outbox.DeferredError
	switch {
	case errors.As(err, &d):
		return d.ID, "deferred"
	case err != nil:
		return "", reason(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return "", "status " + strconv.Itoa(resp.StatusCode)
	}
	return "", ""
}

// reason is a short name for why a request failed unsaved.
func reason(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	s := err.Error()
	if len(s) > 60 {
		s = s[:60] + "..."
	}
	return s
}

// about is the scenario's line, as retrysim's preamble writes its others.
func about(cfg simConfig) string {
	steps := make([]string, len(cfg.Backoff))
	for i, d := range cfg.Backoff {
		steps[i] = simkit.Round3(d)
	}
	return fmt.Sprintf("%-11s Outage outlasting the callers' deadlines, with an outbox: Anthropic-style API "+
		"answering 529 for its first %s, then 200; %d requests arriving at %g/s, each with a %s deadline, "+
		"sent with outbox.Do through retryhttp's defaults; what Do saves (a bbolt file) is replayed by "+
		"Run's %d workers on a schedule of %s.",
		"outbox", simkit.Round3(cfg.Outage), cfg.Requests, cfg.Rate, simkit.Round3(cfg.Deadline), cfg.Workers, strings.Join(steps, ", "))
}

// printReport writes the summary table and its legend.
func printReport(w io.Writer, rep *report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario  \trequests\tok at once\tsaved\tfailed unsaved\tdelivered later\tdead\tpending\tlost\tduplicates\tattempts\tdrain\twall\t")
	fmt.Fprintf(tw, "outbox    \t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t\n",
		rep.Offered, rep.AtOnce, rep.Deferred, rep.Unsaved, rep.Replayed, rep.Dead, rep.Pending, rep.Lost,
		rep.Duplicates, rep.Attempts, simkit.Round3(rep.Drain), simkit.Round3(rep.Wall))
	tw.Flush()
	if len(rep.Unsent) > 0 {
		reasons := make([]string, 0, len(rep.Unsent))
		for r := range rep.Unsent {
			reasons = append(reasons, r)
		}
		sort.Strings(reasons)
		parts := make([]string, len(reasons))
		for i, r := range reasons {
			parts[i] = fmt.Sprintf("%d %s", rep.Unsent[r], r)
		}
		fmt.Fprintf(w, "\nWhy requests failed unsaved: %s\n", strings.Join(parts, ", "))
	}
	fmt.Fprint(w, "\nsaved: Do returned outbox.ErrDeferred (without an outbox, these requests would have failed).\n"+
		"delivered later: saved entries a replay delivered. lost: requests neither delivered at once nor\n"+
		"later. duplicates: Idempotency-Keys the provider answered 2xx more than once. attempts: arrivals\n"+
		"at the provider, retries and replays included. drain: from the end of the outage to the last\n"+
		"replay delivered. wall: from the start to the last delivery.\n\n")
	if rep.Lost == 0 {
		fmt.Fprintf(w, "outbox: none lost: %d of %d requests were saved during the outage and delivered after it.\n",
			rep.Replayed, rep.Offered)
		return
	}
	fmt.Fprintf(w, "outbox: %d of %d requests LOST.\n", rep.Lost, rep.Offered)
}
