package retrytest

import (
	"maps"
	"time"
)

// Stats is a snapshot of what a provider has seen. The lists hold at most
// Config.MaxRecords entries each ([DefaultMaxRecords] by default); the
// counters count everything.
type Stats struct {
	// Attempts is how many requests arrived, retries included.
	Attempts int
	// Statuses counts answers by status code, when each was sent. Key 0
	// counts requests that got no answer: a reset, or a client that gave
	// up during a delay or capacity hold.
	Statuses map[int]int
	// Resets, Truncated and Slowed count the network faults staged,
	// scripted or random: connections reset, bodies cut short, answers
	// delayed. StreamErrors counts the streams that [Flaky].StreamError
	// opened with an error event.
	Resets, Truncated, Slowed, StreamErrors int
	// InService is how many requests hold a [Capacity] slot now;
	// PeakInService is the most that ever did at once.
	InService, PeakInService int

	// Arrivals holds each request's arrival time since the provider's
	// start (Config.Now), in arrival order.
	Arrivals []time.Duration
	// BodySHA256 holds the hex SHA-256 of each request's body, in arrival
	// order (an empty body hashes as e3b0c442...). A retrying client must
	// send the same bytes on every attempt: see DistinctBodies.
	BodySHA256 []string
	// Requests groups attempts by the Config.RequestIDHeader value; nil
	// when that is not set. At most MaxRecords ids are kept.
	Requests map[string]RequestStats
	// Dropped counts arrivals left out of Arrivals and BodySHA256 because
	// the lists were full.
	Dropped int
}

// RequestStats is what a provider saw of one logical request.
type RequestStats struct {
	// Attempts is how many times the request arrived.
	Attempts int
	// Statuses lists the statuses it was answered with, in the order they
	// were sent; 0 marks an attempt that got no answer.
	Statuses []int
}

// DistinctBodies is how many different request bodies the recorded
// arrivals carried: 1 when every attempt sent the same bytes.
func (s Stats) DistinctBodies() int {
	seen := make(map[string]struct{}, 1)
	for _, h := range s.BodySHA256 {
		seen[h] = struct{}{}
	}
	return len(seen)
}

// stats copies the records out, so the caller may keep and change them.
func (c *core) stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{
		Attempts:      c.attempts,
		Statuses:      maps.Clone(c.statuses),
		Resets:        c.resets,
		Truncated:     c.truncated,
		Slowed:        c.slowed,
		StreamErrors:  c.streamErrors,
		InService:     c.inService,
		PeakInService: c.peak,
		Arrivals:      append([]time.Duration(nil), c.arrivals...),
		BodySHA256:    append([]string(nil), c.hashes...),
		Dropped:       c.dropped,
	}
	if c.cfg.RequestIDHeader != "" {
		s.Requests = make(map[string]RequestStats, len(c.requests))
		for id, rs := range c.requests {
			s.Requests[id] = RequestStats{
				Attempts: rs.Attempts,
				Statuses: append([]int(nil), rs.Statuses...),
			}
		}
	}
	return s
}
