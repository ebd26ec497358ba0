// Behaviour under overload (issue 4, issue 12): an outage that ends
// (BenchmarkOutage, here) and providers of fixed or changing capacity
// (BenchmarkCapacity, capacity_test.go), for the bare transport and the
// five libraries with their defaults (resty and rehttp, which have none,
// with the setup of peers_test.go). The providers are retrytest servers.

package bench

import (
	"context"
	"math"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

// The outage scenario of issue 4: 100 requests per second offered for 6 s,
// open loop, to a provider that answers 529 for the first 3 s.
const (
	outageLength     = 3 * time.Second       // the provider answers 529 from its start until then
	outageInterval   = 10 * time.Millisecond // request i starts at i × 10 ms: 100 req/s
	outageRequests   = 600                   // 6 s of load
	outageReqTimeout = 30 * time.Second      // per request, retries included, so nothing hangs
	outageRunTimeout = 2 * time.Minute       // the whole scenario, whatever a contender does
)

// messagesPath is the endpoint both scenarios call; the providers answer any.
const messagesPath = "/v1/messages"

// outageProvider is the provider of the outage scenario, on the real clock:
// for outageLength after its start every request gets 529 with Anthropic's
// overloaded_error body, its request-id header and no Retry-After (as
// Anthropic's 529s usually have none, which leaves clients to their own
// backoff); after that, 200 with a small message body.
func outageProvider() retrytest.Config {
	return retrytest.Config{
		Family:      retrytest.Anthropic,
		Overload:    []retrytest.Window{{From: 0, Until: outageLength, Status: retryhttp.StatusOverloaded}},
		MaxAttempts: benchFuse,
	}
}

// openLoop is an open-loop load: request i starts at start + i×interval in a
// goroutine of its own, whether or not earlier ones have finished, as
// independent users do. A closed loop would slow down with the provider and
// hide how much load the retries add.
type openLoop struct {
	interval   time.Duration
	n          int
	reqTimeout time.Duration // from the request's scheduled start
	runTimeout time.Duration // from start, for the whole run
}

// offeredBefore is how many of the load's requests are scheduled to start
// before d has passed: the requests offered during an outage of length d.
func (l openLoop) offeredBefore(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	k := int((d + l.interval - 1) / l.interval) // i×interval < d ⇔ i < d/interval
	return min(k, l.n)
}

// loadResult is what the callers saw in one run.
type loadResult struct {
	wall      time.Duration
	failed    int
	reasons   map[string]int  // failure reason → count
	latencies []time.Duration // of successful requests, in completion order
}

// record adds one request's outcome.
func (r *loadResult) record(reason string, latency time.Duration) {
	if reason != "" {
		r.failed++
		r.reasons[reason]++
		return
	}
	r.latencies = append(r.latencies, latency)
}

// runOpenLoop offers load to url through client from start on and returns
// when every request has finished. A request's latency runs from its
// scheduled start, so a late scheduler would count against the result, never
// for it.
func runOpenLoop(client *http.Client, url string, start time.Time, load openLoop) loadResult {
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(load.runTimeout))
	defer cancel()
	res := loadResult{reasons: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < load.n; i++ {
		at := start.Add(time.Duration(i) * load.interval)
		time.Sleep(time.Until(at))
		if ctx.Err() != nil {
			// The run's bound cut the schedule short (not in a sane run):
			// the requests never sent count as failed.
			mu.Lock()
			for ; i < load.n; i++ {
				res.record("not sent: run timeout", 0)
			}
			mu.Unlock()
			break
		}
		wg.Add(1)
		go func(id int, at time.Time) {
			defer wg.Done()
			rctx, rcancel := context.WithDeadline(ctx, at.Add(load.reqTimeout))
			defer rcancel()
			reason := goodputRequest(rctx, client, url, id)
			lat := time.Since(at)
			mu.Lock()
			res.record(reason, lat)
			mu.Unlock()
		}(i, at)
	}
	wg.Wait()
	res.wall = time.Since(start)
	return res
}

// runClosedLoop sends workers×perWorker requests to url through client from
// workers goroutines that start together, each sending its share one after
// another, and returns when all have finished.
func runClosedLoop(client *http.Client, url string, workers, perWorker int, reqTimeout, runTimeout time.Duration) loadResult {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	res := loadResult{reasons: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	begin := make(chan struct{})
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			<-begin
			for k := 0; k < perWorker; k++ {
				t := time.Now()
				rctx, rcancel := context.WithTimeout(ctx, reqTimeout)
				reason := goodputRequest(rctx, client, url, w*perWorker+k)
				rcancel()
				lat := time.Since(t)
				mu.Lock()
				res.record(reason, lat)
				mu.Unlock()
			}
		}(w)
	}
	t0 := time.Now()
	close(begin)
	wg.Wait()
	res.wall = time.Since(t0)
	return res
}

