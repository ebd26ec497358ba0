package retryhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp/internal/fakeclock"
)

// openAIHeaders are the request headers an OpenAI-style token bucket of
// capacity limit sends with remaining left, full again after reset.
func openAIHeaders(limit, remaining int, reset string) http.Header {
	return http.Header{
		"X-Ratelimit-Limit-Requests":     {fmt.Sprint(limit)},
		"X-Ratelimit-Remaining-Requests": {fmt.Sprint(remaining)},
		"X-Ratelimit-Reset-Requests":     {reset},
	}
}

func TestGCRAPacesAtTheLearnedRate(t *testing.T) {
	u := &upstream{start: slowStart{phase: open}}
	now := testStart
	// 10-slot bucket, 9 left, full again in 10ms: it refills at 100/s.
	limits := ParseRateLimits(openAIHeaders(10, 9, "10ms"), now)
	require.True(t, limits.Replenishing)
	pass{u: u}.observe(now, limits, 0, false, true)
	margin := paceMargin
	interval := time.Duration(float64(time.Second) / (100 * margin))
	require.Equal(t, interval, u.interval)

	var starts []time.Duration
	for i := 0; i < 12; i++ {
		start, w, _ := u.schedule(now, 0)
		require.Nil(t, w)
		starts = append(starts, start.at.Sub(now))
	}
	// 9 remain, one is kept as headroom: 8 go at once, then one per interval.
	for i := 0; i < 8; i++ {
		assert.Equal(t, time.Duration(0), starts[i], "slot %d", i)
	}
	for i := 8; i < 12; i++ {
		assert.Equal(t, time.Duration(i-7)*interval, starts[i], "slot %d", i)
	}
}

func TestServerRemainingTightensThePace(t *testing.T) {
	u := &upstream{start: slowStart{phase: open}}
	now := testStart
	pass{u: u}.observe(now, ParseRateLimits(openAIHeaders(10, 9, "10ms"), now), 0, false, true)
	for i := 0; i < 3; i++ {
		_, _, p := u.schedule(now, 0)
		u.dispatch(&p)
	}
	// The answer to the first attempt sent says only 2 remain: attempts 2
	// and 3 are still on their way, so nothing is left beyond the headroom.
	pass{u: u, sent: 1}.observe(now, ParseRateLimits(openAIHeaders(10, 2, "80ms"), now), 0, false, true)
	start, _, _ := u.schedule(now, 0)
	assert.Equal(t, 2*u.interval, start.at.Sub(now), "one interval pays the debt, one makes room")
}

func TestExhaustedQuotaHoldsTheKeyUntilReset(t *testing.T) {
	u := &upstream{start: slowStart{phase: open}}
	now := testStart
	h := http.Header{
		"X-Ratelimit-Limit":     {"5000"},
		"X-Ratelimit-Remaining": {"0"},
		"X-Ratelimit-Reset":     {fmt.Sprint(now.Add(42 * time.Second).Unix())},
	}
	pass{u: u}.observe(now, ParseRateLimits(h, now), 0, false, true)
	start, _, _ := u.schedule(now, 0)
	assert.Equal(t, now.Add(42*time.Second), start.at)
}

func TestA429PausesTheWholeKeyThenSpreads(t *testing.T) {
	u := &upstream{start: slowStart{phase: open}}
	now := testStart
	pass{u: u}.observe(now, RateLimits{Requests: Quota{Remaining: 0, HasRemaining: true, Reset: now.Add(3 * time.Second)}}, 3*time.Second, true, true)
	seen := map[time.Duration]bool{}
	for i := 0; i < 20; i++ {
		start, _, _ := u.schedule(now.Add(time.Second), time.Second)
		d := start.at.Sub(now)
		assert.GreaterOrEqual(t, d, 3*time.Second)
		assert.Less(t, d, 4*time.Second)
		seen[d] = true
	}
	assert.Greater(t, len(seen), 10, "held requests are spread with jitter, not released as a herd")
	start, _, _ := u.schedule(now.Add(5*time.Second), time.Second)
	assert.Equal(t, now.Add(5*time.Second), start.at, "after the hold, requests go at once")
}

// With no rate-limit headers at all, a 429 holds the upstream for its
// Retry-After, then paces it at the rate the server was seen to accept,
// which doubles while requests wait and no 429 comes.
func TestA429WithoutHeadersPacesAtTheAcceptedRate(t *testing.T) {
	u := &upstream{start: slowStart{phase: open}}
	now := testStart
	for i := 0; i < 10; i++ { // ten successes over the last second
		pass{u: u, sent: 1}.observe(now.Add(time.Duration(i)*100*time.Millisecond+50*time.Millisecond), RateLimits{}, 0, false, true)
	}
	now = now.Add(time.Second)
	pass{u: u}.observe(now, RateLimits{}, 3*time.Second, true, true)
	assert.Equal(t, "observed", u.pacer.String())
	var turns []time.Duration
	for i := 0; i < 4; i++ {
		tn, _, _ := u.schedule(now, 0)
		turns = append(turns, tn.at.Sub(now))
	}
	assert.Equal(t, []time.Duration{3 * time.Second, 3100 * time.Millisecond, 3200 * time.Millisecond, 3300 * time.Millisecond}, turns,
		"after the hold, at the 10/s accepted")
	at := now.Add(3 * time.Second)
	pass{u: u, sent: 1}.observe(at, RateLimits{}, 0, false, true)
	assert.InDelta(t, 20, u.rate, 1e-9, "requests wait and none is refused: the rate doubles")
	pass{u: u, sent: 1}.observe(at.Add(200*time.Millisecond), RateLimits{}, 0, true, true)
	assert.InDelta(t, 10, u.rate, 1e-9,
		"a 429 on the first climb takes it back a step: 20 overshot, 10 held (a cut to 70%, 14, may still be above the server's rate)")
	assert.InDelta(t, 10, u.ceiling, 1e-9, "and caps the doubling there")
}

