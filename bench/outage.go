// Loopback providers for the overload scenarios of issue 4: one that is down
// for a while and then recovers (OutageProvider), and one that serves a fixed
// number of requests at once and sheds the rest (CapacityProvider).

package bench

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/retryhttp/retryhttp"
)

// Defaults of OutageConfig: the outage scenario of issue 4.
const (
	// DefaultOutage is how long the provider is down after it starts.
	DefaultOutage = 3 * time.Second
	// DefaultOutageMaxRequests is the fuse: far above the scenario's 600
	// requests times the few attempts a sane client makes.
	DefaultOutageMaxRequests = 100_000
)

// OutageConfig configures an OutageProvider. Zero fields take the defaults.
type OutageConfig struct {
	// Outage is how long after the provider's start it answers 529: an
	// arrival at start+Outage or later is served.
	Outage time.Duration
	// RetryAfter, when not empty, is sent verbatim as the Retry-After header
	// of every 529. Empty by default because Anthropic's 529s usually carry
	// none, which leaves clients to their own backoff.
	RetryAfter string
	// MaxRequests is a fuse that bounds a run whatever the client does:
	// past this many arrivals every request gets 410 Gone, which no
	// contender retries.
	MaxRequests int
	// Now is the clock; nil means time.Now. The benchmark uses the real
	// clock; tests inject one so the edge of the window is exact.
	Now func() time.Time
}

// OutageProvider is a loopback HTTP server (an httptest.Server on 127.0.0.1)
// that is overloaded for the first Outage after it starts and healthy after
// that. During the outage every request gets 529 with Anthropic's
// overloaded_error body and a request-id header, as the real API sends; after
// it, 200 with a small message body. It is safe for concurrent use.
type OutageProvider struct {
	// URL is the server's base URL, "http://127.0.0.1:port".
	URL string

	cfg   OutageConfig
	srv   *httptest.Server
	start time.Time

	mu         sync.Mutex
	received   int
	overloaded int
	ok         int
	fused      int
	arrivals   []time.Duration
}

// OutageStats is a snapshot of what an OutageProvider has seen.
type OutageStats struct {
	Received int // requests that arrived: attempts, retries included
	// Overloaded is how many arrived during the outage window and got 529:
	// the load that retries add to a provider that is already down.
	Overloaded int
	OK         int // 200s sent
	Fused      int // 410s sent after the MaxRequests fuse blew (0 in a sane run)
	// Arrivals holds each request's arrival time since the start, in
	// arrival order.
	Arrivals []time.Duration
}

// NewOutageProvider starts an OutageProvider; its outage starts now (by its
// clock) and lasts cfg.Outage. Close it when done.
func NewOutageProvider(cfg OutageConfig) *OutageProvider {
	if cfg.Outage <= 0 {
		cfg.Outage = DefaultOutage
	}
	if cfg.MaxRequests <= 0 {
		cfg.MaxRequests = DefaultOutageMaxRequests
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	p := &OutageProvider{cfg: cfg, start: cfg.Now()}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	p.URL = p.srv.URL
	return p
}

// Start is when the outage began. A load generator schedules its requests
// from this instant so that "offered during the outage" means the same thing
// to it and to the provider.
func (p *OutageProvider) Start() time.Time { return p.start }

// Outage is how long the outage lasts.
func (p *OutageProvider) Outage() time.Duration { return p.cfg.Outage }

// Close shuts the server down, closing its connections.
func (p *OutageProvider) Close() { p.srv.Close() }

// Stats returns what the provider has seen so far.
func (p *OutageProvider) Stats() OutageStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return OutageStats{
		Received:   p.received,
		Overloaded: p.overloaded,
		OK:         p.ok,
		Fused:      p.fused,
		Arrivals:   append([]time.Duration(nil), p.arrivals...),
	}
}

// outageVerdict is how the provider answers one arrival.
type outageVerdict int

const (
	verdictOK outageVerdict = iota
	verdictOverloaded
	verdictFused
)

// admit records one arrival and decides its answer. The clock is read under
// the lock so arrivals are recorded in order even when requests race.
func (p *OutageProvider) admit() (outageVerdict, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	since := p.cfg.Now().Sub(p.start)
	p.received++
	p.arrivals = append(p.arrivals, since)
	switch {
	case p.received > p.cfg.MaxRequests:
		p.fused++
		return verdictFused, p.received
	case since < p.cfg.Outage:
		p.overloaded++
		return verdictOverloaded, p.received
	default:
		p.ok++
		return verdictOK, p.received
	}
}

func (p *OutageProvider) serve(w http.ResponseWriter, r *http.Request) {
	// Read the request as a real server does, so a client's body goes out
	// in full before the answer comes back.
	io.Copy(io.Discard, r.Body)
	v, id := p.admit()
	h := w.Header()
	h.Set("Content-Type", "application/json")
	switch v {
	case verdictFused:
		w.WriteHeader(http.StatusGone)
		io.WriteString(w, fuseBody)
		return
	case verdictOverloaded:
		h.Set("Request-Id", "req_bench_"+strconv.Itoa(id))
		if p.cfg.RetryAfter != "" {
			h.Set("Retry-After", p.cfg.RetryAfter)
		}
		w.WriteHeader(retryhttp.StatusOverloaded)
		fmt.Fprintf(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_bench_%d"}`, id)
	default:
		h.Set("Request-Id", "req_bench_"+strconv.Itoa(id))
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, messageBody, id)
	}
}

