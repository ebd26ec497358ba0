//go:debug asynctimerchan=0
//go:build go1.25

// The robustness matrix: the whole transport, in simulated time
// (testing/synctest), against retrytest providers that behave as real
// servers do rather than as our fake's defaults. The go:debug line gives
// this test binary the timer semantics synctest needs (the default from Go
// 1.23 on; go.mod says 1.22 for users of older toolchains).

package retryhttp

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryhttp/retryhttp/retrytest"
)

// workload is a burst of callers against a token bucket.
type workload struct {
	name          string
	rate          float64 // the bucket's refill, per second
	burst         int
	callers, each int // each caller sends each requests back to back
}

func (w workload) requests() int { return w.callers * w.each }

// ideal is the least time the bucket allows for the whole burst.
func (w workload) ideal() time.Duration {
	return time.Duration(float64(w.requests()-w.burst) / w.rate * float64(time.Second))
}

var workloads = []workload{
	{name: "40rps-b4-80c", rate: 40, burst: 4, callers: 80, each: 3},
	{name: "100rps-b10-50c", rate: 100, burst: 10, callers: 50, each: 10},
	{name: "5rps-b1-20c", rate: 5, burst: 1, callers: 20, each: 3},
}

// world is one server behaviour.
type world struct {
	family     string // openai, anthropic, ietf, github (fixed window), github-bucket, none
	rounding   retrytest.Rounding
	offset     time.Duration
	retryAfter retrytest.RetryAfterStyle
	load       workload
	// phase is where in the second the provider starts, so where a
	// fixed window's ends fall (the github family only).
	phase time.Duration
	// rtt is the time the provider takes to answer; zero means simRTT.
	rtt time.Duration
	// think is how long a caller takes over an answer before it sends
	// its next request.
	think time.Duration
	// proxyDate has the answers carry the client's own time as their
	// Date (a proxy's, in front of a server whose clock is offset), so
	// the offset of the times in the headers cannot be read from it
	// (retrytest.Config.ProxyDate).
	proxyDate bool
	// jitter has each answer take between a quarter of the round trip and
	// 1.75 times it, drawn per attempt (from a source seeded alike in
	// every run), as a real network's do: answers come back out of order,
	// and no one answer's time tells when the server counted it.
	jitter bool
}

// roundTrip is the time the world's provider takes to answer.
func (w world) roundTrip() time.Duration {
	if w.rtt > 0 {
		return w.rtt
	}
	return simRTT
}

func (w world) String() string {
	name := fmt.Sprintf("%s/%s/%+v/ra-%s/%s", w.family, w.rounding, w.offset, w.retryAfter, w.load.name)
	if w.phase > 0 {
		name += fmt.Sprintf("/phase-%v", w.phase)
	}
	if w.rtt > 0 && w.rtt != simRTT {
		name += fmt.Sprintf("/rtt-%v", w.rtt)
	}
	if w.think > 0 {
		name += fmt.Sprintf("/think-%v", w.think)
	}
	if w.proxyDate {
		name += "/proxy-date"
	}
	if w.jitter {
		name += "/jitter"
	}
	return name
}

// config is the retrytest provider of the world.
func (w world) config() retrytest.Config {
	cfg := retrytest.Config{
		RetryAfter:      w.retryAfter,
		Rounding:        w.rounding,
		ClockOffset:     w.offset,
		ProxyDate:       w.proxyDate,
		RequestIDHeader: "X-Sim-Request",
		RateLimit:       retrytest.RateLimit{Rate: w.load.rate, Burst: w.load.burst},
	}
	switch w.family {
	case "openai":
		cfg.Family = retrytest.OpenAI
	case "anthropic":
		cfg.Family = retrytest.Anthropic
	case "ietf":
		cfg.Family = retrytest.IETF
	case "github":
		cfg.Family = retrytest.GitHub
		cfg.RateLimit.Status = http.StatusTooManyRequests
		cfg.RateLimit.Window = time.Second
		cfg.RateLimit.Burst = int(w.load.rate)
	case "github-bucket":
		cfg.Family = retrytest.GitHub
		cfg.RateLimit.Status = http.StatusTooManyRequests
	case "none":
		cfg.Family = retrytest.Plain
	}
	return cfg
}