// A header-less 429 whose Retry-After is a whole second, the least a
// bucket's refusal can name in seconds, from an upstream that has been
// serving: what it served beats the coarse statement, and the others wait
// one unit at the accepted rate, not the second (a bucket at 100 a second
// stood idle for 0.9 s at the start of every burst: 1.22x the ideal, now
// 1.05x). A longer Retry-After is a statement of a longer wait (a penalty,
// a slow rate) and holds the upstream as long; the refused request itself
// always waits its own Retry-After (TestServerWaitIsAFloor).
func TestAWholeSecondRetryAfterHoldsOthersOneUnitOfTheAcceptedRate(t *testing.T) {
	for _, c := range []struct {
		retryAfter time.Duration
		first      time.Duration
	}{
		{time.Second, 100 * time.Millisecond},
		{2 * time.Second, 2 * time.Second},
	} {
		u := &upstream{start: slowStart{phase: open}}
		now := testStart
		for i := 0; i < 10; i++ { // ten successes over the last second
			pass{u: u, sent: 1}.observe(now.Add(time.Duration(i)*100*time.Millisecond+50*time.Millisecond), RateLimits{}, 0, false, true)
		}
		now = now.Add(time.Second)
		pass{u: u}.observe(now, RateLimits{}, c.retryAfter, true, true)
		var turns []time.Duration
		for i := 0; i < 3; i++ {
			tn, _, _ := u.schedule(now, 0)
			turns = append(turns, tn.at.Sub(now))
		}
		assert.Equal(t, []time.Duration{c.first, c.first + 100*time.Millisecond, c.first + 200*time.Millisecond}, turns,
			"Retry-After %v: from %v, at the 10/s accepted", c.retryAfter, c.first)
	}
}

func TestSlowStartLetsTheProbeGoAloneThenPaces(t *testing.T) {
	clk := fakeclock.New(testStart)
	probeIn := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int32
	var mu sync.Mutex
	var arrivals []time.Time
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		n := calls.Add(1)
		mu.Lock()
		arrivals = append(arrivals, clk.Now())
		mu.Unlock()
		if n == 1 {
			close(probeIn)
			<-release
		}
		return &http.Response{StatusCode: 200, Header: openAIHeaders(10, 9, "10ms"), Body: http.NoBody}, nil
	})
	rt := New(base, WithClock(clk))
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := rt.RoundTrip(get(t, "https://api.test/x"))
			if err == nil {
				resp.Body.Close()
			}
			errs <- err
		}()
		if i == 0 {
			<-probeIn
		}
	}
	require.True(t, clk.WaitForTimers(5, 5*time.Second), "five requests wait behind the probe")
	assert.Equal(t, int32(1), calls.Load(), "only the probe went")
	close(release)
	// The probe's answer assigns slots: with 8 usable slots, all five go now.
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	assert.Equal(t, int32(6), calls.Load())
	for _, at := range arrivals {
		assert.Equal(t, testStart, at, "no fake time passed: nobody waited for a ramp")
	}
}

func TestSlowStartRampsWhenTheProbeIsSlow(t *testing.T) {
	clk := fakeclock.New(testStart)
	probeIn := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int32
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if calls.Add(1) == 1 {
			close(probeIn)
		}
		<-release // every answer is slow
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}, nil
	})
	rt := New(base, WithClock(clk))
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := rt.RoundTrip(get(t, "https://api.test/x")); err == nil {
				resp.Body.Close()
			}
		}()
		if i == 0 {
			<-probeIn
		}
	}
	require.True(t, clk.WaitForTimers(7, 5*time.Second))
	assert.Equal(t, int32(1), calls.Load())
	for step, want := range []int32{2, 4, 8} { // 1 more, then 2, then 4
		clk.Advance(slowStartStep)
		require.Eventually(t, func() bool { return calls.Load() == want }, 5*time.Second, time.Millisecond, "step %d", step+1)
	}
	close(release)
	wg.Wait()
}

func TestNoHeadersMeansNoPacing(t *testing.T) {
	clk := autoClock()
	mock, _ := scripted(t, step{status: 200})
	rt := New(mock, WithClock(clk))
	for i := 0; i < 20; i++ {
		resp, err := rt.RoundTrip(get(t, "https://api.test/x"))
		require.NoError(t, err)
		resp.Body.Close()
	}
	assert.Empty(t, clk.Sleeps(), "an upstream without rate-limit headers is never held")
}