// messageBody is a small Anthropic-style message, the answer to a chat call.
const messageBody = `{"id":"msg_bench_%d","type":"message","role":"assistant","model":"bench-model","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn"}`

// fuseBody is what a provider sends once its fuse has blown.
const fuseBody = `{"error":{"message":"benchmark fuse: request budget spent","type":"fuse"}}`

// Defaults of CapacityConfig: the capacity scenario of issue 4.
const (
	// DefaultCapacity is how many requests the provider serves at once.
	DefaultCapacity = 50
	// DefaultCapacityHold is how long it takes to serve one, so the
	// provider's throughput is at most Capacity/Hold = 2500 requests/s.
	DefaultCapacityHold = 20 * time.Millisecond
	// DefaultCapacityMaxRequests is the fuse: far above the scenario's
	// 1500 requests times the few attempts a sane client makes.
	DefaultCapacityMaxRequests = 100_000
)

// CapacityConfig configures a CapacityProvider. Zero fields take the defaults.
type CapacityConfig struct {
	// Capacity is how many requests may be in service at once.
	Capacity int
	// Hold is how long each admitted request stays in service.
	Hold time.Duration
	// RetryAfter, when not empty, is sent verbatim as the Retry-After header
	// of every 503. Empty by default: a server shedding load rarely knows
	// when a slot will be free.
	RetryAfter string
	// MaxRequests is a fuse, as in OutageConfig.
	MaxRequests int
}

// CapacityProvider is a loopback HTTP server (an httptest.Server on
// 127.0.0.1) with a fixed capacity: up to Capacity requests are served at
// once, each held for Hold before a 200; a request that arrives while all
// slots are taken gets 503 at once, as a server shedding load does. It is
// safe for concurrent use.
type CapacityProvider struct {
	// URL is the server's base URL, "http://127.0.0.1:port".
	URL string

	cfg CapacityConfig
	srv *httptest.Server
	// hold keeps an admitted request in service. It is a field so tests can
	// decide when a slot frees instead of racing a timer.
	hold func(r *http.Request)

	mu        sync.Mutex
	inService int
	peak      int
	received  int
	served    int
	rejected  int
	fused     int
}

// CapacityStats is a snapshot of what a CapacityProvider has seen.
type CapacityStats struct {
	Received  int // requests that arrived: attempts, retries included
	Served    int // 200s sent
	Rejected  int // 503s sent because every slot was taken
	Fused     int // 410s sent after the MaxRequests fuse blew (0 in a sane run)
	InService int // requests in service now
	Peak      int // the most requests ever in service at once (≤ Capacity)
}

// NewCapacityProvider starts a CapacityProvider. Close it when done.
func NewCapacityProvider(cfg CapacityConfig) *CapacityProvider {
	if cfg.Hold <= 0 {
		cfg.Hold = DefaultCapacityHold
	}
	hold := cfg.Hold
	return newCapacityProvider(cfg, func(r *http.Request) {
		// A client that gives up frees its slot at once, as it would on a
		// real server that notices the closed connection.
		t := time.NewTimer(hold)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
		}
	})
}

// newCapacityProvider starts a CapacityProvider whose admitted requests stay
// in service until hold returns.
func newCapacityProvider(cfg CapacityConfig, hold func(*http.Request)) *CapacityProvider {
	if cfg.Capacity <= 0 {
		cfg.Capacity = DefaultCapacity
	}
	if cfg.Hold <= 0 {
		cfg.Hold = DefaultCapacityHold
	}
	if cfg.MaxRequests <= 0 {
		cfg.MaxRequests = DefaultCapacityMaxRequests
	}
	p := &CapacityProvider{cfg: cfg, hold: hold}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	p.URL = p.srv.URL
	return p
}

// Close shuts the server down, closing its connections.
func (p *CapacityProvider) Close() { p.srv.Close() }

// Stats returns what the provider has seen so far.
func (p *CapacityProvider) Stats() CapacityStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return CapacityStats{
		Received:  p.received,
		Served:    p.served,
		Rejected:  p.rejected,
		Fused:     p.fused,
		InService: p.inService,
		Peak:      p.peak,
	}
}

// enter records one arrival and takes a slot if one is free.
func (p *CapacityProvider) enter() (admitted, fused bool, id int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.received++
	id = p.received
	switch {
	case p.received > p.cfg.MaxRequests:
		p.fused++
		return false, true, id
	case p.inService >= p.cfg.Capacity:
		p.rejected++
		return false, false, id
	}
	p.inService++
	p.peak = max(p.peak, p.inService)
	return true, false, id
}

// leave frees a slot once its request has been served.
func (p *CapacityProvider) leave() {
	p.mu.Lock()
	p.inService--
	p.served++
	p.mu.Unlock()
}

func (p *CapacityProvider) serve(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	admitted, fused, id := p.enter()
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if fused {
		w.WriteHeader(http.StatusGone)
		io.WriteString(w, fuseBody)
		return
	}
	h.Set("Request-Id", "req_bench_"+strconv.Itoa(id))
	if !admitted {
		if p.cfg.RetryAfter != "" {
			h.Set("Retry-After", p.cfg.RetryAfter)
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":{"type":"service_unavailable","message":"Service unavailable: at capacity, try again later"}}`)
		return
	}
	p.hold(r)
	// The slot is freed before the answer goes out, so a client that has
	// its 200 knows the slot is free again (the tests rely on that).
	p.leave()
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, messageBody, id)
}