// ideal is the least time the world's limit allows for the whole burst:
// a fixed window lets a whole window's quota through at once.
func (w world) ideal() time.Duration {
	if w.family == "github" {
		w.load.burst = int(w.load.rate)
	}
	return w.load.ideal()
}

// worldOutcome is what one run of a world saw.
type worldOutcome struct {
	wall     time.Duration
	failed   int      // requests that did not end in a 200
	saw429   int      // requests that saw at least one 429
	attempts int      // arrivals at the provider
	errs     []string // the first few failures, for the report
}

// simRTT is the time the provider takes to answer, in simulated time.
const simRTT = 2 * time.Millisecond

// simDeadline is each request's context deadline.
const simDeadline = time.Minute

// runWorld sends the world's burst through the RoundTripper newRT builds
// over the provider, in simulated time.
func runWorld(t *testing.T, w world, newRT func(base http.RoundTripper) http.RoundTripper) worldOutcome {
	t.Helper()
	var out worldOutcome
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(w.phase) // the provider's windows start here
		srv := retrytest.NewTransport(w.config())
		var mu sync.Mutex
		rng := rand.New(rand.NewSource(1))
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			d := w.roundTrip()
			if w.jitter {
				mu.Lock()
				d = time.Duration(float64(d) * (0.25 + 1.5*rng.Float64()))
				mu.Unlock()
			}
			time.Sleep(d)
			return srv.RoundTrip(r)
		})
		client := &http.Client{Transport: newRT(base)}
		start := time.Now()
		out.failed, out.errs = sendBurst(client, w.load.callers, w.load.each, w.think)
		out.wall = time.Since(start)
		client.CloseIdleConnections()
		st := srv.Stats()
		out.attempts = st.Attempts
		for _, rs := range st.Requests {
			for _, s := range rs.Statuses {
				if s == http.StatusTooManyRequests {
					out.saw429++
					break
				}
			}
		}
	})
	return out
}

// sendBurst has callers goroutines send each requests through client, a
// caller's next think after its answer, and waits for them all; it returns
// how many failed and the first few failures.
func sendBurst(client *http.Client, callers, each int, think time.Duration) (failed int, errs []string) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if i > 0 && think > 0 {
					time.Sleep(think)
				}
				if err := sendSim(client, fmt.Sprintf("%d-%d", c, i)); err != nil {
					mu.Lock()
					failed++
					if len(errs) < 3 {
						errs = append(errs, err.Error())
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return failed, errs
}

func sendSim(client *http.Client, id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), simDeadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.sim/v1", nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Sim-Request", id)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// plainLoop is retrysim's "exponential" policy: the loop people write by
// hand, up to 5 retries 1s, 2s, 4s... apart, no jitter, Retry-After
// ignored. Never worse than this is the floor every cell must clear.
func plainLoop(base http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		wait := time.Second
		for k := 0; ; k++ {
			resp, err := base.RoundTrip(req)
			transient := err != nil || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
			if k == 5 || !transient {
				return resp, err
			}
			if resp != nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			select {
			case <-time.After(wait):
			case <-req.Context().Done():
				return nil, req.Context().Err()
			}
			wait *= 2
		}
	})
}

// rtts are the round trips the matrix runs every world at: simRTT (the
// worlds' names without a suffix) and a real API's 20 ms or more
// ("/rtt-20ms").
var rtts = []time.Duration{0, 20 * time.Millisecond}

// thinkTime is how long callers take over an answer in the matrix's
// thinking worlds: they send their next request a little after the
// answers that came back with theirs, not with them.
const thinkTime = 3 * time.Millisecond

