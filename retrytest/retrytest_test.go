package retrytest_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

func TestStatsArrivalsAndBodyHashes(t *testing.T) {
	clk := newClock()
	tr := transport(retrytest.Config{RequestIDHeader: "X-Req"}, clk)
	try(tr, apiURL, "same", http.Header{"X-Req": {"1"}})
	clk.Advance(time.Second)
	try(tr, apiURL, "same", http.Header{"X-Req": {"1"}})
	clk.Advance(time.Second)
	try(tr, apiURL, "other", http.Header{"X-Req": {"2"}})
	req, _ := http.NewRequest(http.MethodGet, apiURL, nil) // no body, no id
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()

	st := tr.Stats()
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	assert.Equal(t, 4, st.Attempts)
	assert.Equal(t, []time.Duration{0, time.Second, 2 * time.Second, 2 * time.Second}, st.Arrivals)
	assert.Equal(t, []string{sum("same"), sum("same"), sum("other"), sum("")}, st.BodySHA256)
	assert.Equal(t, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", st.BodySHA256[3])
	assert.Equal(t, 3, st.DistinctBodies())
	assert.Equal(t, map[string]retrytest.RequestStats{
		"1": {Attempts: 2, Statuses: []int{200, 200}},
		"2": {Attempts: 1, Statuses: []int{200}},
	}, st.Requests)
	assert.Equal(t, 0, st.Dropped)

	// The snapshot is the caller's own.
	st.Arrivals[0] = time.Hour
	st.Statuses[200] = 99
	assert.Equal(t, time.Duration(0), tr.Stats().Arrivals[0])
	assert.Equal(t, 4, tr.Stats().Statuses[200])

	assert.Nil(t, retrytest.NewTransport(retrytest.Config{}).Stats().Requests, "no grouping without a header")
}

func TestStatsAreBounded(t *testing.T) {
	tr := retrytest.NewTransport(retrytest.Config{MaxRecords: 3, RequestIDHeader: "X-Req"})
	for i := range 5 {
		try(tr, apiURL, strconv.Itoa(i), http.Header{"X-Req": {strconv.Itoa(i % 4)}})
	}
	st := tr.Stats()
	assert.Equal(t, 5, st.Attempts)
	assert.Equal(t, 5, st.Statuses[200], "counters count everything")
	assert.Len(t, st.Arrivals, 3)
	assert.Len(t, st.BodySHA256, 3)
	assert.Equal(t, 2, st.Dropped)
	assert.Len(t, st.Requests, 3, "ids beyond MaxRecords are not kept")
	assert.Equal(t, 2, st.Requests["0"].Attempts)
	assert.Equal(t, []int{200}, st.Requests["0"].Statuses, "per-request statuses share the bound")
	assert.Equal(t, retrytest.DefaultMaxRecords, 100_000)
}

func TestMaxAttemptsFuse(t *testing.T) {
	tr := retrytest.NewTransport(retrytest.Config{MaxAttempts: 2, Script: retrytest.MustParseScript("503*10")})
	assert.Equal(t, 503, do(t, tr, apiURL, "").status)
	assert.Equal(t, 503, do(t, tr, apiURL, "").status)
	r := do(t, tr, apiURL, "")
	assert.Equal(t, 410, r.status, "the fuse goes before the script")
	assert.Equal(t, "fuse", jsonField(t, r.body, "error", "type"))
}

func TestPermanentErrorBodies(t *testing.T) {
	for _, tc := range []struct {
		family retrytest.Family
		step   string
		path   []string
		want   string
	}{
		{retrytest.Anthropic, "400", []string{"error", "type"}, "invalid_request_error"},
		{retrytest.Anthropic, "401", []string{"error", "type"}, "authentication_error"},
		{retrytest.Anthropic, "403", []string{"error", "type"}, "permission_error"},
		{retrytest.Anthropic, "404", []string{"error", "type"}, "not_found_error"},
		{retrytest.Anthropic, "413", []string{"error", "type"}, "request_too_large"},
		{retrytest.Anthropic, "500", []string{"error", "type"}, "api_error"},
		{retrytest.Anthropic, "422", []string{"error", "type"}, "invalid_request_error"},
		{retrytest.Anthropic, "400", []string{"request_id"}, "req_retrytest_1"},
		{retrytest.OpenAI, "400", []string{"error", "type"}, "invalid_request_error"},
		{retrytest.OpenAI, "400", []string{"error", "code"}, "null"},
		{retrytest.OpenAI, "401", []string{"error", "code"}, "invalid_api_key"},
		{retrytest.OpenAI, "403", []string{"error", "type"}, "request_forbidden"},
		{retrytest.OpenAI, "404", []string{"error", "code"}, "model_not_found"},
		{retrytest.OpenAI, "429:insufficient_quota", []string{"error", "type"}, "insufficient_quota"},
		{retrytest.OpenAI, "429:insufficient_quota", []string{"error", "code"}, "insufficient_quota"},
		{retrytest.OpenAI, "429", []string{"error", "code"}, "rate_limit_exceeded"},
		{retrytest.OpenAI, "500", []string{"error", "type"}, "server_error"},
		{retrytest.OpenAI, "402:billing_not_active", []string{"error", "code"}, "billing_not_active"},
		{retrytest.OpenAI, "529", []string{"error", "type"}, "overloaded_error"},
		{retrytest.GitHub, "401", []string{"message"}, "Bad credentials"},
		{retrytest.GitHub, "404", []string{"message"}, "Not Found"},
		{retrytest.GitHub, "404", []string{"status"}, "404"},
		{retrytest.GitHub, "403:secondary_rate_limit", []string{"documentation_url"}, "https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api#about-secondary-rate-limits"},
		{retrytest.Plain, "404", []string{"title"}, "Not Found"},
		{retrytest.IETF, "400:bad-input", []string{"type"}, "bad-input"},
	} {
		tr := retrytest.NewTransport(retrytest.Config{Family: tc.family, Script: retrytest.MustParseScript(tc.step)})
		r := do(t, tr, apiURL, "")
		assert.Equal(t, strings.Split(tc.step, ":")[0], strconv.Itoa(r.status))
		assert.Equal(t, tc.want, jsonField(t, r.body, tc.path...), "%s %s", tc.family, tc.step)
	}
}

// The bodies are real enough that retryhttp, which reads the real
// providers' bodies, reaches the verdicts it reaches on the real APIs.
func TestBodiesClassifyAsTheRealOnes(t *testing.T) {
	for _, tc := range []struct {
		family    retrytest.Family
		step      string
		retryable bool
		typ       string
	}{
		{retrytest.OpenAI, "429:insufficient_quota", false, "insufficient_quota"},
		{retrytest.OpenAI, "429", true, "rate_limit_exceeded"},
		{retrytest.Anthropic, "529", true, "overloaded_error"},
		{retrytest.Anthropic, "400", false, "invalid_request_error"},
		{retrytest.GitHub, "403:secondary_rate_limit", true, "secondary_rate_limit"},
		{retrytest.GitHub, "403", false, ""},
	} {
		tr := retrytest.NewTransport(retrytest.Config{Family: tc.family, Script: retrytest.MustParseScript(tc.step)})
		req, _ := http.NewRequest(http.MethodGet, apiURL, nil)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		var e *retryhttp.Error
		require.ErrorAs(t, retryhttp.CheckResponse(resp, nil), &e)
		resp.Body.Close()
		assert.Equal(t, tc.retryable, e.Retryable, "%s %s", tc.family, tc.step)
		assert.Equal(t, tc.typ, e.ProviderType, "%s %s", tc.family, tc.step)
	}
}

func TestSuccessHandler(t *testing.T) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen-Id", w.Header().Get("Request-Id"))
		w.WriteHeader(http.StatusAccepted)
		w.Write(append([]byte("echo:"), b...))
	})
	cfg := retrytest.Config{Family: retrytest.Anthropic, Success: echo}
	srv := retrytest.NewServer(cfg)
	defer srv.Close()
	for name, rt := range map[string]http.RoundTripper{"server": srv.Client().Transport, "transport": retrytest.NewTransport(cfg)} {
		url := apiURL
		if name == "server" {
			url = srv.URL
		}
		r := do(t, rt, url, "hi")
		assert.Equal(t, 202, r.status, name)
		assert.Equal(t, "echo:hi", r.body, name)
		assert.Equal(t, "req_retrytest_1", r.header.Get("X-Seen-Id"), "%s: the provider's headers are set first", name)
	}
	assert.Equal(t, map[int]int{202: 1}, srv.Stats().Statuses, "the handler's status is counted")

	cfg.Flaky.Truncate = 1
	tr := retrytest.NewTransport(cfg)
	r, err := try(tr, apiURL, "abcdefg", nil)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	assert.Equal(t, "echo:a", r.body, "half of echo:abcdefg")
}

