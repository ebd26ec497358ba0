// Capacity (issue 4, issue 12): providers that serve a fixed number of
// requests at once, each for a fixed time, and answer 503 at once, with no
// Retry-After and no rate-limit headers, to a request that finds every slot
// taken; closed-loop callers, every contender side by side in the same run,
// and a reference client capped at exactly the capacity.

package bench

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

// A capacityWorld is a provider of slots, each request held hold, and a
// closed-loop load: callers sending each requests one after another.
type capacityWorld struct {
	name          string
	slots         int
	hold          time.Duration
	callers, each int
	changes       []retrytest.CapacityChange // capacity changes mid-run
}

// capacityWorlds: the scenario of issue 4 (150 callers, three per slot of a
// provider of 50 x 20 ms), then fewer slots, slower service, fewer callers
// than slots (the callers are the bound, nothing should be refused), and a
// capacity that halves mid-run. Each run is a second or so at the
// capacity; about 3 s for the slower service.
var capacityWorlds = []capacityWorld{
	{name: "50x20ms-150c", slots: 50, hold: 20 * time.Millisecond, callers: 150, each: 10},
	{name: "10x20ms-50c", slots: 10, hold: 20 * time.Millisecond, callers: 50, each: 10},
	{name: "50x100ms-150c", slots: 50, hold: 100 * time.Millisecond, callers: 150, each: 8},
	{name: "50x20ms-30c", slots: 50, hold: 20 * time.Millisecond, callers: 30, each: 20},
	{name: "50to25x20ms-150c", slots: 50, hold: 20 * time.Millisecond, callers: 150, each: 10,
		changes: []retrytest.CapacityChange{{At: 300 * time.Millisecond, Max: 25}}},
}

const (
	capacityReqTimeout = 30 * time.Second // per request, retries included
	capacityRunTimeout = 5 * time.Minute  // the whole scenario
)

func (w capacityWorld) requests() int { return w.callers * w.each }

// ideal is the least time the capacity allows for the whole load: at most
// min(slots, callers) requests in service, each for hold, slots changing
// as the world says. Its inverse times requests() is the physical limit.
func (w capacityWorld) ideal() time.Duration {
	left := float64(w.requests())
	at, slots := time.Duration(0), w.slots
	for i := 0; ; i++ {
		rate := float64(min(slots, w.callers)) / w.hold.Seconds()
		end := time.Duration(1<<62 - 1)
		if i < len(w.changes) {
			end = w.changes[i].At
		}
		if span := (end - at).Seconds(); left <= rate*span {
			return at + time.Duration(left/rate*float64(time.Second))
		} else {
			left -= rate * span
		}
		at, slots = end, w.changes[i].Max
	}
}

// lowest is the fewest slots the provider has during the run.
func (w capacityWorld) lowest() int {
	n := w.slots
	for _, c := range w.changes {
		n = min(n, c.Max)
	}
	return n
}

// provider is the world's retrytest provider, on the real clock, with
// Anthropic's bodies and request ids and the fuse.
func (w capacityWorld) provider() retrytest.Config {
	return retrytest.Config{
		Family:      retrytest.Anthropic,
		Capacity:    retrytest.Capacity{Max: w.slots, Hold: w.hold, Changes: w.changes},
		MaxAttempts: benchFuse,
	}
}

// capacityProvider is the provider of issue 4's scenario.
func capacityProvider() retrytest.Config { return capacityWorlds[0].provider() }

