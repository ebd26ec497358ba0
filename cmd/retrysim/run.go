package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-cleanhttp"

	"github.com/retryhttp/retryhttp/retrytest"

	"github.com/retryhttp/retryhttp/internal/simkit"
)

// runResult is one policy's run of one scenario.
type runResult struct {
	scenario *scenario
	policy   policy
	start    time.Time       // when its first request went out: the chart's 0
	requests []*requestTrace // indexed by request number
	wall     time.Duration   // until its last request ended
	server   retrytest.Stats // what the provider saw
}

// runScenario runs every policy of sc and returns their results in policy
// order. With -parallel the runs go at the same time, except that where
// sc.pacedAlone is set the policies that pace run first, one at a time (see
// scenario.pacedAlone); without it, or where sc.serial is set, every run
// goes alone, in order.
func runScenario(ctx context.Context, cfg config, sc *scenario, prog progress) []*runResult {
	results := make([]*runResult, len(sc.policies))
	runIt := func(i int) {
		results[i] = runOne(ctx, cfg, sc, sc.policies[i], prog)
		prog.finished(results[i])
	}
	var together []int
	for i, p := range sc.policies {
		if cfg.parallel && !sc.serial && !(sc.pacedAlone && p.paces) {
			together = append(together, i)
			continue
		}
		runIt(i)
	}
	var wg sync.WaitGroup
	for _, i := range together {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runIt(i)
		}()
	}
	wg.Wait()
	return results
}

// runOne sends sc's load through policy p to a provider of its own.
func runOne(ctx context.Context, cfg config, sc *scenario, p policy, prog progress) *runResult {
	srv := retrytest.NewServer(sc.provider())
	defer srv.Close()
	pooled := cleanhttp.DefaultPooledTransport()
	// Enough idle connections that a burst of goroutines reuses them rather
	// than opening (and leaving in TIME_WAIT) one per request.
	pooled.MaxIdleConnsPerHost = 64
	base := &recorder{next: pooled}
	defer base.CloseIdleConnections()

	r := &runResult{scenario: sc, policy: p, requests: make([]*requestTrace, sc.requests)}
	for i := range r.requests {
		r.requests[i] = &requestTrace{id: i}
	}
	url := srv.URL + sc.path
	send := func(s sender, i int) {
		sendOne(ctx, cfg.timeout, s, url, r.requests[i])
		prog.request()
	}

	var wg sync.WaitGroup
	r.start = time.Now()
	switch sc.load {
	case closedLoop:
		s := p.client(base)
		next := make(chan int)
		for range sc.workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					send(s, i)
				}
			}()
		}
	feed:
		for i := range sc.requests {
			select {
			case next <- i:
			case <-ctx.Done():
				break feed
			}
		}
		close(next)
	case openLoop:
		s := p.client(base)
		every := time.Duration(float64(time.Second) / sc.rate)
		for i := range sc.requests {
			// Each arrival is placed on the schedule from the start, so
			// timer lateness does not add up over the run.
			if !simkit.Sleep(ctx, time.Until(r.start.Add(time.Duration(i)*every))) {
				break
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				send(s, i)
			}()
		}
	case manyClients:
		// Every client gets its own sender first, then all are let go at
		// once: the herd of AWS's study.
		senders := make([]sender, sc.requests)
		for i := range senders {
			senders[i] = p.client(base)
		}
		gate := make(chan struct{})
		for i, s := range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				send(s, i)
			}()
		}
		r.start = time.Now()
		close(gate)
	}
	wg.Wait()

	end := r.start
	for _, tr := range r.requests {
		if !tr.sent {
			// Only the run's cap stops requests from being sent.
			tr.start, tr.end, tr.reason = end, end, "not sent: -max-time reached"
			prog.request()
		}
		end = later(end, tr.end)
	}
	r.wall = end.Sub(r.start)
	base.CloseIdleConnections()
	r.server = srv.Stats()
	return r
}

// sendOne sends request tr through s, reads its answer as a caller would,
// and records how it ended.
func sendOne(runCtx context.Context, timeout time.Duration, s sender, url string, tr *requestTrace) {
	ctx, cancel := context.WithTimeout(runCtx, timeout)
	defer cancel()
	ctx = withTrace(ctx, tr)
	id := strconv.Itoa(tr.id)
	body := []byte(`{"model":"sim-1","id":` + id + `,"messages":[{"role":"user","content":"Say ok."}]}`)
	newReq := func(ctx context.Context) (*http.Request, error) {
		// A bytes.Reader body gets GetBody from NewRequest, so retries
		// resend it without a copy.
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(requestIDHeader, id)
		return req, nil
	}
	tr.mu.Lock()
	tr.start, tr.sent = time.Now(), true
	tr.mu.Unlock()
	resp, err := s(ctx, newReq)
	var bodyErr error
	if err == nil {
		_, bodyErr = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	tr.finish(resp, err, bodyErr)
	if err != nil && runCtx.Err() != nil {
		// The run was cut short, not the request's own deadline.
		tr.mu.Lock()
		tr.reason = "stopped: -max-time reached"
		if errors.Is(runCtx.Err(), context.Canceled) {
			tr.reason = "stopped: interrupted"
		}
		tr.mu.Unlock()
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