func TestHeadRequest(t *testing.T) {
	tr := retrytest.NewTransport(retrytest.Config{})
	req, _ := http.NewRequest(http.MethodHead, apiURL, nil)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	assert.Equal(t, http.NoBody, resp.Body)
	assert.Equal(t, "200 OK", resp.Status)
}

func TestTransportStatusLineMatchesServer(t *testing.T) {
	cfg := retrytest.Config{Script: retrytest.MustParseScript("529")}
	srv := retrytest.NewServer(cfg)
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	req, _ = http.NewRequest(http.MethodGet, apiURL, nil)
	resp2, err := retrytest.NewTransport(cfg).RoundTrip(req)
	require.NoError(t, err)
	assert.Equal(t, resp.Status, resp2.Status)
	assert.Equal(t, resp.Header.Get("Content-Length"), resp2.Header.Get("Content-Length"))
}

func TestValidate(t *testing.T) {
	assert.NoError(t, retrytest.Config{}.Validate())
	for _, c := range []retrytest.Config{
		{Rounding: retrytest.RoundUp}, {Rounding: retrytest.RoundDown}, {Rounding: retrytest.RoundNearest},
		{ClockOffset: -time.Hour},
		{RateLimit: retrytest.RateLimit{Window: time.Hour, Burst: 5000}},
		{RateLimit: retrytest.RateLimit{Window: time.Minute, Rate: 1}},
		{RateLimit: retrytest.RateLimit{Window: time.Minute, Burst: 5, TokenRate: 10}},
	} {
		assert.NoError(t, c.Validate(), "%+v", c)
	}
	for _, tc := range []struct {
		cfg  retrytest.Config
		want string
	}{
		{retrytest.Config{Family: "azure"}, `unknown Family "azure"`},
		{retrytest.Config{RetryAfter: "minutes"}, "unknown RetryAfter"},
		{retrytest.Config{RateLimit: retrytest.RateLimit{Rate: -1}}, "finite"},
		{retrytest.Config{RateLimit: retrytest.RateLimit{Rate: math.Inf(1)}}, "finite"},
		{retrytest.Config{RateLimit: retrytest.RateLimit{Rate: math.NaN()}}, "finite"},
		{retrytest.Config{RateLimit: retrytest.RateLimit{Rate: 1, Burst: -1}}, "Burst"},
		{retrytest.Config{RateLimit: retrytest.RateLimit{TokenRate: 1}}, "needs a Rate"},
		{retrytest.Config{Rounding: "up"}, `unknown Rounding "up"`},
		{retrytest.Config{Rounding: "Floor"}, `unknown Rounding "Floor"`},
		{retrytest.Config{RateLimit: retrytest.RateLimit{Window: -time.Second, Burst: 1}}, "Window must not be negative"},
		{retrytest.Config{RateLimit: retrytest.RateLimit{Window: time.Second}}, "Window needs a Burst"},
		{retrytest.Config{RateLimit: retrytest.RateLimit{Window: time.Second, TokenBurst: 5}}, "Window needs a Burst"},
		{retrytest.Config{RateLimit: retrytest.RateLimit{Rate: 1, Status: 200}}, "not an error status"},
		{retrytest.Config{Overload: []retrytest.Window{{From: time.Second, Until: time.Second}}}, "Overload[0]"},
		{retrytest.Config{Overload: []retrytest.Window{{Until: time.Second, Status: 302}}}, "not an error status"},
		{retrytest.Config{Capacity: retrytest.Capacity{Max: -1}}, "Capacity"},
		{retrytest.Config{Flaky: retrytest.Flaky{Reset: 1.5}}, "[0, 1]"},
		{retrytest.Config{Flaky: retrytest.Flaky{Slow: math.NaN()}}, "[0, 1]"},
		{retrytest.Config{Script: []retrytest.Step{{Status: 100}}}, "Script[0]"},
		{retrytest.Config{Script: []retrytest.Step{{Fault: 9}}}, "Fault(9)"},
		{retrytest.Config{ScriptPerRequest: true}, "RequestIDHeader"},
		{retrytest.Config{MaxRecords: -1}, "MaxRecords"},
	} {
		err := tc.cfg.Validate()
		if assert.Error(t, err, tc.want) {
			assert.Contains(t, err.Error(), tc.want)
		}
	}
	assert.PanicsWithError(t, `retrytest: invalid Config: unknown Family "azure"`, func() {
		retrytest.NewServer(retrytest.Config{Family: "azure"})
	})
	assert.Panics(t, func() { retrytest.NewTransport(retrytest.Config{Family: "azure"}) })
}