func TestHeldRequestFailsAtOnceWhenItCannotWait(t *testing.T) {
	clk := autoClock()
	mock, _ := scripted(t, step{status: 429, header: http.Header{"Retry-After": {"30"}}}, step{status: 200})
	rt := New(mock, WithClock(clk), WithMaxRetries(0))
	resp, err := rt.RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	resp.Body.Close()

	// A hold of 30s is within the 60s limit: the next request waits it out.
	resp, err = rt.RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	resp.Body.Close()
	require.Len(t, clk.Sleeps(), 1)
	assert.GreaterOrEqual(t, clk.Sleeps()[0], 30*time.Second)

	// A hold longer than the limit fails at once, before any attempt.
	mock, _ = scripted(t, step{status: 429, header: http.Header{"Retry-After": {"30"}}})
	clk = autoClock()
	rt = New(mock, WithClock(clk), WithMaxRetries(0), WithMaxQueueWait(10*time.Second))
	resp, err = rt.RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	resp.Body.Close()
	resp, err = rt.RoundTrip(get(t, "https://api.test/x"))
	require.Nil(t, resp)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.ErrorIs(t, err, ErrRateLimited)
	assert.True(t, e.Retryable)
	assert.Equal(t, 0, e.Attempts)
	assert.GreaterOrEqual(t, e.RetryAt.Sub(testStart), 30*time.Second)
	assert.Empty(t, clk.Sleeps(), "it did not wait before failing")
	assert.Equal(t, 1, mock.GetTotalCallCount())
	assert.Contains(t, e.UserMessage(), "too many requests")
}

func TestGitHubRateLimit403IsRetriedAfterReset(t *testing.T) {
	reset := fmt.Sprint(testStart.Add(20 * time.Second).Unix())
	primary := http.Header{"X-Ratelimit-Limit": {"60"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {reset}}
	secondary := `{"message":"You have exceeded a secondary rate limit.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`
	cases := []struct {
		name     string
		first    step
		attempts int
		wait     time.Duration
	}{
		{"primary limit waits for the reset", step{status: 403, header: primary}, 2, 20 * time.Second},
		{"secondary limit with Retry-After", step{status: 403, header: http.Header{"Retry-After": {"7"}}, body: secondary}, 2, 7 * time.Second},
		{"secondary limit without a time waits a minute", step{status: 403, body: secondary}, 2, time.Minute},
		{"a plain 403 is final", step{status: 403, body: `{"message":"Must have admin rights"}`}, 1, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := autoClock()
			base := sequence(c.first, step{status: 200})
			resp, err := New(base, WithClock(clk), WithJitter(0)).RoundTrip(get(t, "https://api.github.test/x"))
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, c.attempts, Attempts(resp))
			if c.wait > 0 {
				require.NotEmpty(t, clk.Sleeps())
				assert.Equal(t, c.wait, clk.Sleeps()[0])
			}
		})
	}
}

func TestInsufficientQuota429IsFinal(t *testing.T) {
	body := `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`
	base := sequence(step{status: 429, body: body}, step{status: 200})
	clk := autoClock()
	resp, err := New(base, WithClock(clk)).RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, 1, Attempts(resp))
	assert.Empty(t, clk.Sleeps())
	e := CheckResponse(resp, nil).(*Error)
	assert.False(t, e.Retryable)
	assert.Contains(t, e.UserMessage(), "usage limit")
	b, _ := io.ReadAll(resp.Body)
	assert.Equal(t, body, string(b), "the peeked body is put back whole")
}

func TestShouldRetryHeaderBeatsBodyRules(t *testing.T) {
	body := `{"error":{"type":"insufficient_quota","code":"insufficient_quota"}}`
	base := sequence(step{status: 429, body: body, header: http.Header{"X-Should-Retry": {"true"}}}, step{status: 200})
	resp, err := New(base, WithClock(autoClock())).RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 2, Attempts(resp))
}

func TestUpstreamTableIsBounded(t *testing.T) {
	rt := New(sequence(step{status: 200}), WithClock(autoClock()))
	for i := 0; i < maxUpstreams+200; i++ {
		resp, err := rt.RoundTrip(get(t, fmt.Sprintf("https://host%d.test/x", i)))
		require.NoError(t, err)
		resp.Body.Close()
	}
	assert.LessOrEqual(t, rt.upstreams.len(), maxUpstreams)
}

func TestKeyFuncSeparatesQuotas(t *testing.T) {
	clk := autoClock()
	base := sequence(step{status: 429, header: http.Header{"Retry-After": {"30"}}}, step{status: 200})
	rt := New(base, WithClock(clk), WithMaxRetries(0), WithKeyFunc(func(r *http.Request) string { return r.Header.Get("X-Api-Key") }))
	first := get(t, "https://api.test/x")
	first.Header.Set("X-Api-Key", "a")
	resp, err := rt.RoundTrip(first)
	require.NoError(t, err)
	resp.Body.Close()
	other := get(t, "https://api.test/x")
	other.Header.Set("X-Api-Key", "b")
	resp, err = rt.RoundTrip(other)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Empty(t, clk.Sleeps(), "key b is not held by key a's 429")
	assert.True(t, strings.HasPrefix(resp.Status, "") && resp.StatusCode == 200)
}

