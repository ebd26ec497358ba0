package bench

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"
)

// Header families the Provider can speak. Each is the way one kind of real API
// tells clients how much of its request quota is left.
const (
	// FamilyOpenAI sends x-ratelimit-{limit,remaining,reset}-requests, the
	// reset as a Go-style duration until the quota is whole again ("90ms").
	FamilyOpenAI = "openai"
	// FamilyAnthropic sends anthropic-ratelimit-requests-{limit,remaining,reset},
	// the reset as an RFC 3339 UTC timestamp in whole seconds.
	FamilyAnthropic = "anthropic"
	// FamilyIETF sends the IETF draft's RateLimit and RateLimit-Policy
	// structured fields, with delay-seconds resets.
	FamilyIETF = "ietf"
)

// RequestIDHeader carries the client's own number for a logical request. Every
// retrying contender copies the caller's headers onto each attempt, so the
// provider can tell how many logical requests ever saw a 429, not only how
// many 429s it sent. A real API ignores it, and so does the bucket.
const RequestIDHeader = "X-Bench-Request"

// Defaults of ProviderConfig: the goodput scenario of issue 3.
const (
	DefaultProviderRate  = 100.0 // tokens (requests) added per second
	DefaultProviderBurst = 10    // bucket size
	// DefaultProviderMaxRequests is the fuse: far above what any sane client
	// sends in the scenario (500 requests × at most a few attempts).
	DefaultProviderMaxRequests = 100_000
)

// ProviderConfig configures a Provider. Zero fields take the defaults.
type ProviderConfig struct {
	// Rate is how many requests per second the bucket refills. The IETF
	// family states it as RateLimit-Policy's q with w=1, which the draft
	// wants an integer: use a whole rate with that family.
	Rate float64
	// Burst is the bucket's size: how many requests may arrive at once.
	Burst int
	// Family selects the rate-limit headers (FamilyOpenAI when empty).
	Family string
	// MaxRequests is a fuse that bounds a run whatever the client does: once
	// this many requests have arrived, every further one gets 410 Gone, which
	// no contender retries, so a runaway retry loop ends at once.
	MaxRequests int
	// Now is the clock; nil means time.Now. The benchmark uses the real clock
	// (the provider is the system under load); tests inject a fixed one so
	// header values are exact.
	Now func() time.Time
}

// Provider is a loopback HTTP server (an httptest.Server on 127.0.0.1) that
// enforces a token bucket the way a rate-limited API does. Every response
// carries the selected family's rate-limit headers; a request that finds the
// bucket empty gets 429 with a whole-second Retry-After and a JSON error body
// in the provider's style. It is safe for concurrent use.
type Provider struct {
	// URL is the server's base URL, "http://127.0.0.1:port".
	URL string

	cfg ProviderConfig
	srv *httptest.Server

	mu       sync.Mutex
	start    time.Time
	tokens   float64
	last     time.Time // when tokens was last brought up to date
	received int
	rejected int
	fused    int
	arrivals []time.Duration
	saw429   map[string]struct{}
}

// Stats is a snapshot of what a Provider has seen.
type Stats struct {
	Received int // requests that arrived: attempts, retries included
	Rejected int // 429s sent
	Fused    int // 410s sent after the MaxRequests fuse blew (0 in a sane run)
	// Saw429 is how many distinct logical requests (by RequestIDHeader) got
	// at least one 429. Requests without the header are not counted.
	Saw429 int
	// Arrivals holds each request's arrival time since the provider
	// started, in arrival order.
	Arrivals []time.Duration
}

// NewProvider starts a Provider with a full bucket. Close it when done.
func NewProvider(cfg ProviderConfig) *Provider {
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultProviderRate
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultProviderBurst
	}
	if cfg.Family == "" {
		cfg.Family = FamilyOpenAI
	}
	if cfg.MaxRequests <= 0 {
		cfg.MaxRequests = DefaultProviderMaxRequests
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	switch cfg.Family {
	case FamilyOpenAI, FamilyAnthropic, FamilyIETF:
	default:
		panic("bench: unknown header family " + strconv.Quote(cfg.Family))
	}
	now := cfg.Now()
	p := &Provider{
		cfg:    cfg,
		start:  now,
		tokens: float64(cfg.Burst),
		last:   now,
		saw429: make(map[string]struct{}),
	}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	p.URL = p.srv.URL
	return p
}

// Close shuts the server down, closing its connections.
func (p *Provider) Close() { p.srv.Close() }

// Stats returns what the provider has seen so far.
func (p *Provider) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{
		Received: p.received,
		Rejected: p.rejected,
		Fused:    p.fused,
		Saw429:   len(p.saw429),
		Arrivals: append([]time.Duration(nil), p.arrivals...),
	}
}

// decision is what the bucket said about one request, with the figures the
// headers report.
type decision struct {
	now       time.Time
	allowed   bool
	fused     bool
	remaining int           // whole tokens left after this request
	untilFull time.Duration // until the bucket is full again (exact, not rounded)
	untilOne  time.Duration // until one token is available (0 if one is)
	id        int           // the provider's own request id, for request-id
}

