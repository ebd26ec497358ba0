// Worlds: providers that do not behave like the fake the other benchmarks
// use. The same burst runs against each, with every client side by side, in
// real time over loopback (BenchmarkWorlds).

package bench

import (
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

// The burst of the worlds benchmark: 80 callers that start together, each
// sending 3 requests back to back, against a bucket of 40 requests/s with a
// burst of 4 (ideal wall time (240 − 4)/40 = 5.9 s), or in github-window a
// fixed window of 40 requests per second ((240 − 40)/40 = 5.0 s); a small
// world sends the small burst instead (see smallRate).
const (
	worldRate       = 40.0
	worldBurst      = 4
	worldWorkers    = 80
	worldPerWorker  = 3
	worldReqTimeout = 60 * time.Second // per request, retries included
	worldRunTimeout = 90 * time.Second // per client and world: past it the run fails
	// worldGrace is how long a run may take past worldRunTimeout to
	// return, its requests' contexts being cancelled, before the benchmark
	// stops waiting for it.
	worldGrace = 10 * time.Second
)

// A world is a provider that differs from the well-behaved fake in one way.
type world struct {
	name string
	cfg  retrytest.Config
	// jitter delays each attempt by 5 to 35 ms of real time, half on the
	// way out and half on the way back (jitteredTransport).
	jitter bool
	// small runs the small burst against a limit of smallRate instead
	// (smallWorkers callers, each sending worldPerWorker requests).
	small bool
}

// The small burst: 20 callers, 3 requests each, against a limit of 5
// requests a second: a quota too small to be told a window by its lumps.
const (
	smallRate    = 5.0
	smallWorkers = 20
)

// rate is the world's limit, in requests a second.
func (w world) rate() float64 {
	if w.small {
		return smallRate
	}
	return worldRate
}

// requests is how many the world's burst sends: workers callers, each
// sending worldPerWorker.
func (w world) requests() int { return w.workers() * worldPerWorker }

func (w world) workers() int {
	if w.small {
		return smallWorkers
	}
	return worldWorkers
}

// worldProvider is the common provider of the worlds: family's headers over
// a token bucket of worldRate and worldBurst on the real clock, 429 with a
// whole-second Retry-After on exhaustion.
func worldProvider(family retrytest.Family) retrytest.Config {
	return retrytest.Config{
		Family:          family,
		RetryAfter:      retrytest.RetryAfterSeconds,
		RateLimit:       retrytest.RateLimit{Rate: worldRate, Burst: worldBurst},
		RequestIDHeader: requestIDHeader,
		MaxAttempts:     benchFuse,
	}
}

// worlds lists the worlds in the order they run: those that break an
// assumption first, then the controls, which hold today.
func worlds() []world {
	with := func(family retrytest.Family, edit func(*retrytest.Config)) retrytest.Config {
		c := worldProvider(family)
		edit(&c)
		return c
	}
	return []world{
		// Anthropic's resets cut down to the second: up to 1 s early.
		{name: "anthropic-floor", cfg: with(retrytest.Anthropic, func(c *retrytest.Config) { c.Rounding = retrytest.RoundDown })},
		// Anthropic's resets rounded to the nearest second: up to 0.5 s early or late.
		{name: "anthropic-nearest", cfg: with(retrytest.Anthropic, func(c *retrytest.Config) { c.Rounding = retrytest.RoundNearest })},
		// The server's clock 3 s ahead of the client's: every reset reads 3 s late.
		{name: "anthropic-ahead3s", cfg: with(retrytest.Anthropic, func(c *retrytest.Config) { c.ClockOffset = 3 * time.Second })},
		// The same behind a proxy whose Date is the client's time: the
		// resets cannot be placed by the Date, and read 3 s late.
		{name: "anthropic-ahead3s-proxy", cfg: with(retrytest.Anthropic, func(c *retrytest.Config) {
			c.ClockOffset = 3 * time.Second
			c.ProxyDate = true
		})},
		// The server's clock 3 s behind: every reset reads 3 s in the past.
		{name: "anthropic-behind3s", cfg: with(retrytest.Anthropic, func(c *retrytest.Config) { c.ClockOffset = -3 * time.Second })},
		// No rate-limit headers at all: 429 and Retry-After only.
		{name: "plain", cfg: worldProvider(retrytest.Plain)},
		// No rate-limit headers, and answers that take 5 to 35 ms, drawn
		// per attempt, as a real network's do (jitteredTransport): no one
		// answer's time tells the next's.
		{name: "plain-jitter", cfg: worldProvider(retrytest.Plain), jitter: true},
		// GitHub's own kind of limit, a fixed window (of one second here,
		// of an hour on GitHub): its x-ratelimit-* headers read as they
		// would over a bucket, 429.
		{name: "github-window", cfg: with(retrytest.GitHub, func(c *retrytest.Config) {
			c.RateLimit.Status = http.StatusTooManyRequests
			c.RateLimit.Window = time.Second
			c.RateLimit.Burst = int(worldRate)
		})},
		// A fixed window of five a second, its reset cut down to the
		// second: too small to be told by its lumps, and its resets
		// early by up to a second.
		{name: "github-window-5", small: true, cfg: with(retrytest.GitHub, func(c *retrytest.Config) {
			c.RateLimit = retrytest.RateLimit{Rate: smallRate, Burst: int(smallRate), Window: time.Second, Status: http.StatusTooManyRequests}
			c.Rounding = retrytest.RoundDown
		})},
		// GitHub's x-ratelimit-* headers, reset in epoch seconds, over a
		// token bucket, 429.
		{name: "github-bucket", cfg: with(retrytest.GitHub, func(c *retrytest.Config) { c.RateLimit.Status = http.StatusTooManyRequests })},
		// The same with GitHub's usual rejection, 403, which only a client
		// that reads x-ratelimit-remaining: 0 takes for a rate limit.
		{name: "github-403", cfg: worldProvider(retrytest.GitHub)},
		// Controls: the worlds the goodput benchmark runs.
		{name: "openai", cfg: worldProvider(retrytest.OpenAI)},
		{name: "anthropic-ceil", cfg: worldProvider(retrytest.Anthropic)},
		{name: "ietf", cfg: worldProvider(retrytest.IETF)},
		// OpenAI's headers over a bucket of one (a unit every 25 ms, its
		// reset stated to the millisecond), answers of 5 to 35 ms: an
		// attempt timed by the last answer's reset comes early when its
		// own answer is the faster.
		{name: "openai-one-jitter", cfg: with(retrytest.OpenAI, func(c *retrytest.Config) { c.RateLimit.Burst = 1 }), jitter: true},
	}
}

// jitteredTransport delays each attempt through base by 5 to 35 ms, drawn
// per attempt from a seeded source: half before it is sent, half after its
// answer came.
type jitteredTransport struct {
	base http.RoundTripper
	mu   sync.Mutex
	rnd  *rand.Rand
}

func newJitteredTransport(base http.RoundTripper, seed int64) *jitteredTransport {
	return &jitteredTransport{base: base, rnd: rand.New(rand.NewSource(seed + 1))}
}

func (j *jitteredTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	j.mu.Lock()
	d := 5*time.Millisecond + time.Duration(j.rnd.Int63n(int64(30*time.Millisecond)))
	j.mu.Unlock()
	time.Sleep(d / 2)
	resp, err := j.base.RoundTrip(req)
	time.Sleep(d - d/2)
	return resp, err
}

// limit is how many requests the world's provider admits at once: the
// bucket's burst, or a whole window's quota.
func (w world) limit() int { return w.cfg.RateLimit.Burst }

// ideal is the burst's least wall time under the world's limit: what passes
// at once, then each further request waiting for its share of worldRate.
// A fixed window lets its whole quota through at once, a bucket its burst.
func (w world) ideal() time.Duration {
	return time.Duration(float64(w.requests()-w.limit()) / w.rate() * float64(time.Second))
}

// rejectStatus is the status the world's provider rejects with.
func (w world) rejectStatus() int {
	if w.cfg.RateLimit.Status != 0 {
		return w.cfg.RateLimit.Status
	}
	if w.cfg.Family == retrytest.GitHub {
		return http.StatusForbidden
	}
	return http.StatusTooManyRequests
}

// worldClients are the clients compared, each with its defaults (resty and
// rehttp with the setup of peers_test.go): goodputContenders without bare,
// retryhttp first.
func worldClients() []goodputContender {
	var out []goodputContender
	var last goodputContender
	for _, c := range goodputContenders() {
		switch c.name {
		case "bare":
		case "retryhttp":
			last = c
		default:
			out = append(out, c)
		}
	}
	return append([]goodputContender{last}, out...)
}

// worldResult is what one client did in one world, summed over b.N runs.
type worldResult struct {
	runs                                  int
	wall                                  time.Duration
	attempts, rejected, sawReject, failed int
	boundHit                              bool
	reasons                               map[string]int
}

// xIdeal is the mean wall time of a run over ideal, the world's.
func (r worldResult) xIdeal(ideal time.Duration) float64 {
	return float64(r.wall) / float64(ideal) / float64(r.runs)
}

// BenchmarkWorlds runs the burst once per iteration against every world
// with every client, one at a time (worlds in turn, and within a world the
// clients in turn, so they never compete for the CPUs), and prints a table
// per world and a summary. Run it with -benchtime 1x: the wall time is the
// measurement, and a full run takes several minutes.
//
// An op is one burst of 240 requests (60 in github-window-5). Metrics: x-ideal
// is wall time over the world's ideal (5.9 s, 5.0 s in github-window, 11 s in
// github-window-5); failed/op are requests whose final outcome was an error or a
// status other than 200; 429/op (403/op in github-403) are the provider's
// rejections; saw429/op are requests that got at least one; attempts/op are
// requests the provider received. A run that passes 90 s fails the
// benchmark (its requests are cancelled then, and count as failed).
func BenchmarkWorlds(b *testing.B) {
	clients := worldClients()
	var all []worldRow
	for _, w := range worlds() {
		b.Run("world="+w.name, func(b *testing.B) {
			var rows []worldRow
			for _, c := range clients {
				var res worldResult
				// b.Run's result is not checked: a client that hit the
				// bound failed the benchmark but still has its row.
				b.Run("impl="+c.name, func(b *testing.B) { res = runWorld(b, w, c.wrap) })
				if res.runs > 0 { // 0: the -bench pattern left the client out
					rows = append(rows, worldRow{w.name, c.name, w.rejectStatus(), w.ideal(), res})
				}
			}
			if len(rows) > 0 {
				fmt.Fprint(os.Stdout, worldTable(w.name, rows))
				all = append(all, rows...)
			}
		})
	}
	if len(all) > 0 {
		fmt.Fprint(os.Stdout, worldSummary(all))
	}
}

// runWorld runs b.N bursts against fresh providers of world w, each through
// a fresh client over a fresh base transport.
func runWorld(b *testing.B, w world, wrap func(http.RoundTripper) http.RoundTripper) worldResult {
	status := w.rejectStatus()
	res := worldResult{reasons: map[string]int{}}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		p := retrytest.NewServer(w.cfg)
		base := cleanhttp.DefaultPooledTransport()
		var under http.RoundTripper = base
		if w.jitter {
			under = newJitteredTransport(base, int64(i))
		}
		client := &http.Client{Transport: wrap(under)}
		url := p.URL + "/v1/messages"
		b.StartTimer()
		start := time.Now() // before the run's own bound starts
		done := make(chan loadResult, 1)
		go func() {
			done <- runClosedLoop(client, url, w.workers(), worldPerWorker, worldReqTimeout, worldRunTimeout)
		}()
		var r loadResult
		select {
		case r = <-done:
		case <-time.After(worldRunTimeout + worldGrace):
			// The client ignores its requests' contexts: leave its
			// goroutines (and the provider they may still be talking to)
			// behind rather than hang the benchmark.
			base.CloseIdleConnections()
			b.Fatalf("world %s: the run did not return within %v of its %v bound", w.name, worldGrace, worldRunTimeout)
		}
		elapsed := time.Since(start)
		b.StopTimer()
		base.CloseIdleConnections()
		p.Close()
		st := p.Stats()
		res.runs++
		res.wall += r.wall
		res.attempts += st.Attempts
		res.rejected += st.Statuses[status]
		res.sawReject += requestsThatSaw(st, status)
		res.failed += r.failed
		for k, v := range r.reasons {
			res.reasons[k] += v
		}
		if elapsed >= worldRunTimeout {
			res.boundHit = true
		}
		if st.Statuses[http.StatusGone] > 0 {
			b.Logf("the provider's fuse blew: %d requests answered 410", st.Statuses[http.StatusGone])
		}
		b.StartTimer()
	}
	n := float64(res.runs)
	b.ReportMetric(res.xIdeal(w.ideal()), "x-ideal")
	b.ReportMetric(float64(res.failed)/n, "failed/op")
	b.ReportMetric(float64(res.rejected)/n, fmt.Sprintf("%d/op", status))
	b.ReportMetric(float64(res.sawReject)/n, fmt.Sprintf("saw%d/op", status))
	b.ReportMetric(float64(res.attempts)/n, "attempts/op")
	if len(res.reasons) > 0 {
		b.Logf("failures over %d run(s): %s", res.runs, summarize(res.reasons))
	}
	if res.boundHit {
		b.Errorf("world %s: a run passed the %v bound; its unfinished requests were cancelled and count as failed", w.name, worldRunTimeout)
	}
	return res
}