func TestRateBoundsPerFamily(t *testing.T) {
	now := testStart.Add(250 * time.Millisecond)
	cases := []struct {
		name   string
		limits RateLimits
		lo, hi float64
	}{
		{"IETF policy states the rate", RateLimits{Requests: Quota{Limit: 100, HasLimit: true}, Window: time.Second}, 100, 100},
		{"bucket with a precise reset", RateLimits{Replenishing: true, Requests: Quota{Limit: 10, Remaining: 6, HasLimit: true, HasRemaining: true, Reset: now.Add(40 * time.Millisecond)}}, 75, 100},
		// A coarse reset may be a second late (lo) or early (hi).
		{"bucket with a whole-second reset under a second away", RateLimits{Replenishing: true, Requests: Quota{Limit: 10, Remaining: 6, HasLimit: true, HasRemaining: true, Coarse: true, Reset: testStart.Add(time.Second)}}, 3 / 1.75, math.Inf(1)},
		{"bucket with a whole-second reset further away", RateLimits{Replenishing: true, Requests: Quota{Limit: 100, Remaining: 0, HasLimit: true, HasRemaining: true, Coarse: true, Reset: testStart.Add(3 * time.Second)}}, 99 / 3.75, 100 / 1.75},
		{"bucket with a whole-second reset cut down to now", RateLimits{Replenishing: true, Requests: Quota{Limit: 4, Remaining: 0, HasLimit: true, HasRemaining: true, Coarse: true, Reset: now}}, 3, math.Inf(1)},
		{"fixed window running low", RateLimits{Requests: Quota{Limit: 5000, Remaining: 100, HasLimit: true, HasRemaining: true, Reset: now.Add(50 * time.Second)}}, 2, 2},
		{"fixed window with plenty left: spread too, its limit lets a burst go", RateLimits{Requests: Quota{Limit: 5000, Remaining: 4000, HasLimit: true, HasRemaining: true, Reset: now.Add(50 * time.Second)}}, 80, 80},
		{"fixed window with a coarse reset", RateLimits{Requests: Quota{Limit: 5000, Remaining: 100, HasLimit: true, HasRemaining: true, Coarse: true, Reset: now.Add(50 * time.Second)}}, 100 / 51.0, 100 / 49.0},
		{"full bucket says nothing", RateLimits{Replenishing: true, Requests: Quota{Limit: 10, Remaining: 10, HasLimit: true, HasRemaining: true, Reset: now}}, 0, 0},
	}
	for _, c := range cases {
		lo, hi := rateBounds(now, c.limits, true)
		assert.InDelta(t, c.lo, lo, 1e-9, c.name)
		if math.IsInf(c.hi, 1) {
			assert.True(t, math.IsInf(hi, 1), c.name)
		} else {
			assert.InDelta(t, c.hi, hi, 1e-9, c.name)
		}
	}
}

func TestLearnedRateRecoversFromALowStart(t *testing.T) {
	u := &upstream{}
	plenty := Quota{Limit: 10, Remaining: 8, HasLimit: true, HasRemaining: true}
	u.rate = u.nextRate(0, math.Inf(1), plenty, 2, 0.5, true)
	assert.Equal(t, 4.0, u.rate, "no bound at all: start from the reading itself")
	for i := 0; i < 10; i++ {
		u.rate = u.nextRate(0, math.Inf(1), plenty, 2, 0.5, true)
	}
	assert.InDelta(t, 4*math.Pow(1.1, 10), u.rate, 1e-9, "plenty left: the rate rises")
	u.rate = u.nextRate(0, 6, plenty, 2, 0.5, true)
	assert.Equal(t, 6.0, u.rate, "never above what a reading proves")
	u.rate = u.nextRate(5, 10, Quota{Limit: 10, Remaining: 1, HasLimit: true, HasRemaining: true}, 9, 1, true)
	assert.InDelta(t, 6*1.02, u.rate, 1e-9, "low quota: a slow creep")
	u.pacer.throttled(time.Unix(0, 0), true, 0, false, 1, time.Time{})
	assert.InDelta(t, 6*1.02*0.9, u.ceiling, 1e-9, "a 429 sets a ceiling")
	assert.InDelta(t, 6*1.02*rateBackoff, u.rate, 1e-9, "and drops the rate: a 429 disproves what readings seemed to prove")
	assert.InDelta(t, u.rate, u.proven, 1e-9, "proven drops with it")
	u.rate = u.nextRate(5.5, math.Inf(1), plenty, 2, 0.5, true)
	assert.InDelta(t, 5.5, u.rate, 1e-9, "recovering")
	u.rate = u.nextRate(0, math.Inf(1), plenty, 2, 0.5, true)
	assert.InDelta(t, 6*1.02*0.9, u.rate, 1e-9, "up to the ceiling")
	u.rate = u.nextRate(7, math.Inf(1), plenty, 2, 0.5, true)
	assert.Equal(t, 7.0, u.rate, "never below what a reading proves")
	u.rate = u.nextRate(0, math.Inf(1), plenty, 2, 0.5, false)
	assert.Equal(t, 7.0, u.rate, "no growth while the pace holds nobody back")
}