// capped is the reference: the bare transport with exactly slots attempts
// in flight at once, given back when the body is closed, as a client that
// knew the capacity would send. It retries nothing (it is never refused
// unless the capacity drops under it).
func capped(slots int) func(http.RoundTripper) http.RoundTripper {
	return func(base http.RoundTripper) http.RoundTripper {
		sem := make(chan struct{}, slots)
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			select {
			case sem <- struct{}{}:
			case <-r.Context().Done():
				return nil, r.Context().Err()
			}
			resp, err := base.RoundTrip(r)
			if err != nil {
				<-sem
				return nil, err
			}
			resp.Body = &releasingBody{ReadCloser: resp.Body, release: func() { <-sem }}
			return resp, nil
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// releasingBody runs release once, when it is closed.
type releasingBody struct {
	io.ReadCloser
	release func()
	done    bool
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	if !b.done {
		b.done = true
		b.release()
	}
	return err
}

// BenchmarkCapacity runs every capacity world once per iteration for every
// contender, and for the reference client capped at the world's capacity
// ("capped"; at its lowest, where it changes). Run it with -benchtime 1x.
//
// An op is one scenario. Metrics: of-limit is goodput over the physical
// limit (requests the capacity could serve per second, on average over the
// run: requests over ideal wall time); goodput-req/s is successful
// requests per second of wall time; refused-share is the 503s over all
// attempts the provider received; attempts/req the amplification;
// failed/op requests whose final outcome was not a 200; p50-ms and p99-ms
// latencies of successful requests (from the moment the caller sends).
// ns/op is the scenario's wall time.
func BenchmarkCapacity(b *testing.B) {
	for _, w := range capacityWorlds {
		b.Run("world="+w.name, func(b *testing.B) {
			contenders := append([]goodputContender{{"capped", capped(w.lowest())}}, goodputContenders()...)
			for _, c := range contenders {
				b.Run("impl="+c.name, func(b *testing.B) { runCapacity(b, w, c.wrap) })
			}
		})
	}
}

// runCapacity runs b.N scenarios of world w, each against a fresh provider
// through a fresh contender over a fresh base transport.
func runCapacity(b *testing.B, w capacityWorld, wrap func(http.RoundTripper) http.RoundTripper) {
	var wall time.Duration
	var attempts, rejected, succeeded, failed, fused, peak int
	var lat []time.Duration
	reasons := map[string]int{}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		base := cleanhttp.DefaultPooledTransport()
		client := &http.Client{Transport: wrap(base)}
		p := retrytest.NewServer(w.provider())
		b.StartTimer()
		r := runClosedLoop(client, p.URL+messagesPath, w.callers, w.each, capacityReqTimeout, capacityRunTimeout)
		b.StopTimer()
		base.CloseIdleConnections()
		p.Close()
		st := p.Stats()
		wall += r.wall
		attempts += st.Attempts
		rejected += st.Statuses[http.StatusServiceUnavailable]
		fused += st.Statuses[http.StatusGone]
		peak = max(peak, st.PeakInService)
		failed += r.failed
		succeeded += len(r.latencies)
		lat = append(lat, r.latencies...)
		for k, v := range r.reasons {
			reasons[k] += v
		}
		b.StartTimer()
	}
	n := float64(b.N)
	limit := float64(w.requests()) / w.ideal().Seconds() // requests a second, on average
	goodput := float64(succeeded) / wall.Seconds()
	b.ReportMetric(goodput/limit, "of-limit")
	b.ReportMetric(goodput, "goodput-req/s")
	b.ReportMetric(float64(rejected)/float64(max(attempts, 1)), "refused-share")
	b.ReportMetric(float64(attempts)/(n*float64(w.requests())), "attempts/req")
	b.ReportMetric(float64(failed)/n, "failed/op")
	reportLatency(b, lat)
	b.Logf("peak requests in service: %d of %d; physical limit %.0f req/s", peak, w.slots, limit)
	if fused > 0 {
		b.Logf("the provider's fuse blew: %d requests answered 410", fused)
	}
	if len(reasons) > 0 {
		b.Logf("failures over %d run(s): %s", b.N, summarize(reasons))
	}
}

// TestCapacityWorldIdeal checks the physical limit the metric divides by.
func TestCapacityWorldIdeal(t *testing.T) {
	for _, tc := range []struct {
		w    capacityWorld
		want time.Duration
	}{
		{capacityWorlds[0], 600 * time.Millisecond},  // 1500 at 2500/s
		{capacityWorlds[1], time.Second},             // 500 at 500/s
		{capacityWorlds[2], 2400 * time.Millisecond}, // 1200 at 500/s
		{capacityWorlds[3], 400 * time.Millisecond},  // 600 at 1500/s: the 30 callers are the bound
		{capacityWorlds[4], 900 * time.Millisecond},  // 750 at 2500/s for 0.3 s, 750 at 1250/s
	} {
		if got := tc.w.ideal(); got != tc.want {
			t.Errorf("%s: ideal %v, want %v", tc.w.name, got, tc.want)
		}
	}
}

// TestCapped checks the reference client: never more than its cap in
// service, nothing refused, every request served.
func TestCapped(t *testing.T) {
	w := capacityWorld{slots: 3, hold: 2 * time.Millisecond, callers: 9, each: 4}
	p := retrytest.NewServer(w.provider())
	defer p.Close()
	base := cleanhttp.DefaultPooledTransport()
	defer base.CloseIdleConnections()
	r := runClosedLoop(&http.Client{Transport: capped(3)(base)}, p.URL+messagesPath, w.callers, w.each, 10*time.Second, time.Minute)
	st := p.Stats()
	if r.failed != 0 || st.Statuses[http.StatusServiceUnavailable] != 0 || st.PeakInService > 3 || len(r.latencies) != w.requests() {
		t.Fatalf("%d failed, %d refused, peak %d, %d served; want 0, 0, at most 3, %d", r.failed, st.Statuses[http.StatusServiceUnavailable], st.PeakInService, len(r.latencies), w.requests())
	}
}

// BenchmarkCapacityRamp shows where a cold start's time goes in the main
// capacity world (50 slots of 20 ms, 150 callers of 10): it runs the
// scenario through retryhttp, samples the provider's requests in service
// every 5 ms, and reports when the capacity was first full (full-ms) and
// how full it was, on average, from then to the end (after-full), next to
// the run's of-limit; the log shows the first 200 ms. Run it with
// -benchtime 1x.
func BenchmarkCapacityRamp(b *testing.B) {
	w := capacityWorlds[0]
	for i := 0; i < b.N; i++ {
		base := cleanhttp.DefaultPooledTransport()
		client := &http.Client{Transport: retryhttp.New(base)}
		p := retrytest.NewServer(w.provider())
		stop, sampled := make(chan struct{}), make(chan []int)
		go func() {
			var in []int
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					sampled <- in
					return
				case <-tick.C:
					in = append(in, p.Stats().InService)
				}
			}
		}()
		r := runClosedLoop(client, p.URL+messagesPath, w.callers, w.each, capacityReqTimeout, capacityRunTimeout)
		close(stop)
		in := <-sampled
		base.CloseIdleConnections()
		p.Close()
		full, sum := -1, 0
		for k, n := range in {
			if full < 0 && n >= w.slots {
				full = k
			}
			if full >= 0 {
				sum += n
			}
		}
		if full < 0 {
			b.Fatalf("the capacity was never full: %v", in)
		}
		b.ReportMetric(float64((full+1)*5), "full-ms")
		b.ReportMetric(float64(sum)/float64(len(in)-full)/float64(w.slots), "after-full")
		b.ReportMetric(w.ideal().Seconds()/r.wall.Seconds(), "of-limit") // every request served (else failed/op)
		b.ReportMetric(float64(r.failed), "failed/op")
		b.Logf("in service every 5 ms, the first 200 ms: %v", in[:min(40, len(in))])
	}
}