// matrix lists the worlds, each at every round trip of rtts. Rounding and
// the clock offset matter where a header carries an absolute time: the
// Anthropic and GitHub families, and Retry-After as a date; elsewhere one
// of each stands for all. The worlds whose resets are rounded up and whose
// clock is the client's come again with callers that think (thinkTime):
// requests sent just after the answers that let them go, not at once,
// found a ramp step let go before the 429s sent with the step before it
// were read (TestLongRoundTripRampWaitsForEveryAnswerOfAStep).
func matrix() []world {
	var ws []world
	for _, rtt := range rtts {
		for _, w := range worlds() {
			w.rtt = rtt
			ws = append(ws, w)
			if w.rounding != retrytest.RoundUp || w.phase != 0 {
				continue
			}
			if v := w; w.offset == 0 {
				v.think = thinkTime
				ws = append(ws, v)
			}
			if v := w; w.offset > 0 {
				// A server clock ahead, behind a proxy whose Date
				// is ours.
				v.proxyDate = true
				ws = append(ws, v)
			}
			if v := w; w.offset == 0 && rtt > 0 {
				// Answers of 5 to 35 ms.
				v.jitter = true
				ws = append(ws, v)
			}
		}
	}
	return ws
}

// worlds lists the worlds of the matrix at simRTT.
func worlds() []world {
	var ws []world
	families := []string{"openai", "anthropic", "ietf", "github", "github-bucket", "none"}
	roundings := []retrytest.Rounding{retrytest.RoundDown, retrytest.RoundNearest, retrytest.RoundUp}
	offsets := []time.Duration{-5 * time.Second, -time.Second, 0, time.Second, 5 * time.Second}
	for _, load := range workloads {
		for _, f := range families {
			styles := []retrytest.RetryAfterStyle{retrytest.RetryAfterSeconds, retrytest.RetryAfterDate}
			if f == "none" || f == "openai" {
				styles = append(styles, retrytest.RetryAfterMillis)
			}
			if f == "none" {
				styles = append(styles, retrytest.RetryAfterNone)
			}
			for _, ra := range styles {
				absolute := ra == retrytest.RetryAfterDate || strings.HasPrefix(f, "anthropic") || strings.HasPrefix(f, "github")
				for _, r := range roundings {
					for _, off := range offsets {
						if !absolute && (r != retrytest.RoundUp || off != 0) {
							continue
						}
						ws = append(ws, world{family: f, rounding: r, offset: off, retryAfter: ra, load: load})
						if f == "github" && off == 0 {
							// Windows that end within the second,
							// their resets rounded to whole ones.
							for _, ph := range phases {
								ws = append(ws, world{family: f, rounding: r, retryAfter: ra, load: load, phase: ph})
							}
						}
					}
				}
			}
		}
	}
	return ws
}

// phases are the starts within the second of the github family's extra
// cells: a fixed window's ends fall there, its resets on whole seconds.
var phases = []time.Duration{219 * time.Millisecond, 500 * time.Millisecond, 781 * time.Millisecond}

// tolerance is how far from the ideal time a world's cell may finish: tight
// where the headers state the rate finely, looser where resets come in whole
// seconds or nothing but 429s speaks.
func tolerance(w world) float64 {
	switch w.family {
	case "openai", "ietf":
		return 1.2
	case "none":
		return 1.3
	}
	// Whole-second resets: 1.5x, with or without -race. Under -race,
	// goroutine orders used to put an Anthropic or GitHub-style bucket
	// cell at 1.25-1.54x now and then (9 of 240 runs of the 40 req/s
	// ones with 2 ms answers): a coarse bucket's shortfall, short by float
	// noise (under a nanosecond) at the instant its waiters were told to
	// wake, was truncated to no wait, so every request woken then went
	// uncounted, one drew a 429 and waited out its whole-second
	// Retry-After. Rounded up now (TestShortfallUnderANanosecondStillWaits),
	// those cells read 1.01-1.29x in three runs without -race and two
	// with it (the 1.29x are the buckets of one, in every run).
	return 1.5
}

// most429 is how many of the world's requests may see a 429: 5%, with or
// without -race. The most seen in three runs of the matrix with -race:
// header-less cells 8 of 240, 22 of 500 (the 20 ms cells sit at 14-19
// without -race too) and 6 of 60 (a listed gap, see gap). A header-less
// bucket of 4 once saw 15-19 of 240 in 5 of 150 runs with -race: a ramp
// step let go before the 429s sent with the step before it were read
// (TestLongRoundTripRampWaitsForEveryAnswerOfAStep).
func most429(w world) int {
	return w.load.requests() / 20
}

