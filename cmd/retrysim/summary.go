package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/retryhttp/retryhttp/internal/simkit"
)

// row is one line of the summary table: a run reduced to numbers.
type row struct {
	scenario, policy string
	requests         int
	succeeded        int
	failed           int
	attempts         int // attempts the client sent, retries included
	byKind           [numKinds]int
	waitPerRequest   time.Duration // mean time spent waiting in the client
	wall             time.Duration
	p50, p99         time.Duration // request latency, failed requests included
	failures         map[string]int
}

// summarize reduces a run to its row.
func summarize(r *runResult) row {
	w := row{
		scenario: r.scenario.key,
		policy:   r.policy.name,
		requests: len(r.requests),
		wall:     r.wall,
		failures: make(map[string]int),
	}
	latencies := make([]time.Duration, 0, len(r.requests))
	var waited time.Duration
	for _, tr := range r.requests {
		tr.mu.Lock()
		if tr.ok {
			w.succeeded++
		} else {
			w.failed++
			w.failures[tr.reason]++
		}
		w.attempts += len(tr.attempts)
		for _, a := range tr.attempts {
			w.byKind[a.kind]++
		}
		waited += tr.waited()
		latencies = append(latencies, tr.end.Sub(tr.start))
		tr.mu.Unlock()
	}
	if len(r.requests) > 0 {
		w.waitPerRequest = waited / time.Duration(len(r.requests))
	}
	slices.Sort(latencies)
	w.p50, w.p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
	return w
}

// percentile is the nearest-rank p-quantile (0 < p <= 1) of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// tableHeader names the summary table's columns, in order.
var tableHeader = []string{"scenario", "policy", "requests", "ok", "failed", "attempts",
	"429", "5xx", "no answer", "wait/req", "wall", "p50", "p99"}

// printTable writes the summary table: one line per scenario and policy.
func printTable(w io.Writer, rows []row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// Right-aligned numbers read best; tabwriter aligns every column the
	// same way, so the two text columns are padded by hand to the left.
	var sw, pw int
	for _, r := range rows {
		sw, pw = max(sw, len(r.scenario)), max(pw, len(r.policy))
	}
	sw, pw = max(sw, len(tableHeader[0])), max(pw, len(tableHeader[1]))
	left := func(s string, n int) string { return s + strings.Repeat(" ", n-len(s)) }
	fmt.Fprintf(tw, "%s  %s\t", left(tableHeader[0], sw), left(tableHeader[1], pw))
	fmt.Fprintln(tw, strings.Join(tableHeader[2:], "\t")+"\t")
	prev := ""
	for _, r := range rows {
		name := r.scenario
		if name == prev {
			name = ""
		}
		prev = r.scenario
		cells := []string{
			strconv.Itoa(r.requests), strconv.Itoa(r.succeeded), strconv.Itoa(r.failed),
			strconv.Itoa(r.attempts), strconv.Itoa(r.byKind[kindThrottled]), strconv.Itoa(r.byKind[kind5xx]),
			strconv.Itoa(r.byKind[kindNoAnswer]), simkit.Round3(r.waitPerRequest), simkit.Round3(r.wall),
			simkit.Round3(r.p50), simkit.Round3(r.p99),
		}
		fmt.Fprintf(tw, "%s  %s\t%s\t\n", left(name, sw), left(r.policy, pw), strings.Join(cells, "\t"))
	}
	tw.Flush()
}

// printFailures lists, for every run that had failures, why its requests
// failed, most common first.
func printFailures(w io.Writer, rows []row) {
	started := false
	for _, r := range rows {
		if r.failed == 0 {
			continue
		}
		if !started {
			fmt.Fprintln(w, "\nWhy requests failed (the last thing each one got):")
			started = true
		}
		reasons := make([]string, 0, len(r.failures))
		for reason := range r.failures {
			reasons = append(reasons, reason)
		}
		sort.Slice(reasons, func(i, j int) bool {
			a, b := r.failures[reasons[i]], r.failures[reasons[j]]
			return a > b || a == b && reasons[i] < reasons[j]
		})
		parts := make([]string, len(reasons))
		for i, reason := range reasons {
			parts[i] = fmt.Sprintf("%d %s", r.failures[reason], reason)
		}
		fmt.Fprintf(w, "  %s / %s: %s\n", r.scenario, r.policy, strings.Join(parts, ", "))
	}
}
