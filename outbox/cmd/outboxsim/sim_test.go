package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// shortConfig is the scenario shrunk to a few seconds: every request
// arrives (within 0.5s) and meets its 500ms deadline well inside the 1.5s
// outage, so only the outbox can deliver it.
func shortConfig() simConfig {
	return simConfig{
		Requests: 20,
		Rate:     40,
		Outage:   1500 * time.Millisecond,
		Deadline: 500 * time.Millisecond,
		Backoff:  []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond},
		Workers:  2,
		Poll:     20 * time.Millisecond,
		Lease:    5 * time.Second,
		MaxTime:  time.Minute, // a fuse; the run ends when the outbox has drained
	}
}

// An outage longer than the callers' deadlines: the requests are saved,
// delivered after recovery, none lost, each Idempotency-Key answered 2xx
// exactly once.
func TestOutageOutlastingDeadlinesLosesNothing(t *testing.T) {
	cfg := shortConfig()
	var out bytes.Buffer
	rep, err := simulate(context.Background(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v\n%s", rep, out.String())
	if rep.Deferred == 0 {
		t.Fatalf("no request was saved: the scenario did not outlast the deadlines: %+v", rep)
	}
	if rep.Unsaved != 0 || rep.Lost != 0 || rep.Dead != 0 || rep.Pending != 0 {
		t.Errorf("requests failed unsaved, lost, dead or left pending: %+v", rep)
	}
	if rep.Replayed != rep.Deferred || rep.AtOnce+rep.Replayed != cfg.Requests {
		t.Errorf("%d saved, %d delivered later, %d at once, of %d", rep.Deferred, rep.Replayed, rep.AtOnce, cfg.Requests)
	}
	// The provider's view: one 2xx for each request's key, no more.
	if rep.Delivered != cfg.Requests || rep.Duplicates != 0 {
		t.Errorf("the provider answered 2xx to %d distinct keys (%d more than once), want %d once each",
			rep.Delivered, rep.Duplicates, cfg.Requests)
	}
	var table bytes.Buffer
	printReport(&table, rep)
	if !strings.Contains(table.String(), "outbox: none lost") {
		t.Errorf("the report does not say none lost:\n%s", table.String())
	}
}

// The exit code is retrysim's signal: 1 when a request is lost. A run cut
// off (-max-time) during the outage leaves the saved requests undelivered.
func TestLostRequestsExitOne(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := realMain(context.Background(), []string{"-requests", "3", "-rate", "100", "-outage", "5s",
		"-deadline", "100ms", "-max-time", "1s"}, &stdout, &stderr)
	if code != 1 {
		t.Fatalf("exit code %d, want 1\n%s\n%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "3 of 3 requests LOST") {
		t.Errorf("the report does not say what was lost:\n%s", stdout.String())
	}
}

func TestBadFlagsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"-backoff", "1s,-2s"},
		{"-backoff", "soon"},
		{"-requests", "0"},
		{"-deadline", "0s"},
		{"extra"},
	} {
		if code := realMain(context.Background(), args, io.Discard, io.Discard); code != 2 {
			t.Errorf("%q: exit code %d, want 2", args, code)
		}
	}
	cfg, err := parseFlags([]string{"-backoff", "1s, 2s"}, io.Discard)
	if err != nil || len(cfg.Backoff) != 2 || cfg.Backoff[1] != 2*time.Second {
		t.Errorf("-backoff 1s, 2s: %v %v", cfg.Backoff, err)
	}
}