// gap names the cells that do not meet the targets yet, with why; "" for a
// cell that must. A gap cell that meets every target says so in the log,
// so the list can shrink. What a gap cell must still do is in the test.
func gap(w world) string {
	switch {
	case w.jitter && w.family == "none":
		return "answers of 5 to 35 ms with no rate-limit headers: a bucket of one runs 1.26-1.33x with 4 to 6 of 60 " +
			"seeing a 429 (the observed pace is cut by the 429s the varying answers bring), and a bucket of 4 whose 429s " +
			"name milliseconds now and then 1.39x. Larger buckets meet the targets (1.04-1.23x, up to 20 of 500 seeing a " +
			"429; before the adaptive limit told the answers' spread from a rise, it cut them to 2 in flight: 1.6x). With " +
			"headers every jittered cell meets them: OpenAI's bucket of one, 1.25x before its pace's ceiling lifted after a " +
			"429 and its waiters woke when the pace quickened, is 1.14x"
	case w.proxyDate:
		return "resets or Retry-After dates on a server clock 1 or 5 s ahead of the Date (a proxy's): the Date cannot place " +
			"them, and a bucket read full long before the reset a reading before it stated runs late resets, which then bound " +
			"no rate (pacer.lateResets); the pace doubles from its first, too slow guess at each full reading. 1.3-2.5x the " +
			"ideal for a bucket (before: a bucket of 4 at 40 a second 5 s ahead 30x with 3 of 4 requests failed, 1 s ahead " +
			"now and then 27x), and a Retry-After date 5 s ahead holds each 429 for 6 s: 1.7-2.7x with no rate-limit headers"
	}
	return ""
}

