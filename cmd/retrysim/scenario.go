package main

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/retryhttp/retryhttp/retrytest"

	"github.com/retryhttp/retryhttp/internal/simkit"
)

// requestIDHeader carries a request's number in its run on every attempt,
// so the provider groups retries by request and the flaky scenario can
// decide its 503s per attempt.
const requestIDHeader = "X-Sim-Request-Id"

// loadKind is how a scenario's requests are sent.
type loadKind int

const (
	// closedLoop: a fixed number of goroutines each send their next request
	// as soon as their last one is done, as a batch job does.
	closedLoop loadKind = iota
	// openLoop: requests arrive at a steady rate whatever happens to the
	// earlier ones, as users of a service do.
	openLoop
	// manyClients: every request is a client of its own with its own
	// retry state, all starting at once.
	manyClients
)

// scenario is a provider, a load and the policies to compare against them.
type scenario struct {
	key   string // as -scenario names it
	title string
	about string // what the provider does and what the load is
	// provider returns the configuration of a fresh provider: each run
	// gets its own, state included.
	provider func() retrytest.Config
	path     string
	load     loadKind
	workers  int     // closedLoop
	rate     float64 // openLoop: arrivals per second
	requests int     // per policy
	policies []policy
	// pacedAlone: with -parallel, the policies that pace (policy.paces)
	// still run alone, one after the other, before the others run
	// together. Set for the burst: retryhttp learns the provider's rate
	// from the timing of its answers (a probe first, then how the bucket
	// drains), and on a machine whose cores are busy the other runs'
	// herds of goroutines, started at the same moment in the same
	// process, delay those answers by a second or more. Its slow start
	// then sends more requests than the bucket holds, and a pace learned
	// from that reading was seen to stay far below the provider's rate for
	// the rest of the run: most requests refused locally or past their
	// deadline. The hand-written loops learn nothing from timing, so they
	// keep running together.
	pacedAlone bool
	// serial: the policies run one after another, each alone, even with
	// -parallel. Set for the capacity scenario, which measures
	// throughput: runs side by side on the same cores take it from one
	// another, the hand-written loops' most (their herds of goroutines
	// retry at the same moments). Measured on 2 cores, "no retries"
	// reached 0.16 of the capacity beside two other loops, 0.48 alone.
	serial bool
	// capacity is the capacity scenario's provider and load, for its
	// throughput summary; nil in the other scenarios.
	capacity *capacityShape
}

// buildScenario sets up the scenario called key from cfg.
func buildScenario(cfg config, key string) scenario {
	var policies []policy
	for _, p := range cfg.policies {
		policies = append(policies, policyFor(cfg, p))
	}
	// The fuse bounds a run whatever a policy does: far above what any of
	// them sends, yet finite.
	fuse := cfg.requests * (max(cfg.maxRetries, contentionRetries) + 2)
	switch key {
	case "burst":
		style := retrytest.RetryAfterSeconds
		if cfg.family == retrytest.OpenAI {
			style = retrytest.RetryAfterMillisAndSeconds // as OpenAI sends it
		}
		limit := fmt.Sprintf("%g requests/s (bucket of %d)", cfg.limit, cfg.limitBurst)
		rl := retrytest.RateLimit{Rate: cfg.limit, Burst: cfg.limitBurst}
		if cfg.window > 0 {
			rl.Burst, rl.Window = windowQuota(cfg.limit, cfg.window), cfg.window
			limit = fmt.Sprintf("%d requests per fixed window of %s", rl.Burst, simkit.Round3(cfg.window))
		}
		headers := "its rate-limit headers"
		if cfg.family == retrytest.Plain {
			headers = "no rate-limit headers"
		}
		return scenario{
			key:   key,
			title: "Burst against a rate limit",
			about: fmt.Sprintf("%s API limited to %s, answering %s with Retry-After "+
				"and %s%s; %d requests from %d goroutines at once",
				familyName(cfg.family), limit, throttleStatus(cfg.family), headers, serverClock(cfg),
				cfg.requests, min(cfg.concurrency, cfg.requests)),
			provider: func() retrytest.Config {
				return retrytest.Config{
					Family:          cfg.family,
					RetryAfter:      style,
					Rounding:        cfg.rounding,
					ClockOffset:     cfg.clockOffset,
					RateLimit:       rl,
					Seed:            cfg.seed,
					RequestIDHeader: requestIDHeader,
					MaxAttempts:     fuse,
				}
			},
			path:       "/v1/messages",
			load:       closedLoop,
			workers:    min(cfg.concurrency, cfg.requests),
			requests:   cfg.requests,
			policies:   policies,
			pacedAlone: true,
		}
	case "outage":
		return scenario{
			key:   key,
			title: "Outage",
			about: fmt.Sprintf("Anthropic-style API answering 529 overloaded_error (no Retry-After) for its first %s, "+
				"then 200; %d requests arriving at %g/s", simkit.Round3(cfg.outage), cfg.requests, cfg.rate),
			provider: func() retrytest.Config {
				return retrytest.Config{
					Family:          retrytest.Anthropic,
					Overload:        []retrytest.Window{{From: 0, Until: cfg.outage, Status: 529}},
					Seed:            cfg.seed,
					RequestIDHeader: requestIDHeader,
					MaxAttempts:     fuse,
				}
			},
			path:     "/v1/messages",
			load:     openLoop,
			rate:     cfg.rate,
			requests: cfg.requests,
			policies: policies,
		}
	case "capacity":
		return capacityScenario(cfg, policies)
	case "flaky":
		slow := cfg.slow
		if cfg.slowDelay == 0 {
			slow = 0 // retrytest reads a zero delay as its default of 1s
		}
		return scenario{
			key:   key,
			title: "Flaky network",
			about: fmt.Sprintf("each attempt: %s connection reset, %s 503 from a proxy, %s headers %s late, "+
				"%s of 200s with the body cut short; %d requests arriving at %g/s",
				pct(cfg.resets), pct(cfg.unavailable), pct(slow), simkit.Round3(cfg.slowDelay), pct(cfg.truncations),
				cfg.requests, cfg.rate),
			provider: func() retrytest.Config {
				return retrytest.Config{
					Family: retrytest.OpenAI,
					Flaky: retrytest.Flaky{
						Reset: cfg.resets, Truncate: cfg.truncations, Slow: slow, SlowDelay: cfg.slowDelay,
					},
					Success:         newUnavailable(cfg.seed, cfg.unavailable),
					Seed:            cfg.seed,
					RequestIDHeader: requestIDHeader,
					MaxAttempts:     fuse,
				}
			},
			path:     "/v1/chat/completions",
			load:     openLoop,
			rate:     cfg.rate,
			requests: cfg.requests,
			policies: policies,
		}
	}
	return scenario{
		key:   "contention",
		title: "Contention (AWS's Exponential Backoff and Jitter)",
		about: fmt.Sprintf("%d clients, each with its own transport, make one write each at the same moment; "+
			"the provider serves %d writes at once, each taking %s, and answers 503 to any beyond; "+
			"attempts are the total calls, wall the time until the last client finished",
			cfg.clients, cfg.capacity, simkit.Round3(cfg.hold)),
		provider: func() retrytest.Config {
			return retrytest.Config{
				Capacity:        retrytest.Capacity{Max: cfg.capacity, Hold: cfg.hold},
				Seed:            cfg.seed,
				RequestIDHeader: requestIDHeader,
				MaxAttempts:     cfg.clients * (max(cfg.maxRetries, contentionRetries) + 2),
			}
		},
		path:     "/v1/records",
		load:     manyClients,
		requests: cfg.clients,
		policies: contentionPolicies(cfg),
	}
}

