// Streams (issue 14): an Anthropic-style provider whose streamed answers
// sometimes open with "event: error" overloaded_error after a 200, as
// overloaded LLM APIs do. Nothing of the answer has reached the caller
// then, so the attempt can be retried; a client that hands the stream over
// leaves the caller with an error it cannot retry itself without knowing
// what the transport knew. Every contender side by side in the same run.

package bench

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

const (
	streamCallers     = 20
	streamEach        = 10 // streams per caller, one after another
	streamOpenedError = 0.2
	streamReqTimeout  = 60 * time.Second
	streamRunTimeout  = 5 * time.Minute
)

// streamBody asks for a streamed answer, as the SDKs' streaming calls do.
var streamBody = []byte(`{"model":"bench-model","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"Say ok."}]}`)

// streamProvider is the provider of the scenario: every stream opens with
// overloaded_error with probability streamOpenedError, on the real clock.
func streamProvider() retrytest.Config {
	return retrytest.Config{
		Family:          retrytest.Anthropic,
		Flaky:           retrytest.Flaky{StreamError: streamOpenedError},
		RequestIDHeader: requestIDHeader,
		MaxAttempts:     benchFuse,
		Seed:            14,
	}
}

// streamOutcome reads one stream to its end and says how it went for the
// caller: "" for a whole answer (message_stop, no error event), else why
// not.
func streamOutcome(ctx context.Context, client *http.Client, url string, id int) string {
	ctx, cancel := context.WithTimeout(ctx, streamReqTimeout)
	defer cancel()
	resp, err := client.Do(jsonPost(ctx, url, streamBody, id))
	if err != nil {
		return errorReason(err)
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case resp.StatusCode != http.StatusOK:
		return "status " + strconv.Itoa(resp.StatusCode)
	case rerr != nil:
		return "reading the stream: " + rerr.Error()
	case bytes.Contains(body, []byte("event: error")):
		return "the caller read an error event"
	case !bytes.Contains(body, []byte("event: message_stop")):
		return "the stream ended early"
	}
	return ""
}

// runStreams has callers callers read each streams each, one after
// another, and returns when all are done.
func runStreams(client *http.Client, url string, callers, each int) loadResult {
	ctx, cancel := context.WithTimeout(context.Background(), streamRunTimeout)
	defer cancel()
	res := loadResult{reasons: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range each {
				t := time.Now()
				reason := streamOutcome(ctx, client, url, w*each+k)
				mu.Lock()
				res.record(reason, time.Since(t))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.wall = time.Since(t0)
	return res
}

// BenchmarkStreams runs the scenario once per iteration for every
// contender. Run it with -benchtime 1x.
//
// An op is one scenario of 200 streams. Metrics: whole-share is the streams
// the caller read whole, with no error event, over all; failed/op the
// others; opened-error/op the streams the provider opened with an error
// (retries included); attempts/req the amplification; p50-ms and p99-ms the
// time to read a whole stream. ns/op is the scenario's wall time.
func BenchmarkStreams(b *testing.B) {
	for _, c := range goodputContenders() {
		b.Run("impl="+c.name, func(b *testing.B) {
			var failed, attempts, opened int
			var lat []time.Duration
			reasons := map[string]int{}
			for range b.N {
				b.StopTimer()
				base := cleanhttp.DefaultPooledTransport()
				p := retrytest.NewServer(streamProvider())
				b.StartTimer()
				r := runStreams(&http.Client{Transport: c.wrap(base)}, p.URL+messagesPath, streamCallers, streamEach)
				b.StopTimer()
				base.CloseIdleConnections()
				p.Close()
				st := p.Stats()
				failed += r.failed
				attempts += st.Attempts
				opened += st.StreamErrors
				lat = append(lat, r.latencies...)
				for k, v := range r.reasons {
					reasons[k] += v
				}
				b.StartTimer()
			}
			n := float64(b.N)
			total := n * streamCallers * streamEach
			b.ReportMetric((total-float64(failed))/total, "whole-share")
			b.ReportMetric(float64(failed)/n, "failed/op")
			b.ReportMetric(float64(opened)/n, "opened-error/op")
			b.ReportMetric(float64(attempts)/total, "attempts/req")
			reportLatency(b, lat)
			if len(reasons) > 0 {
				var parts []string
				for k, v := range reasons {
					parts = append(parts, k+": "+strconv.Itoa(v))
				}
				b.Logf("failures: %s", strings.Join(parts, "; "))
			}
		})
	}
}

// TestStreamsScenario checks the scenario measures what it says: through
// the bare transport, about streamOpenedError of the streams reach the
// caller with an error event and no other failure happens; through
// retryhttp every stream is whole, with the errors retried. Fewer streams
// than the benchmark's, since retryhttp waits a backoff of a second or more
// before each retry.
func TestStreamsScenario(t *testing.T) {
	for _, c := range goodputContenders() {
		if c.name != "bare" && c.name != "retryhttp" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			base := cleanhttp.DefaultPooledTransport()
			defer base.CloseIdleConnections()
			p := retrytest.NewServer(streamProvider())
			defer p.Close()
			const callers, each = 20, 4
			r := runStreams(&http.Client{Transport: c.wrap(base)}, p.URL+messagesPath, callers, each)
			st := p.Stats()
			total := callers * each
			switch c.name {
			case "bare":
				if st.Attempts != total || r.failed != st.StreamErrors || r.reasons["the caller read an error event"] != r.failed {
					t.Errorf("bare: %d attempts for %d streams, %d failed (%v), %d opened with an error", st.Attempts, total, r.failed, r.reasons, st.StreamErrors)
				}
				if r.failed < total/20 || r.failed > total*4/10 {
					t.Errorf("bare: %d of %d streams opened with an error, want about a fifth", r.failed, total)
				}
			case "retryhttp":
				if r.failed != 0 {
					t.Errorf("retryhttp: %d of %d streams failed: %v", r.failed, total, r.reasons)
				}
				if st.Attempts != total+st.StreamErrors {
					t.Errorf("retryhttp: %d attempts, want one per stream plus one per error-opened stream (%d + %d)", st.Attempts, total, st.StreamErrors)
				}
			}
		})
	}
}