// TestRobustnessMatrix runs every world of the matrix against the defaults
// and against the plain loop. Each cell is held to the targets: every
// request completes, at most 5% see a 429, the wall time is within the
// world's tolerance of the ideal and never worse than the plain loop's.
// Cells listed by gap are held to less (see there); the log says when one
// of them meets the targets (retry jitter makes borderline cells vary).
//
// On the code before the pacer was reworked, every Anthropic cell with the
// reset cut down or a skewed server clock failed (the coarse reading was
// dropped and the shortfall never cleared: up to 60 s stalls), and so did
// every "none" cell (8-30x the ideal).
//
// A GitHub window of 40 or 100 a second, told by its lumps, meets every
// target. Before a request that found the window used up while attempts
// were out was woken by their answers, 11 of about 14,500 runs of those
// cells, most under -race, left a unit of the last window unused and ended
// a window late, behind the plain loop (see
// TestAWindowFoundUsedUpWhileAttemptsAreOutIsCheckedAgainAtTheirAnswers).
// One of five a second, paced as a bucket, meets every target too. Before
// a window read empty after its reset, cut down, had passed was held until
// the end its answers show, one ending within the second fell into step
// with its pace and saw 4 to 7 of 60 requests refused in about one run in
// twenty of its worst cell (see
// TestAWindowReadEmptyAfterItsCutDownResetWaitsForTheEndItsAnswersShow).
func TestRobustnessMatrix(t *testing.T) {
	plain := map[string]worldOutcome{}
	for _, w := range matrix() {
		t.Run(w.String(), func(t *testing.T) {
			key := fmt.Sprintf("%v/%s/%v/%v/%v/%v/%v", w.family == "github", w.load.name, w.phase, w.roundTrip(), w.think, w.proxyDate, w.jitter)
			base, ok := plain[key]
			if !ok {
				base = runWorld(t, w, plainLoop)
				plain[key] = base
			}
			got := runWorld(t, w, func(b http.RoundTripper) http.RoundTripper { return New(b) })
			ideal := w.ideal()
			ratio := float64(got.wall) / float64(ideal)
			t.Logf("%s: %.2fx ideal (%v), %d failed, %d saw a 429, %d attempts; plain loop %v, %d failed",
				w, ratio, got.wall.Round(time.Millisecond), got.failed, got.saw429, got.attempts, base.wall.Round(time.Millisecond), base.failed)
			var misses []string
			if got.failed > 0 {
				misses = append(misses, fmt.Sprintf("%d of %d requests failed, e.g. %q", got.failed, w.load.requests(), got.errs))
			}
			if limit := most429(w); got.saw429 > limit {
				misses = append(misses, fmt.Sprintf("%d requests saw a 429, more than %d", got.saw429, limit))
			}
			if ratio > tolerance(w) {
				misses = append(misses, fmt.Sprintf("wall %v is %.2fx the ideal %v, over %.1fx", got.wall, ratio, ideal, tolerance(w)))
			}
			if got.wall > base.wall && base.failed == 0 {
				misses = append(misses, fmt.Sprintf("wall %v is worse than the plain loop's %v", got.wall, base.wall))
			}
			why := gap(w)
			switch {
			case why == "":
				for _, m := range misses {
					t.Error(m)
				}
			case len(misses) == 0:
				t.Logf("known gap met every target this run (%s)", why)
			default:
				t.Logf("known gap (%s): %s", why, strings.Join(misses, "; "))
				if w.family == "none" && got.failed > 0 {
					t.Errorf("with no headers every request must still complete: %d failed", got.failed)
				}
				if w.family == "none" && ratio > 2 && !w.proxyDate {
					t.Errorf("with no headers the wall must stay within 2x: %.2fx", ratio)
				}
				// Held to the targets, with margins for goroutine
				// orders (measured: at most 5% see a 429, at most
				// 45 ms behind the plain loop, -race included).
				if w.family == "none" && got.saw429 > w.load.requests()*15/100 {
					t.Errorf("with no headers at most 15%% may see a 429: %d", got.saw429)
				}
				if w.jitter && (got.failed > 0 || ratio > 1.6 || got.saw429 > w.load.requests()/10) {
					t.Errorf("with answers of 5 to 35 ms every request must complete within 1.6x the ideal, at most 10%% "+
						"seeing a 429: %s", strings.Join(misses, "; "))
				}
				if w.proxyDate && (got.failed > 0 || ratio > 3 || got.saw429 > w.load.requests()*15/100) {
					t.Errorf("with times ahead of the Date every request must complete within 3x the ideal, at most 15%% "+
						"seeing a 429: %s", strings.Join(misses, "; "))
				}
				if w.family == "github" && (got.failed > 0 || ratio > 6) {
					t.Errorf("a fixed window must still complete every request within 6x the ideal: %s", strings.Join(misses, "; "))
				}
			}
		})
	}
}

// Whole-second buckets far slower than the matrix's (3 refilling one every
// 4 s, 4 one every 5 s; the reset is when the bucket is full again), a
// world the matrix does not vary: no request sees a 429, for every
// rounding of the resets, and the bursts end within 1.5x the ideal
// (1.13-1.36x measured).
func TestSlowCoarseBucketsAreNotOverrun(t *testing.T) {
	loads := []workload{
		{name: "0.25rps-b3-5c", rate: 0.25, burst: 3, callers: 5, each: 2},
		{name: "0.2rps-b4-6c", rate: 0.2, burst: 4, callers: 6, each: 2},
	}
	for _, load := range loads {
		for _, rounding := range []retrytest.Rounding{retrytest.RoundDown, retrytest.RoundNearest, retrytest.RoundUp} {
			w := world{family: "anthropic", rounding: rounding, retryAfter: retrytest.RetryAfterSeconds, load: load}
			t.Run(w.String(), func(t *testing.T) {
				got := runWorld(t, w, func(b http.RoundTripper) http.RoundTripper { return New(b) })
				ratio := float64(got.wall) / float64(w.ideal())
				t.Logf("%.2fx ideal, %d saw a 429, %d attempts", ratio, got.saw429, got.attempts)
				if got.failed > 0 || got.saw429 > 0 || ratio >= 1.5 {
					t.Errorf("%d failed, %d saw a 429, %.2fx the ideal: want none, none, under 1.5x", got.failed, got.saw429, ratio)
				}
			})
		}
	}
}
