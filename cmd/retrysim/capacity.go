package main

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"

	"github.com/retryhttp/retryhttp/internal/simkit"
)

// The capacity scenario (issue 12): a provider that serves a fixed number
// of requests at once, each for a fixed time, and refuses at once (503, or
// 529 as an overloaded LLM API does) whatever finds every slot taken, with
// no rate-limit headers to pace by; and a closed-loop load larger than the
// capacity, as a batch job sends. The question is how much of the capacity
// a policy turns into served requests, and at what cost in refusals.

// capacityShape is the capacity scenario's provider and load, for the
// summary: what the capacity allows, against what each policy got.
type capacityShape struct {
	slots   int
	service time.Duration // how long each admitted request is in service
	halveAt time.Duration // > 0: the slots halve then, from the provider's start
	status  int           // a refusal's status
	callers int           // goroutines sending, each its next request as soon as its last ended
	each    int           // requests per caller
}

// lowSlots is the slots after a halving: half, at least one.
func (c capacityShape) lowSlots() int { return max(1, c.slots/2) }

// changes are the provider's capacity changes: the halving, if any.
func (c capacityShape) changes() []retrytest.CapacityChange {
	if c.halveAt <= 0 {
		return nil
	}
	return []retrytest.CapacityChange{{At: c.halveAt, Max: c.lowSlots()}}
}

// limit is the most requests a second the provider serves at first: its
// slots over the service time, or the callers' bound when they are fewer.
func (c capacityShape) limit() float64 {
	return float64(min(c.slots, c.callers)) / c.service.Seconds()
}

// ideal is the least time the capacity allows for the whole load: at most
// min(slots, callers) requests in service at once, each for the service
// time, the slots halving at halveAt if set.
func (c capacityShape) ideal() time.Duration {
	n := float64(c.callers * c.each)
	rate := c.limit()
	if c.halveAt <= 0 || n <= rate*c.halveAt.Seconds() {
		return time.Duration(n / rate * float64(time.Second))
	}
	n -= rate * c.halveAt.Seconds()
	low := float64(min(c.lowSlots(), c.callers)) / c.service.Seconds()
	return c.halveAt + time.Duration(n/low*float64(time.Second))
}

// capacityShapeOf is cfg's capacity scenario.
func capacityShapeOf(cfg config) capacityShape {
	return capacityShape{
		slots: cfg.slots, service: cfg.service, halveAt: cfg.halveAt, status: cfg.refusal,
		callers: cfg.callers, each: cfg.each,
	}
}

// capacityScenario builds the capacity scenario of cfg, with the shared
// policies.
func capacityScenario(cfg config, policies []policy) scenario {
	c := capacityShapeOf(cfg)
	requests := c.callers * c.each
	refusal := "503"
	if c.status == retryhttp.StatusOverloaded {
		refusal = "529 overloaded_error"
	}
	retryAfter := "no Retry-After"
	if cfg.refusalRetryAfter > 0 {
		retryAfter = "Retry-After " + simkit.Round3(cfg.refusalRetryAfter)
	}
	halving := ""
	if c.halveAt > 0 {
		halving = fmt.Sprintf(", halving to %d slots at %s", c.lowSlots(), simkit.Round3(c.halveAt))
	}
	return scenario{
		key:   "capacity",
		title: "Fixed capacity",
		about: fmt.Sprintf("Anthropic-style API serving %d requests at once, each for %s (%s requests/s at most%s), and answering %s "+
			"at once, with %s and no rate-limit headers, to any beyond; %d goroutines send %d requests each, "+
			"back to back", c.slots, simkit.Round3(c.service), perSecond(float64(c.slots)/c.service.Seconds()),
			halving, refusal, retryAfter, c.callers, c.each),
		provider: func() retrytest.Config {
			return retrytest.Config{
				Family: retrytest.Anthropic,
				Capacity: retrytest.Capacity{
					Max: c.slots, Hold: c.service, Status: c.status, RetryAfter: cfg.refusalRetryAfter,
					Changes: c.changes(),
				},
				Seed:            cfg.seed,
				RequestIDHeader: requestIDHeader,
				MaxAttempts:     requests * (max(cfg.maxRetries, contentionRetries) + 2),
			}
		},
		path:     "/v1/messages",
		load:     closedLoop,
		workers:  c.callers,
		requests: requests,
		policies: policies,
		serial:   true,
		capacity: &c,
	}
}