func TestAHoldPausesRequestsAlreadyWaitingForTheirSlot(t *testing.T) {
	clk := fakeclock.New(testStart)
	var calls atomic.Int32
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		calls.Add(1)
		return &http.Response{StatusCode: 200, Header: openAIHeaders(10, 9, "10ms"), Body: http.NoBody}, nil
	})
	rt := New(base, WithClock(clk))
	resp, err := rt.RoundTrip(get(t, "https://api.test/x")) // the probe: learns 100/s
	require.NoError(t, err)
	resp.Body.Close()

	var wg sync.WaitGroup
	for i := 0; i < 9; i++ { // 8 slots are free now; the ninth waits for one
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := rt.RoundTrip(get(t, "https://api.test/x")); assert.NoError(t, err) {
				resp.Body.Close()
			}
		}()
	}
	require.True(t, clk.WaitForTimers(1, 5*time.Second), "the ninth request sleeps until its slot")
	require.Eventually(t, func() bool { return calls.Load() == 9 }, 5*time.Second, time.Millisecond)

	// A 429 elsewhere holds the upstream for 5s while it sleeps.
	u := rt.upstreams.get(&upstreamKey{scheme: "https", host: "api.test"}, nil)
	pass{u: u}.observe(clk.Now(), RateLimits{}, 5*time.Second, true, true)

	clk.Advance(50 * time.Millisecond) // its slot comes: it must not go yet
	require.True(t, clk.WaitForTimers(1, 5*time.Second), "it waits again, for the hold")
	assert.Equal(t, int32(9), calls.Load())
	clk.Advance(6 * time.Second)
	wg.Wait()
	assert.Equal(t, int32(10), calls.Load())
}

func TestBookedTurnsMoveWithThePace(t *testing.T) {
	u := &upstream{start: slowStart{phase: open}, pacer: pacer{capacity: 1}}
	now := testStart
	u.setPace(now, 100*time.Millisecond)
	var turns []turn
	for i := 0; i < 4; i++ {
		tn, _, _ := u.schedule(now, 0)
		turns = append(turns, tn)
	}
	assert.Equal(t, 300*time.Millisecond, turns[3].at.Sub(now), "booked at 10/s")
	_, quicker, _ := u.recheck(now, &turns[3], 0)
	require.NotNil(t, quicker)

	u.mu.Lock()
	u.setPace(now, 10*time.Millisecond) // a reading says 100/s
	u.mu.Unlock()
	select {
	case <-quicker:
	default:
		t.Fatal("a quicker pace wakes the requests waiting for their turn")
	}
	for i, tn := range turns[1:] {
		at, _, _ := u.recheck(now, &tn, 0)
		assert.Equal(t, time.Duration(i+1)*10*time.Millisecond, at.Sub(now), "turn %d moved with the pace", i+1)
	}
	at, _, _ := u.recheck(now.Add(30*time.Millisecond), &turns[3], 0)
	assert.True(t, at.IsZero(), "the last turn has come")
}

func TestASlowerPaceDoesNotWakeWaiters(t *testing.T) {
	u := &upstream{start: slowStart{phase: open}, pacer: pacer{capacity: 1}}
	now := testStart
	u.setPace(now, 10*time.Millisecond)
	u.schedule(now, 0)
	tn, _, _ := u.schedule(now, 0)
	_, quicker, _ := u.recheck(now, &tn, 0)
	u.mu.Lock()
	u.setPace(now, 20*time.Millisecond)
	u.mu.Unlock()
	select {
	case <-quicker:
		t.Fatal("woken by a slower pace")
	default:
	}
	at, _, _ := u.recheck(now.Add(10*time.Millisecond), &tn, 0)
	assert.Equal(t, 20*time.Millisecond, at.Sub(now), "a turn that came early under the old pace waits for the new one")
}

// anthropicHeaders are the request headers of an Anthropic-style bucket.
func anthropicHeaders(limit, remaining int, reset time.Time) http.Header {
	return http.Header{
		"Anthropic-Ratelimit-Requests-Limit":     {fmt.Sprint(limit)},
		"Anthropic-Ratelimit-Requests-Remaining": {fmt.Sprint(remaining)},
		"Anthropic-Ratelimit-Requests-Reset":     {reset.UTC().Format(time.RFC3339)},
	}
}

func TestCoarseBucketRateIsMeasuredFromItsDrain(t *testing.T) {
	u := &upstream{start: slowStart{phase: open}}
	now := testStart
	reset := now.Add(time.Second)
	send := func(n int) {
		for i := 0; i < n; i++ {
			_, _, p := u.schedule(now, 0)
			u.dispatch(&p)
		}
	}
	read := func(remaining int) {
		pass{u: u, sent: u.sent}.observe(now, ParseRateLimits(anthropicHeaders(10, remaining, reset), now), 0, false, true)
	}
	send(1)
	read(8) // the first reading: a first guess at the rate
	require.True(t, u.coarse, "whole-second resets make a coarse bucket")
	read(8) // where the measure starts
	// 20 sent over 200ms while what remains went from 8 to 6: the bucket
	// refilled 18 units, 90/s, within one unit (85/s to 95/s).
	send(20)
	now = now.Add(200 * time.Millisecond)
	read(6)
	assert.True(t, u.measured)
	assert.InDelta(t, 90, u.rate, 1e-9, "the refill measured over the span")
	assert.InDelta(t, 85, u.proven, 1e-9, "one unit less is proven")
}