// take brings the bucket up to date and spends a token if one is there.
func (p *Provider) take(clientID string) decision {
	p.mu.Lock()
	defer p.mu.Unlock()
	// The clock is read under the lock so that arrivals and refills are in
	// order even when requests race.
	now := p.cfg.Now()
	p.received++
	p.arrivals = append(p.arrivals, now.Sub(p.start))
	d := decision{now: now, id: p.received}
	if p.received > p.cfg.MaxRequests {
		p.fused++
		d.fused = true
		return d
	}
	if el := now.Sub(p.last); el > 0 {
		p.tokens = math.Min(float64(p.cfg.Burst), p.tokens+p.cfg.Rate*el.Seconds())
		p.last = now
	}
	if p.tokens >= 1 {
		p.tokens--
		d.allowed = true
	} else {
		p.rejected++
		if clientID != "" {
			p.saw429[clientID] = struct{}{}
		}
		d.untilOne = seconds((1 - p.tokens) / p.cfg.Rate)
	}
	d.remaining = int(math.Floor(p.tokens))
	d.untilFull = seconds((float64(p.cfg.Burst) - p.tokens) / p.cfg.Rate)
	return d
}

// seconds converts fractional seconds to a Duration, rounding up to the
// nanosecond so a reset is never reported earlier than it is.
func seconds(s float64) time.Duration {
	if s <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(s * float64(time.Second)))
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

func (p *Provider) serve(w http.ResponseWriter, r *http.Request) {
	// Read the request as a real server does, so a client's body goes out
	// in full before the answer comes back.
	io.Copy(io.Discard, r.Body)
	d := p.take(r.Header.Get(RequestIDHeader))
	h := w.Header()
	if d.fused {
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusGone)
		io.WriteString(w, `{"error":{"message":"benchmark fuse: request budget spent","type":"fuse"}}`)
		return
	}
	p.setRateLimitHeaders(h, d)
	if d.allowed {
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, `{"id":"chatcmpl-%d","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`, d.id)
		return
	}
	// Retry-After is whole seconds (RFC 9110 delay-seconds), rounded up so a
	// client that honours it finds a token, and never 0, as real APIs send.
	h.Set("Retry-After", strconv.FormatInt(max(1, ceilSeconds(d.untilOne)), 10))
	switch p.cfg.Family {
	case FamilyOpenAI:
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, `{"error":{"message":"Rate limit reached for requests per second: Limit %d, Used %d, Requested 1. Please try again later.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
			p.cfg.Burst, p.cfg.Burst)
	case FamilyAnthropic:
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of %d requests per second. Please retry later."},"request_id":"req_bench_%d"}`,
			int(p.cfg.Rate), d.id)
	case FamilyIETF:
		// RFC 9457 problem details: what an API that follows the IETF
		// drafts, rather than one vendor, sends.
		h.Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"Request quota exhausted; see RateLimit and Retry-After."}`)
	}
}

// setRateLimitHeaders writes the family's quota headers, which go on every
// response, 200 and 429 alike, as the real APIs do.
func (p *Provider) setRateLimitHeaders(h http.Header, d decision) {
	limit := strconv.Itoa(p.cfg.Burst)
	remaining := strconv.Itoa(d.remaining)
	switch p.cfg.Family {
	case FamilyOpenAI:
		h.Set("X-Request-Id", "req_bench_"+strconv.Itoa(d.id))
		h.Set("X-Ratelimit-Limit-Requests", limit)
		h.Set("X-Ratelimit-Remaining-Requests", remaining)
		// OpenAI: time until the limit is back to its initial state, as a Go
		// duration. Rounded up to the millisecond ("90ms", "1.2s", "0s")
		// because OpenAI sends no finer values.
		h.Set("X-Ratelimit-Reset-Requests", ceilDur(d.untilFull, time.Millisecond).String())
	case FamilyAnthropic:
		h.Set("Request-Id", "req_bench_"+strconv.Itoa(d.id))
		h.Set("Anthropic-Ratelimit-Requests-Limit", limit)
		h.Set("Anthropic-Ratelimit-Requests-Remaining", remaining)
		// Anthropic: the instant the bucket is full again, RFC 3339 in UTC
		// with whole seconds, rounded up so it is never early.
		reset := d.now.Add(d.untilFull).UTC()
		if t := reset.Truncate(time.Second); !t.Equal(reset) {
			reset = t.Add(time.Second)
		}
		h.Set("Anthropic-Ratelimit-Requests-Reset", reset.Format(time.RFC3339))
	case FamilyIETF:
		h.Set("RateLimit", fmt.Sprintf(`"default";r=%d;t=%d`, d.remaining, ceilSeconds(d.untilFull)))
		h.Set("RateLimit-Policy", `"default";q=`+strconv.FormatFloat(p.cfg.Rate, 'f', -1, 64)+`;w=1`)
	}
}

// ceilDur rounds d up to a multiple of unit.
func ceilDur(d, unit time.Duration) time.Duration {
	if r := d % unit; r != 0 {
		d += unit - r
	}
	return d
}
