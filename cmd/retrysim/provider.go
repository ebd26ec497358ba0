package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Headers the simulator's clients send so the provider can follow its
// failure script and count attempts per client.
const (
	requestIDHeader = "X-Sim-Request-Id" // the request's number in the batch, 0-based
	clientHeader    = "X-Sim-Client"     // which client sent it ("plain", "retryhttp")
)

// outcome is what the provider answers to one attempt.
type outcome int

const (
	outcomeOK          outcome = iota // 200 with a small message body
	outcomeUnavailable                // 503 with a plain-text body, as a proxy sends
	outcomeOverloaded                 // 529 with Anthropic's overloaded_error body
	outcomeRateLimited                // 429 with Retry-After: 1 and a rate_limit_error body
)

// script is the provider's failure script. Whether attempt k of request i
// fails, and how, depends only on (seed, i, k): not on timing, scheduling or
// which client asks. So every client in a run meets exactly the same
// failures: request i's first attempt fails for the plain client if and only
// if it fails for retryhttp, and retryhttp's retries then meet attempts
// 1, 2, ... of the same script.
type script struct {
	seed     uint64
	failRate float64 // probability that an attempt fails, in [0, 1]
}

// decide returns the outcome of attempt k (0-based) of request i.
func (s script) decide(i, k int) outcome {
	h := mix(mix(mix(s.seed)^uint64(i)) ^ uint64(k))
	// The top 53 bits give a uniform float in [0, 1): fail when below the
	// rate, so 0 never fails and 1 always does.
	if float64(h>>11)/(1<<53) >= s.failRate {
		return outcomeOK
	}
	// A second mix picks the kind, independent of the fail decision.
	return outcomeUnavailable + outcome(mix(h)%3)
}

// mix is the SplitMix64 finaliser: a cheap bijection whose output bits each
// depend on every input bit, so nearby (seed, i, k) give unrelated results.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// provider is an LLM-style API on loopback that fails transiently by script.
type provider struct {
	URL string // base URL, http://127.0.0.1:port

	script script
	srv    *http.Server
	done   chan struct{} // closed when Serve returns

	mu       sync.Mutex
	attempts map[attemptKey]int // attempts seen per client and request
	total    map[string]int     // attempts seen per client
}

type attemptKey struct {
	client string
	id     int
}

// startProvider listens on a free loopback port and serves until Close.
func startProvider(s script) (*provider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("start provider: %w", err)
	}
	p := &provider{
		URL:      "http://" + ln.Addr().String(),
		script:   s,
		done:     make(chan struct{}),
		attempts: make(map[attemptKey]int),
		total:    make(map[string]int),
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(p.done)
		p.srv.Serve(ln) // always returns an error; ErrServerClosed after Close
	}()
	return p, nil
}

// Close stops the server and waits for it, so no goroutine outlives it.
func (p *provider) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if p.srv.Shutdown(ctx) != nil {
		p.srv.Close()
	}
	<-p.done
}

// Attempts returns how many attempts the provider has received from client.
func (p *provider) Attempts(client string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total[client]
}

// requestAttempts returns how many attempts the provider has received from
// client for request id.
func (p *provider) requestAttempts(client string, id int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attempts[attemptKey{client, id}]
}

// simRequest is the body the simulator's clients send.
type simRequest struct {
	ID     int    `json:"id"`
	Prompt string `json:"prompt"`
}

// ServeHTTP answers one attempt as the script says. It first checks that the
// body arrived whole and matches the request id, so a retry that resent a
// short or stale body would show up as a 400 rather than pass unnoticed.
func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "use POST")
		return
	}
	id, err := strconv.Atoi(r.Header.Get(requestIDHeader))
	if err != nil || id < 0 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "missing or bad "+requestIDHeader)
		return
	}
	var body simRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil || body.ID != id {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "body does not match "+requestIDHeader)
		return
	}

	client := r.Header.Get(clientHeader)
	p.mu.Lock()
	k := p.attempts[attemptKey{client, id}]
	p.attempts[attemptKey{client, id}]++
	p.total[client]++
	p.mu.Unlock()

	w.Header().Set("Request-Id", fmt.Sprintf("req_sim_%d_%d", id, k))
	switch p.script.decide(id, k) {
	case outcomeUnavailable:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "upstream connect error or disconnect/reset before headers\n")
	case outcomeOverloaded:
		writeError(w, 529, "overloaded_error", "Overloaded")
	case outcomeRateLimited:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, "rate_limit_error", "Number of requests has exceeded your rate limit. Please try again later.")
	default:
		fmt.Fprintf(w, `{"id":"msg_sim_%d","type":"message","role":"assistant","content":[{"type":"text","text":"ok"}]}`+"\n", id)
	}
}

// writeError writes an error in Anthropic's shape:
// {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	var doc struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	doc.Type, doc.Error.Type, doc.Error.Message = "error", typ, msg
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(doc)
}