func TestCoarseBucketProbesUpWhileItStaysFull(t *testing.T) {
	u := &upstream{start: slowStart{phase: open}}
	now := testStart
	reset := now.Add(time.Second)
	_, _, p := u.schedule(now, 0)
	u.dispatch(&p)
	for i := 0; i < 2; i++ { // a first guess, then where the measure starts
		pass{u: u, sent: u.sent}.observe(now, ParseRateLimits(anthropicHeaders(10, 9, reset), now), 0, false, true)
	}
	before := u.rate
	for i := 0; i < 5; i++ { // a queue waits on the pace: it binds
		u.schedule(now, 0)
	}
	_, _, p = u.schedule(now, 0)
	u.dispatch(&p)
	now = now.Add(150 * time.Millisecond)
	pass{u: u, sent: u.sent}.observe(now, ParseRateLimits(anthropicHeaders(10, 9, reset), now), 0, false, true)
	assert.InDelta(t, 2*before, u.rate, 1e-9, "a bucket that stays full at this pace can take more: the rate doubles")
}

func TestShortfallHoldsWhatTheBucketLacks(t *testing.T) {
	u := &upstream{start: slowStart{phase: open}, pacer: pacer{coarse: true, limit: 10, proven: 100}}
	now := testStart
	u.latest = reading{at: now, remaining: 3, sent: 5}
	u.sent = 5
	assert.Zero(t, u.shortfall(now, 1), "3 left: one can go, keeping a unit of headroom")
	assert.Zero(t, u.shortfall(now, 1), "and another")
	assert.Equal(t, 10*time.Millisecond, u.shortfall(now, 1),
		"the two cleared count before they are sent: a third checking meanwhile waits")
	u.sentOne()
	u.sentOne()
	assert.Equal(t, 10*time.Millisecond, u.shortfall(now, 2), "1 left after two more: wait for one unit at 100/s")
	assert.Zero(t, u.shortfall(now.Add(10*time.Millisecond), 2))
	u.cleared = 0 // not sent after all
	u.rejected = 1
	assert.Zero(t, u.shortfall(now, 2), "a 429 among them took nothing: 2 left")
	u.cleared = 0
	u.rejected, u.sent = 0, 12
	assert.Equal(t, 60*time.Millisecond, u.shortfall(now, 7), "6 short with 7 out: wait for the refill")
	assert.Equal(t, 10*time.Millisecond, u.shortfall(now, 0),
		"nothing out: at most one unit, so a wrong model cannot keep the upstream idle")
}

func TestShortfallUnderANanosecondStillWaits(t *testing.T) {
	// The refill the model counts reaches the unit a request waits for
	// at the instant it was told to wake, less float noise: it is short
	// by far under a nanosecond. Truncated to 0, that let it go
	// uncounted, and every other request woken at that instant too (4
	// went at once at a bucket of 4 and one drew a 429 whose whole-second
	// Retry-After cost up to 1.54x the ideal). Rounded up, it waits a
	// nanosecond, then goes counted: one goes, the others wait.
	u := &upstream{start: slowStart{phase: open}, pacer: pacer{coarse: true, limit: 4, proven: 38.56}}
	now := testStart
	u.latest = reading{at: now, remaining: 1, sent: 5}
	u.sent = 5
	now = now.Add(time.Millisecond)
	wait := u.shortfall(now, 0)
	require.Positive(t, wait, "1 left and a unit of headroom: wait for one more")
	wake := now.Add(wait)
	for wake.Sub(now) < time.Second {
		gone := 0
		for i := 0; i < 4; i++ { // four requests woken at the same instant
			if u.shortfall(wake, 0) == 0 {
				gone++
			}
		}
		if gone > 0 {
			assert.Equal(t, 1, gone, "one unit came back: one goes at %v", wake.Sub(now))
			return
		}
		wake = wake.Add(time.Nanosecond)
	}
	t.Fatal("nobody went")
}

func TestExhaustedReplenishingQuotaWaitsForOneUnitOnceTheRateIsProven(t *testing.T) {
	u := &upstream{start: slowStart{phase: open}, pacer: pacer{proven: 50}}
	now := testStart
	pass{u: u}.observe(now, ParseRateLimits(anthropicHeaders(10, 0, now.Add(time.Second)), now), 0, false, true)
	assert.Equal(t, 20*time.Millisecond, u.hold.end.Sub(now), "one unit at 50/s, not the whole second to full")

	u = &upstream{start: slowStart{phase: open}}
	pass{u: u}.observe(now, ParseRateLimits(anthropicHeaders(10, 0, now.Add(time.Second)), now), 0, false, true)
	assert.Equal(t, time.Second, u.hold.end.Sub(now), "no proven rate: until the reset")
}