func TestConfigIsCopied(t *testing.T) {
	steps := retrytest.MustParseScript("503")
	w := []retrytest.Window{{Until: time.Hour, Status: 529}}
	tr := retrytest.NewTransport(retrytest.Config{Script: steps, Overload: w})
	steps[0].Status = 200
	w[0].Status = 503
	assert.Equal(t, 503, do(t, tr, apiURL, "").status)
	assert.Equal(t, 529, do(t, tr, apiURL, "").status)
}

// Many clients at once: every attempt is accounted for exactly once, and
// the race detector sees the shared state.
func TestConcurrentUse(t *testing.T) {
	cfg := retrytest.Config{
		Family:          retrytest.OpenAI,
		RateLimit:       retrytest.RateLimit{Rate: 1000, Burst: 20},
		Capacity:        retrytest.Capacity{Max: 8},
		Flaky:           retrytest.Flaky{Reset: 0.1, Truncate: 0.1},
		Script:          retrytest.MustParseScript("529*5"),
		RequestIDHeader: "X-Req",
	}
	srv := retrytest.NewServer(cfg)
	defer srv.Close()
	for name, rt := range map[string]http.RoundTripper{"server": srv.Client().Transport, "transport": retrytest.NewTransport(cfg)} {
		url := apiURL
		var stats func() retrytest.Stats
		if name == "server" {
			url, stats = srv.URL, srv.Stats
		} else {
			stats = rt.(*retrytest.Transport).Stats
		}
		var wg sync.WaitGroup
		for c := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 10 {
					r, err := try(rt, url, "body", http.Header{"X-Req": {strconv.Itoa(c*10 + i)}})
					if err != nil && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.ErrUnexpectedEOF) {
						t.Errorf("%s: %v", name, err)
					}
					_ = r
				}
			}()
		}
		wg.Wait()
		st := stats()
		total := 0
		for _, n := range st.Statuses {
			total += n
		}
		assert.Equal(t, 160, st.Attempts, name)
		assert.Equal(t, 160, total, "%s: every attempt answered once: %v", name, st.Statuses)
		assert.Equal(t, 5, st.Statuses[529], name)
		assert.Equal(t, 1, st.DistinctBodies(), name)
		assert.Len(t, st.Requests, 160, name)
		assert.LessOrEqual(t, st.PeakInService, 8, name)
		assert.Equal(t, 0, st.InService, name)
	}
}

// The intended use: a retrying client against the fake provider, checked
// through Stats.
func TestWithRetryhttp(t *testing.T) {
	tr := retrytest.NewTransport(retrytest.Config{
		Family: retrytest.Anthropic,
		Script: retrytest.MustParseScript("529, 429, reset, 200"),
	})
	client := &http.Client{Transport: retryhttp.New(tr,
		retryhttp.WithBackoff(time.Millisecond, time.Millisecond), retryhttp.WithJitter(0))}
	resp, err := client.Post(apiURL, "application/json", strings.NewReader(`{"model":"m"}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, 4, retryhttp.Attempts(resp))
	st := tr.Stats()
	assert.Equal(t, 4, st.Attempts)
	assert.Equal(t, 1, st.DistinctBodies(), "every attempt sent the same bytes")
	assert.Equal(t, map[int]int{0: 1, 200: 1, 429: 1, 529: 1}, st.Statuses)
}