// worldRow is one client's result in one world, for the tables.
type worldRow struct {
	world, impl string
	status      int           // the world's rejection status
	ideal       time.Duration // the world's ideal wall time
	res         worldResult
}

// worldTable is the markdown table of one world: a row per client.
func worldTable(name string, rows []worldRow) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nworld %s (ideal %.1f s)\n\n", name, rows[0].ideal.Seconds())
	fmt.Fprintf(&sb, "| impl | wall | x ideal | failed | %[1]ds | requests that saw a %[1]d | attempts |\n", rows[0].status)
	sb.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		n := r.res.runs
		bound := ""
		if r.res.boundHit {
			bound = " (bound hit)"
		}
		fmt.Fprintf(&sb, "| %s | %.2f s%s | %.3f | %d | %d | %d | %d |\n",
			r.impl, (r.res.wall / time.Duration(n)).Seconds(), bound, r.res.xIdeal(r.ideal),
			r.res.failed/n, r.res.rejected/n, r.res.sawReject/n, r.res.attempts/n)
	}
	return sb.String()
}

// worldSummary is the markdown table of all worlds that ran: a row per
// world, a column per client, each cell "x ideal / failed / rejections".
func worldSummary(rows []worldRow) string {
	var worldNames, impls []string
	cell := map[[2]string]worldRow{}
	for _, r := range rows {
		if !contains(worldNames, r.world) {
			worldNames = append(worldNames, r.world)
		}
		if !contains(impls, r.impl) {
			impls = append(impls, r.impl)
		}
		cell[[2]string{r.world, r.impl}] = r
	}
	var sb strings.Builder
	sb.WriteString("\nall worlds: x ideal / failed / 429s (403s in github-403), per burst (240 requests; 60 in github-window-5)\n\n| world |")
	for _, i := range impls {
		fmt.Fprintf(&sb, " %s |", i)
	}
	sb.WriteString("\n|---|")
	sb.WriteString(strings.Repeat("---:|", len(impls)))
	sb.WriteString("\n")
	for _, w := range worldNames {
		fmt.Fprintf(&sb, "| %s |", w)
		for _, i := range impls {
			r, ok := cell[[2]string{w, i}]
			if !ok {
				sb.WriteString(" – |")
				continue
			}
			n := r.res.runs
			fmt.Fprintf(&sb, " %.2f / %d / %d |", r.res.xIdeal(r.ideal), r.res.failed/n, r.res.rejected/n)
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestWorlds checks the worlds themselves, quickly: each provider's Config
// is valid, the names are unique, each world's ideal wall time is the one
// its limit allows (a window's whole quota at once, a bucket's burst), and
// the clients are the five compared, retryhttp first.
func TestWorlds(t *testing.T) {
	seen := map[string]bool{}
	for _, w := range worlds() {
		if err := w.cfg.Validate(); err != nil {
			t.Errorf("world %s: %v", w.name, err)
		}
		if seen[w.name] {
			t.Errorf("world %s listed twice", w.name)
		}
		seen[w.name] = true
		want := 5900 * time.Millisecond // (240 − 4)/40
		switch w.name {
		case "github-window":
			want = 5 * time.Second // (240 − 40)/40
		case "openai-one-jitter":
			want = 5975 * time.Millisecond // (240 − 1)/40
		case "github-window-5":
			want = 11 * time.Second // (60 − 5)/5
		}
		if got := w.ideal(); got != want {
			t.Errorf("world %s: ideal %v, want %v", w.name, got, want)
		}
	}
	if !seen["github-window"] {
		t.Error("no github-window world")
	}
	var names []string
	for _, c := range worldClients() {
		names = append(names, c.name)
	}
	if got, want := strings.Join(names, ","), "retryhttp,retryablehttp,failsafe,resty,rehttp"; got != want {
		t.Errorf("clients %s, want %s", got, want)
	}
}

// TestWorldHeaders checks that each world's provider says what its name
// claims, on a clock frozen at 03:04:05.300 (the provider's start): the
// first answer's rate-limit headers and Date (for a bucket of 4 that one
// request has left at 3 and that is full again 25 ms later; for
// github-window, a window of 40 that one request has left at 39 and that
// ends 1 s later, at 03:04:06.300); then the request past the limit is
// rejected with the world's status. Then it moves the clock: 900 ms later
// a bucket has refilled and admits a request, a window has not; 1 s after
// the start a new window admits one too.
func TestWorldHeaders(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 300*int(time.Millisecond), time.UTC)
	const anthReset = "Anthropic-Ratelimit-Requests-Reset"
	want := map[string]map[string]string{ // header → value; "" means absent
		"anthropic-floor":         {anthReset: "2026-01-02T03:04:05Z", "Date": "Fri, 02 Jan 2026 03:04:05 GMT"},
		"anthropic-nearest":       {anthReset: "2026-01-02T03:04:05Z"},
		"anthropic-ahead3s":       {anthReset: "2026-01-02T03:04:09Z", "Date": "Fri, 02 Jan 2026 03:04:08 GMT"},
		"anthropic-ahead3s-proxy": {anthReset: "2026-01-02T03:04:09Z", "Date": "Fri, 02 Jan 2026 03:04:05 GMT"},
		"anthropic-behind3s":      {anthReset: "2026-01-02T03:04:03Z", "Date": "Fri, 02 Jan 2026 03:04:02 GMT"},
		"plain":                   {anthReset: "", "X-Ratelimit-Remaining": "", "X-Ratelimit-Remaining-Requests": "", "Ratelimit": ""},
		"plain-jitter":            {anthReset: "", "X-Ratelimit-Remaining": "", "X-Ratelimit-Remaining-Requests": "", "Ratelimit": ""},
		"github-window":           {"X-Ratelimit-Limit": "40", "X-Ratelimit-Remaining": "39", "X-Ratelimit-Reset": strconv.FormatInt(start.Unix()+2, 10)},
		"github-window-5":         {"X-Ratelimit-Limit": "5", "X-Ratelimit-Remaining": "4", "X-Ratelimit-Reset": strconv.FormatInt(start.Unix()+1, 10)},
		"github-bucket":           {"X-Ratelimit-Limit": "4", "X-Ratelimit-Remaining": "3", "X-Ratelimit-Reset": strconv.FormatInt(start.Unix()+1, 10)},
		"github-403":              {"X-Ratelimit-Remaining": "3", "X-Ratelimit-Reset": strconv.FormatInt(start.Unix()+1, 10)},
		"openai":                  {"X-Ratelimit-Remaining-Requests": "3", "X-Ratelimit-Reset-Requests": "25ms"},
		"anthropic-ceil":          {anthReset: "2026-01-02T03:04:06Z", "Anthropic-Ratelimit-Requests-Remaining": "3"},
		"ietf":                    {"Ratelimit": `"default";r=3;t=1`, "Ratelimit-Policy": `"default";q=40;w=1`},
		"openai-one-jitter":       {"X-Ratelimit-Limit-Requests": "1", "X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "25ms"},
	}
	limits := map[string]int{"github-window": 40, "github-window-5": 5, "openai-one-jitter": 1} // requests admitted at once; worldBurst otherwise
	tr := cleanhttp.DefaultPooledTransport()
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for _, w := range worlds() {
		t.Run(w.name, func(t *testing.T) {
			headers, ok := want[w.name]
			if !ok {
				t.Fatalf("no expected headers for world %s", w.name)
			}
			limit, ok := limits[w.name]
			if !ok {
				limit = worldBurst
			}
			var mu sync.Mutex
			now := start
			cfg := w.cfg
			cfg.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			setNow := func(t time.Time) { mu.Lock(); now = t; mu.Unlock() }
			p := retrytest.NewServer(cfg)
			defer p.Close()
			send := func() (int, http.Header) {
				resp, err := client.Post(p.URL+"/v1/messages", "application/json", strings.NewReader(`{}`))
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode, resp.Header
			}
			var statuses, wantStatuses []int
			var first http.Header
			for i := 0; i < limit+1; i++ {
				st, h := send()
				statuses = append(statuses, st)
				if i == 0 {
					first = h
				}
				wantStatuses = append(wantStatuses, http.StatusOK)
			}
			wantStatuses[limit] = w.rejectStatus()
			for k, v := range headers {
				if got := first.Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
			if got, want := fmt.Sprint(statuses), fmt.Sprint(wantStatuses); got != want {
				t.Errorf("statuses %s, want %s", got, want)
			}
			// 900 ms on: a bucket is full again, a window still shut.
			setNow(start.Add(900 * time.Millisecond))
			wantLater := http.StatusOK
			if w.cfg.RateLimit.Window > 0 {
				wantLater = w.rejectStatus()
			}
			if st, _ := send(); st != wantLater {
				t.Errorf("900 ms later: %d, want %d", st, wantLater)
			}
			// 1 s on: a new window, or a bucket full again.
			setNow(start.Add(time.Second))
			st, h := send()
			if st != http.StatusOK {
				t.Errorf("1 s later: %d, want 200", st)
			}
			if w.cfg.Family == retrytest.GitHub {
				if got, want := h.Get("X-Ratelimit-Remaining"), strconv.Itoa(limit-1); got != want {
					t.Errorf("1 s later: X-Ratelimit-Remaining %q, want %q", got, want)
				}
			}
		})
	}
}