func TestOnlyAStatedPaceIsFirm(t *testing.T) {
	now := testStart
	coarse := &upstream{start: slowStart{phase: open}}
	pass{u: coarse}.observe(now, ParseRateLimits(anthropicHeaders(10, 9, now.Add(time.Second)), now), 0, false, true)
	for i := 0; i < 20; i++ {
		coarse.schedule(now, 0)
	}
	tn, _, _ := coarse.schedule(now, 0)
	assert.True(t, tn.paced)
	assert.False(t, tn.firm, "a coarse bucket's first guess only projects a turn")
	assert.True(t, tn.firmAt().IsZero())

	stated := &upstream{start: slowStart{phase: open}}
	pass{u: stated}.observe(now, ParseRateLimits(openAIHeaders(10, 9, "10ms"), now), 0, false, true)
	for i := 0; i < 20; i++ {
		stated.schedule(now, 0)
	}
	tn, _, _ = stated.schedule(now, 0)
	assert.True(t, tn.firm, "a rate the headers state is firm")
	assert.Equal(t, tn.at, tn.firmAt())
}

// waitForProjectedTurn books the 31st turn on an upstream paced at a
// cautious guess of 1/s (so projected 30s away, not firm) and starts a
// request waiting for it, with 5s of queue wait allowed. It returns the
// clock, the upstream and where the wait's outcome arrives.
func waitForProjectedTurn(t *testing.T) (*fakeclock.Clock, *upstream, chan error) {
	t.Helper()
	clk := fakeclock.New(time.Now()) // the deadline's context runs on the real clock
	rt := New(sequence(step{status: 200}), WithClock(clk), WithMaxQueueWait(5*time.Second))
	u := &upstream{start: slowStart{phase: open}, pacer: pacer{capacity: 1}}
	u.setPace(clk.Now(), time.Second)
	for i := 0; i < 30; i++ {
		u.schedule(clk.Now(), 0)
	}
	tn, _, _ := u.schedule(clk.Now(), 0)
	require.False(t, tn.firm)
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(time.Minute))
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.test/v1", nil)
	c := &call{t: rt, req: req, ctx: ctx, policy: &rt.cfg.policy}
	done := make(chan error, 1)
	latest := c.latestStart(clk.Now())
	go func() { done <- c.awaitTurn(u, &tn, time.Time{}, nil, latest, false) }()
	require.True(t, clk.WaitForTimers(1, 5*time.Second), "it waits instead of failing at once")
	select {
	case err := <-done:
		t.Fatalf("refused at once: %v", err)
	default:
	}
	return clk, u, done
}

func TestAProjectedTurnIsWaitedForAndMovesWithThePace(t *testing.T) {
	clk, u, done := waitForProjectedTurn(t)
	u.mu.Lock()
	u.setPace(clk.Now(), 100*time.Millisecond) // a reading: 10/s
	u.mu.Unlock()
	// Woken by the quicker pace, it now waits for its turn 3.1s away.
	require.Eventually(t, func() bool { return clk.Pending() == 1 && len(done) == 0 }, 5*time.Second, time.Millisecond)
	clk.Advance(3100 * time.Millisecond)
	require.NoError(t, <-done, "its turn came within the queue wait")
}

func TestAProjectedTurnStillPastTheQueueLimitFailsAtTheLimit(t *testing.T) {
	clk, _, done := waitForProjectedTurn(t)
	clk.Advance(5 * time.Second)
	err := <-done
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrRateLimited), "at the longest queue wait, a turn still 25s away fails: %v", err)
}

func TestA429WithoutRetryAfterStillSlowsThePace(t *testing.T) {
	u := &upstream{start: slowStart{phase: open}}
	now := testStart
	pass{u: u}.observe(now, ParseRateLimits(openAIHeaders(10, 9, "10ms"), now), 0, false, true)
	require.InDelta(t, 100, u.rate, 1e-9)
	pass{u: u}.observe(now, RateLimits{}, 0, true, true) // a 429 naming no wait
	assert.InDelta(t, 100*rateBackoff, u.rate, 1e-9, "the learned rate was too high")
	assert.True(t, u.hold.end.IsZero(), "but nothing says how long to hold")
}

func TestAnAbandonedProbeReleasesTheQueueBehindIt(t *testing.T) {
	u := &upstream{}
	now := testStart
	_, _, probe := u.schedule(now, 0)
	require.True(t, probe.probe)
	_, w, _ := u.schedule(now, 0)
	require.NotNil(t, w, "queued behind the probe")
	probe.abandon(now.Add(10 * time.Millisecond))
	select {
	case <-w.released:
	default:
		t.Fatal("the queue still waits for an answer that will never come")
	}
	assert.Equal(t, now.Add(10*time.Millisecond), u.claim(w).at, "its turn is now")
}

func TestAPolicysFirstEmptyReadingHoldsOneUnitNotTheWholeReset(t *testing.T) {
	// An IETF policy of 5 a second over a bucket of one: the first
	// answer reads empty, the reset a whole second away (rounded up).
	// The next unit is a fifth of a second away, as the policy says.
	u := &upstream{start: slowStart{phase: open}}
	now := testStart
	l := ParseRateLimits(peHeader("RateLimit", `"default";r=0;t=1`, "RateLimit-Policy", `"default";q=5;w=1`), now)
	pass{u: u, sent: 1}.observe(now, l, 0, false, true)
	assert.Equal(t, now.Add(200*time.Millisecond), u.hold.end, "held one unit at the policy's rate")
}