// percentile is the nearest-rank q-quantile (0 < q ≤ 1) of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}

// ms is d in milliseconds, for metrics.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// reportLatency reports the p50 and p99 of the successful requests' latencies
// pooled over all runs. With no success there is no latency to report, which
// the log says rather than print a zero that reads as fast.
func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		b.Log("no request succeeded: no latency to report")
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(ms(percentile(lat, 0.50)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 0.99)), "p99-ms")
}

// BenchmarkOutage runs the outage scenario once per iteration for every
// contender. Run it with -benchtime 1x: one scenario is about 6 to 10 s of
// wall time.
//
// An op is one scenario of 600 requests offered at 100 req/s, the provider
// answering 529 for the first 3 s (300 requests offered during it).
// Metrics: outage-attempts/req is attempts that arrived during the outage
// (and got 529) over requests offered during it, 1.0 when nothing is retried
// into the outage; attempts/op are all requests the provider received;
// failed/op are requests whose final outcome was an error or a status other
// than 200; p50-ms and p99-ms are latencies of successful requests from their
// scheduled start. ns/op is the scenario's wall time.
func BenchmarkOutage(b *testing.B) {
	for _, c := range goodputContenders() {
		b.Run("impl="+c.name, func(b *testing.B) { runOutage(b, c.wrap) })
	}
}

// runOutage runs b.N outage scenarios, each against a fresh provider through
// a fresh contender over a fresh base transport.
func runOutage(b *testing.B, wrap func(http.RoundTripper) http.RoundTripper) {
	load := openLoop{interval: outageInterval, n: outageRequests, reqTimeout: outageReqTimeout, runTimeout: outageRunTimeout}
	var offered, outageAttempts, attempts, failed, fused int
	var lat []time.Duration
	reasons := map[string]int{}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		base := cleanhttp.DefaultPooledTransport()
		client := &http.Client{Transport: wrap(base)}
		p := retrytest.NewServer(outageProvider())
		b.StartTimer()
		r := runOpenLoop(client, p.URL+messagesPath, p.Start(), load)
		b.StopTimer()
		base.CloseIdleConnections()
		p.Close()
		st := p.Stats()
		offered += load.offeredBefore(outageLength)
		// Every 529 answers an arrival inside the window: the load that
		// retries add to a provider that is already down.
		outageAttempts += st.Statuses[retryhttp.StatusOverloaded]
		attempts += st.Attempts
		fused += st.Statuses[http.StatusGone]
		failed += r.failed
		lat = append(lat, r.latencies...)
		for k, v := range r.reasons {
			reasons[k] += v
		}
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(float64(outageAttempts)/float64(offered), "outage-attempts/req")
	b.ReportMetric(float64(attempts)/n, "attempts/op")
	b.ReportMetric(float64(failed)/n, "failed/op")
	reportLatency(b, lat)
	if fused > 0 {
		b.Logf("the provider's fuse blew: %d requests answered 410", fused)
	}
	if len(reasons) > 0 {
		b.Logf("failures over %d run(s): %s", b.N, summarize(reasons))
	}
}