// windowQuota is how many requests a fixed window of w admits at rate
// requests per second: at least one.
func windowQuota(rate float64, w time.Duration) int {
	q := rate * w.Seconds()
	if r := math.Round(q); math.Abs(q-r) < 1e-9 {
		q = r // 0.07/s for 100s is 7, not 8
	}
	return int(max(1, math.Min(math.Ceil(q), math.MaxInt32)))
}

// serverClock says how the provider's clock and its rounding differ from
// the defaults (a clock in step, times rounded up), or "".
func serverClock(cfg config) string {
	var parts []string
	switch cfg.rounding {
	case retrytest.RoundDown:
		parts = append(parts, "absolute times truncated to the second")
	case retrytest.RoundNearest:
		parts = append(parts, "absolute times rounded to the nearest second")
	}
	switch {
	case cfg.clockOffset > 0:
		parts = append(parts, "its clock "+simkit.Round3(cfg.clockOffset)+" ahead of the client's")
	case cfg.clockOffset < 0:
		parts = append(parts, "its clock "+simkit.Round3(-cfg.clockOffset)+" behind the client's")
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func familyName(f retrytest.Family) string {
	switch f {
	case retrytest.OpenAI:
		return "OpenAI-style"
	case retrytest.Anthropic:
		return "Anthropic-style"
	case retrytest.GitHub:
		return "GitHub-style"
	case retrytest.IETF:
		return "IETF-draft-style"
	}
	return "A plain"
}

func throttleStatus(f retrytest.Family) string {
	if f == retrytest.GitHub {
		return "403"
	}
	return "429"
}

// pct formats a probability as a percentage.
func pct(p float64) string { return strconv.FormatFloat(100*p, 'g', 3, 64) + "%" }

// unavailable is the flaky provider's Success handler: it answers a share
// of the attempts that reach it 503, as a proxy in front of an API does
// when a backend drops out. Whether attempt k of request i gets a 503
// depends only on (seed, i, k), not on the order attempts arrive in.
type unavailable struct {
	seed int64
	p    float64

	mu   sync.Mutex
	seen map[string]int // attempts that reached the handler, per request id
}

func newUnavailable(seed int64, p float64) *unavailable {
	return &unavailable{seed: seed, p: p, seen: make(map[string]int)}
}

func (u *unavailable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get(requestIDHeader)
	u.mu.Lock()
	k := u.seen[id]
	u.seen[id]++
	u.mu.Unlock()

	if draw(u.seed, id, k) < u.p {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "upstream connect error or disconnect/reset before headers. reset reason: connection termination\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"chatcmpl-sim%s","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`+"\n", id)
}

// draw is a uniform number in [0, 1) fixed by (seed, id, k).
func draw(seed int64, id string, k int) float64 {
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(seed))
	binary.LittleEndian.PutUint64(b[8:], uint64(k))
	h.Write(b[:])
	io.WriteString(h, id)
	// FNV's low bits mix poorly for near inputs; SplitMix64's finaliser
	// spreads them over the word first.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}