// A coarse quota's unit kept back as headroom goes when its reset comes
// within a pace interval: a fixed window's unit left over is lost at its
// end. In the first second of a window of 100 (before its lumps told it
// from a bucket) one was kept back, and a burst of five windows' quota
// ended a window late (1.25x the ideal). Further from the reset, the unit
// stays kept back.
func TestHeadroomGoesAsACoarseResetComes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		resetIn  time.Duration // from the reading with one left
		wantSoon bool
	}{
		{"reset within an interval", 5 * time.Millisecond, true},
		{"reset further", 500 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &pacer{}
			reset := testStart.Add(time.Second)
			last := reset.Add(-tc.resetIn)
			reading := func(remaining int64) RateLimits {
				return RateLimits{Requests: Quota{Limit: 100, Remaining: remaining, HasLimit: true, HasRemaining: true,
					Reset: reset, Coarse: true}}
			}
			// Its count falls by one an answer, each answering the
			// newest attempt, until one remains.
			step := last.Sub(testStart) / 60
			at := testStart
			for left := int64(60); left > 1; left-- {
				answer(p, at, false, reading(left))
				at = at.Add(step)
			}
			answer(p, last, false, reading(1))
			require.Greater(t, p.interval, 5*time.Millisecond)
			got := p.book(last).at.Sub(last)
			if tc.wantSoon {
				assert.Zero(t, got, "the last unit goes before the reset")
			} else {
				assert.Positive(t, got, "the unit stays kept back")
			}
		})
	}
}

// waitsOf is what readWaits makes, at now, of an answer of status with
// header h and a Retry-After of retryAfter.
func waitsOf(now time.Time, status int, h http.Header, retryAfter string) outcome {
	h = h.Clone()
	h.Set("Retry-After", retryAfter)
	o := outcome{resp: &http.Response{StatusCode: status, Header: h}, limits: ParseRateLimits(h, now)}
	o.readWaits(now)
	return o
}

// A 429 whose Retry-After names whole seconds while the same answer states
// to the millisecond when the exhausted quota has a unit again holds the
// upstream until that time: the whole second is that time rounded up. A
// bucket of one at 5 a second that refused an attempt 1 ms early said
// "Retry-After: 1" and "reset: 1ms", and holding every request for the
// second cost five units. The refused request's own wait stays the
// Retry-After (a floor). A quota stated in whole seconds, or none found
// exhausted, leaves the hold as the Retry-After says.
func TestAWholeSecondRetryAfterGivesWayToAFineResetForTheHold(t *testing.T) {
	now := testStart
	for _, tc := range []struct {
		name string
		h    http.Header
		hold time.Duration
	}{
		{"fine reset", openAIHeaders(1, 0, "1ms"), time.Millisecond},
		{"fine reset later than the Retry-After", openAIHeaders(1, 0, "3s"), time.Second},
		{"quota not exhausted", openAIHeaders(10, 3, "1ms"), time.Second},
		{"coarse reset", http.Header{"Anthropic-Ratelimit-Requests-Limit": {"1"}, "Anthropic-Ratelimit-Requests-Remaining": {"0"},
			"Anthropic-Ratelimit-Requests-Reset": {now.Add(time.Second).UTC().Format(time.RFC3339)}}, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := waitsOf(now, http.StatusTooManyRequests, tc.h, "1")
			assert.Equal(t, tc.hold, o.retryAfter, "the upstream's hold")
			assert.Equal(t, time.Second, o.serverWait, "the request's own wait")
		})
	}
	// Named in milliseconds, the wait is the server's own: it stays.
	h := openAIHeaders(1, 0, "1ms")
	h.Set("Retry-After-Ms", "150")
	o := outcome{resp: &http.Response{StatusCode: http.StatusTooManyRequests, Header: h}, limits: ParseRateLimits(h, now)}
	o.readWaits(now)
	assert.Equal(t, 150*time.Millisecond, o.retryAfter)
}

// A Retry-After longer than the fine reset rounded up to the second is the
// server's hold for another reason (a penalty, a daily quota): the
// upstream waits it out, whatever an empty bucket's reset says (a reset of
// 0 or 1 in delta seconds, or a duration). Nor is a 503's Retry-After, the
// breaker's hint, cut.
func TestALongerRetryAfterHoldsWhateverTheReset(t *testing.T) {
	now := testStart
	for _, tc := range []struct {
		name   string
		status int
		h      http.Header
	}{
		{"OpenAI duration", http.StatusTooManyRequests, openAIHeaders(1, 0, "20ms")},
		{"OpenAI 0s", http.StatusTooManyRequests, openAIHeaders(10, 0, "0s")},
		{"IETF delta 1", http.StatusTooManyRequests, http.Header{"Ratelimit-Limit": {"10"}, "Ratelimit-Remaining": {"0"}, "Ratelimit-Reset": {"1"}}},
		{"IETF delta 0", http.StatusTooManyRequests, http.Header{"Ratelimit-Limit": {"10"}, "Ratelimit-Remaining": {"0"}, "Ratelimit-Reset": {"0"}}},
		{"503", http.StatusServiceUnavailable, openAIHeaders(1, 0, "20ms")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := waitsOf(now, tc.status, tc.h, "30")
			assert.Equal(t, 30*time.Second, o.retryAfter, "the upstream's hold")
			assert.Equal(t, 30*time.Second, o.serverWait)
		})
	}
}