// TestOpenLoopSchedule runs a short open-loop load with the bare transport
// against a short outage and checks the harness's bookkeeping: every request
// is sent once, none before its scheduled start (the j-th arrival is at least
// j intervals after the start), the failures are exactly the 529s, the
// successes exactly the 200s, and the requests offered during the outage are
// counted as the schedule says.
func TestOpenLoopSchedule(t *testing.T) {
	const interval = 5 * time.Millisecond
	const outage = 40 * time.Millisecond
	load := openLoop{interval: interval, n: 20, reqTimeout: 10 * time.Second, runTimeout: time.Minute}
	cfg := outageProvider()
	cfg.Overload[0].Until = outage
	p := retrytest.NewServer(cfg)
	defer p.Close()
	tr := cleanhttp.DefaultPooledTransport()
	defer tr.CloseIdleConnections()
	r := runOpenLoop(&http.Client{Transport: tr}, p.URL+messagesPath, p.Start(), load)

	st := p.Stats()
	overloaded, ok := st.Statuses[retryhttp.StatusOverloaded], st.Statuses[http.StatusOK]
	if st.Attempts != load.n || overloaded+ok != load.n {
		t.Fatalf("stats %+v, want %d attempts, each answered 529 or 200", st, load.n)
	}
	if r.failed != overloaded || r.reasons["status 529"] != overloaded || len(r.latencies) != ok {
		t.Fatalf("%d failed (%v) and %d succeeded; the provider sent %d 529s and %d 200s", r.failed, r.reasons, len(r.latencies), overloaded, ok)
	}
	// The provider's window and the harness's count agree on what was
	// offered during the outage: the requests that got 529 are those
	// scheduled before its end (none is retried, and none arrives early).
	if overloaded > load.offeredBefore(outage) {
		t.Errorf("%d 529s, more than the %d requests offered during the outage", overloaded, load.offeredBefore(outage))
	}
	// Arrivals are recorded in order; at time t at most t/interval + 1
	// requests have started.
	for j, d := range st.Arrivals {
		if d < time.Duration(j)*interval {
			t.Errorf("arrival %d at %v, before its slot at %v", j, d, time.Duration(j)*interval)
		}
	}
	if r.wall < time.Duration(load.n-1)*interval {
		t.Errorf("run took %v, less than the schedule's %v", r.wall, time.Duration(load.n-1)*interval)
	}
	if got := load.offeredBefore(outage); got != 8 {
		t.Errorf("offered during a 40 ms outage: %d, want 8", got)
	}
}

// TestOfferedBefore checks the count of requests offered during an outage,
// the denominator of outage-attempts/req: the scenario's 3 s at 10 ms
// intervals is 300 requests (0 ms … 2990 ms).
func TestOfferedBefore(t *testing.T) {
	l := openLoop{interval: 10 * time.Millisecond, n: 600}
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{0, 0},
		{time.Nanosecond, 1},
		{10 * time.Millisecond, 1},
		{10*time.Millisecond + 1, 2},
		{outageLength, 300},
		{time.Hour, 600},
	} {
		if got := l.offeredBefore(tc.d); got != tc.want {
			t.Errorf("offeredBefore(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// TestClosedLoopBookkeeping runs the closed loop with the bare transport
// against a tiny capacity and checks that every request is sent exactly
// once, the failures are exactly the 503s, and the provider never had more
// in service than its capacity.
func TestClosedLoopBookkeeping(t *testing.T) {
	cfg := capacityProvider()
	cfg.Capacity = retrytest.Capacity{Max: 2, Hold: 2 * time.Millisecond}
	p := retrytest.NewServer(cfg)
	defer p.Close()
	tr := cleanhttp.DefaultPooledTransport()
	defer tr.CloseIdleConnections()
	r := runClosedLoop(&http.Client{Transport: tr}, p.URL+messagesPath, 6, 5, 10*time.Second, time.Minute)
	st := p.Stats()
	rejected, served := st.Statuses[http.StatusServiceUnavailable], st.Statuses[http.StatusOK]
	if st.Attempts != 30 || rejected+served != 30 || st.PeakInService > 2 || st.InService != 0 {
		t.Fatalf("stats %+v, want 30 attempts, each answered 503 or 200, peak at most 2, none left in service", st)
	}
	if r.failed != rejected || r.reasons["status 503"] != rejected || len(r.latencies) != served {
		t.Fatalf("%d failed (%v) and %d succeeded; the provider sent %d 503s and served %d", r.failed, r.reasons, len(r.latencies), rejected, served)
	}
}

// TestPercentile checks the nearest-rank quantile used for p50 and p99.
func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 200; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	if got := percentile(d, 0.5); got != 100*time.Millisecond {
		t.Errorf("p50 = %v, want 100ms", got)
	}
	if got := percentile(d, 0.99); got != 198*time.Millisecond {
		t.Errorf("p99 = %v, want 198ms", got)
	}
	if got := percentile(d[:1], 0.99); got != time.Millisecond {
		t.Errorf("p99 of one = %v, want 1ms", got)
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("p50 of none = %v, want 0", got)
	}
}