// capacityRow is one policy's run of the capacity scenario reduced to
// what the capacity allowed and what the policy made of it.
type capacityRow struct {
	policy   string
	goodput  float64 // requests served per second of the run's wall time
	ofLimit  float64 // goodput over what the capacity allows for this load
	failed   int
	refused  int // attempts the provider refused
	attempts int // attempts the provider received
	p50, p99 time.Duration
}

// summarizeCapacity reduces a run of the capacity scenario to its row.
func summarizeCapacity(r *runResult) capacityRow {
	s := summarize(r)
	c := r.scenario.capacity
	out := capacityRow{
		policy: s.policy, failed: s.failed, p50: s.p50, p99: s.p99,
		refused: r.server.Statuses[c.status], attempts: r.server.Attempts,
	}
	if r.wall > 0 {
		out.goodput = float64(s.succeeded) / r.wall.Seconds()
	}
	if ideal := c.ideal(); ideal > 0 && s.requests > 0 {
		out.ofLimit = out.goodput / (float64(s.requests) / ideal.Seconds())
	}
	return out
}

// refusedShare is the share of attempts the provider refused, as text.
func (c capacityRow) refusedShare() string {
	if c.attempts == 0 {
		return "0%"
	}
	return strconv.FormatFloat(100*float64(c.refused)/float64(c.attempts), 'f', 1, 64) + "%"
}

// capacityHeader names the capacity table's columns, in order.
var capacityHeader = []string{"policy", "req/s", "of capacity", "failed", "refused", "refused %", "p50", "p99"}

// printCapacity writes, for each run of a capacity scenario in groups, the
// throughput it reached as a share of what the capacity allows, its
// failures and refusals, and its latency. It writes nothing when no
// capacity scenario ran.
func printCapacity(w io.Writer, groups [][]*runResult) {
	for _, g := range groups {
		if len(g) == 0 || g[0].scenario.capacity == nil {
			continue
		}
		c := g[0].scenario.capacity
		n := c.callers * c.each
		fmt.Fprintf(w, "\nCapacity: %d slots x %s = %s requests/s at most", c.slots, simkit.Round3(c.service),
			perSecond(float64(c.slots)/c.service.Seconds()))
		if c.halveAt > 0 {
			fmt.Fprintf(w, ", %d slots from %s", c.lowSlots(), simkit.Round3(c.halveAt))
		}
		fmt.Fprintf(w, "; %d requests from %d goroutines take at least %s (%s requests/s).\n",
			n, c.callers, simkit.Round3(c.ideal()), perSecond(float64(n)/c.ideal().Seconds()))

		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		pw := len(capacityHeader[0])
		for _, r := range g {
			pw = max(pw, len(r.policy.name))
		}
		left := func(s string) string { return s + strings.Repeat(" ", pw-len(s)) }
		fmt.Fprintf(tw, "%s\t%s\t\n", left(capacityHeader[0]), strings.Join(capacityHeader[1:], "\t"))
		for _, r := range g {
			cr := summarizeCapacity(r)
			cells := []string{
				strconv.FormatFloat(cr.goodput, 'f', 0, 64), strconv.FormatFloat(cr.ofLimit, 'f', 2, 64),
				strconv.Itoa(cr.failed), strconv.Itoa(cr.refused), cr.refusedShare(), simkit.Round3(cr.p50), simkit.Round3(cr.p99),
			}
			fmt.Fprintf(tw, "%s\t%s\t\n", left(cr.policy), strings.Join(cells, "\t"))
		}
		tw.Flush()
		fmt.Fprintf(w, "req/s: requests served per second until the last one ended. of capacity: that over the %s/s\n"+
			"the capacity allows this load. refused: attempts the provider answered %d, and their share of all\n"+
			"attempts. p50, p99: request latency, failed requests included.\n",
			perSecond(float64(n)/c.ideal().Seconds()), c.status)
	}
}

// perSecond formats a rate: whole from 10 on, three significant digits
// below.
func perSecond(x float64) string {
	if x >= 10 {
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}

// capacityStats is a capacity run's line over its chart panel.
func capacityStats(r *runResult) string {
	s, cr := summarize(r), summarizeCapacity(r)
	return fmt.Sprintf("%d/%d ok, %.2f of capacity, %s refused, p99 %s",
		s.succeeded, s.requests, cr.ofLimit, cr.refusedShare(), simkit.Round3(cr.p99))
}

// refusalStatuses are the statuses -refusal accepts.
var refusalStatuses = []int{http.StatusServiceUnavailable, retryhttp.StatusOverloaded}
