package retrytest_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp/retrytest"
)

// headers picks the named headers out of h, "" for absent ones.
func headers(h http.Header, names ...string) map[string]string {
	m := make(map[string]string, len(names))
	for _, n := range names {
		m[n] = h.Get(n)
	}
	return m
}

func TestZeroConfigAnswers200(t *testing.T) {
	tr := retrytest.NewTransport(retrytest.Config{})
	for i := range 3 {
		r := do(t, tr, apiURL, "x")
		assert.Equal(t, 200, r.status)
		assert.JSONEq(t, `{"ok":true,"id":`+strconv.Itoa(i+1)+`}`, r.body)
		assert.Empty(t, r.header.Get("Retry-After"))
		assert.Empty(t, r.header.Get("RateLimit"))
	}
	assert.Equal(t, map[int]int{200: 3}, tr.Stats().Statuses)
}

func TestAnthropicRateLimitHeaders(t *testing.T) {
	clk := newClock()
	tr := transport(retrytest.Config{
		Family:    retrytest.Anthropic,
		RateLimit: retrytest.RateLimit{Rate: 1, Burst: 2},
	}, clk)
	names := []string{
		"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining",
		"Anthropic-Ratelimit-Requests-Reset", "Retry-After", "Request-Id",
	}

	r := do(t, tr, apiURL, "a")
	require.Equal(t, 200, r.status)
	assert.Equal(t, map[string]string{
		"Anthropic-Ratelimit-Requests-Limit":     "2",
		"Anthropic-Ratelimit-Requests-Remaining": "1",
		"Anthropic-Ratelimit-Requests-Reset":     "2026-11-30T12:00:01Z",
		"Retry-After":                            "",
		"Request-Id":                             "req_retrytest_1",
	}, headers(r.header, names...))
	assert.Equal(t, "message", jsonField(t, r.body, "type"))

	r = do(t, tr, apiURL, "a")
	require.Equal(t, 200, r.status)
	assert.Equal(t, "0", r.header.Get("Anthropic-Ratelimit-Requests-Remaining"))
	assert.Equal(t, "2026-11-30T12:00:02Z", r.header.Get("Anthropic-Ratelimit-Requests-Reset"))

	r = do(t, tr, apiURL, "a")
	require.Equal(t, 429, r.status)
	assert.Equal(t, map[string]string{
		"Anthropic-Ratelimit-Requests-Limit":     "2",
		"Anthropic-Ratelimit-Requests-Remaining": "0",
		"Anthropic-Ratelimit-Requests-Reset":     "2026-11-30T12:00:02Z",
		"Retry-After":                            "1",
		"Request-Id":                             "req_retrytest_3",
	}, headers(r.header, names...))
	assert.Equal(t, "application/json", r.header.Get("Content-Type"))
	assert.Equal(t, "error", jsonField(t, r.body, "type"))
	assert.Equal(t, "rate_limit_error", jsonField(t, r.body, "error", "type"))
	assert.Equal(t, "req_retrytest_3", jsonField(t, r.body, "request_id"))

	// Half a token later: still short, and the wait is the other half,
	// rounded up to a whole second in the header.
	clk.Advance(500 * time.Millisecond)
	r = do(t, tr, apiURL, "a")
	require.Equal(t, 429, r.status)
	assert.Equal(t, "1", r.header.Get("Retry-After"))
	assert.Equal(t, "2026-11-30T12:00:02Z", r.header.Get("Anthropic-Ratelimit-Requests-Reset"))

	clk.Advance(500 * time.Millisecond)
	r = do(t, tr, apiURL, "a")
	assert.Equal(t, 200, r.status, "a rejected request takes no token")
	assert.Equal(t, map[int]int{200: 3, 429: 2}, tr.Stats().Statuses)
}

func TestAnthropicTokenHeaders(t *testing.T) {
	clk := newClock()
	tr := transport(retrytest.Config{
		Family: retrytest.Anthropic,
		RateLimit: retrytest.RateLimit{
			Rate: 10, Burst: 10, TokenRate: 100, TokenBurst: 100,
		},
	}, clk)
	r := do(t, tr, apiURL, strings.Repeat("x", 200)) // 50 tokens
	require.Equal(t, 200, r.status)
	for _, p := range []string{"Anthropic-Ratelimit-Tokens-", "Anthropic-Ratelimit-Input-Tokens-"} {
		assert.Equal(t, "100", r.header.Get(p+"Limit"), p)
		assert.Equal(t, "50", r.header.Get(p+"Remaining"), p)
		assert.Equal(t, "2026-11-30T12:00:01Z", r.header.Get(p+"Reset"), p)
	}
	assert.Equal(t, "9", r.header.Get("Anthropic-Ratelimit-Requests-Remaining"))

	r = do(t, tr, apiURL, strings.Repeat("x", 240)) // 60 tokens > 50 left
	require.Equal(t, 429, r.status)
	assert.Equal(t, "50", r.header.Get("Anthropic-Ratelimit-Tokens-Remaining"))
	assert.Equal(t, "1", r.header.Get("Retry-After"), "10 tokens come in 100ms")
	assert.Contains(t, jsonField(t, r.body, "error", "message"), "100 tokens")
}

func TestOpenAIRateLimitHeaders(t *testing.T) {
	clk := newClock()
	tr := transport(retrytest.Config{
		Family:     retrytest.OpenAI,
		RetryAfter: retrytest.RetryAfterMillisAndSeconds,
		RateLimit: retrytest.RateLimit{
			Rate: 10, Burst: 2, TokenRate: 100, TokenBurst: 1000,
		},
	}, clk)
	names := []string{
		"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests",
		"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens",
		"Retry-After", "Retry-After-Ms", "X-Request-Id",
	}
	r := do(t, tr, apiURL, strings.Repeat("x", 40)) // 10 tokens
	require.Equal(t, 200, r.status)
	assert.Equal(t, map[string]string{
		"X-Ratelimit-Limit-Requests":     "2",
		"X-Ratelimit-Remaining-Requests": "1",
		"X-Ratelimit-Reset-Requests":     "100ms",
		"X-Ratelimit-Limit-Tokens":       "1000",
		"X-Ratelimit-Remaining-Tokens":   "990",
		"X-Ratelimit-Reset-Tokens":       "100ms",
		"Retry-After":                    "",
		"Retry-After-Ms":                 "",
		"X-Request-Id":                   "req_retrytest_1",
	}, headers(r.header, names...))
	assert.Equal(t, "chat.completion", jsonField(t, r.body, "object"))

	do(t, tr, apiURL, strings.Repeat("x", 40))
	clk.Advance(30 * time.Millisecond)
	r = do(t, tr, apiURL, strings.Repeat("x", 40))
	require.Equal(t, 429, r.status)
	assert.Equal(t, map[string]string{
		"X-Ratelimit-Limit-Requests":     "2",
		"X-Ratelimit-Remaining-Requests": "0",
		// 0.3 of 2 tokens back: 170ms until full, 70ms until one.
		"X-Ratelimit-Reset-Requests":   "170ms",
		"X-Ratelimit-Limit-Tokens":     "1000",
		"X-Ratelimit-Remaining-Tokens": "983",
		"X-Ratelimit-Reset-Tokens":     "170ms",
		"Retry-After":                  "1",
		"Retry-After-Ms":               "70",
		"X-Request-Id":                 "req_retrytest_3",
	}, headers(r.header, names...))
	assert.Equal(t, "rate_limit_exceeded", jsonField(t, r.body, "error", "code"))
	assert.Equal(t, "requests", jsonField(t, r.body, "error", "type"))
	assert.Equal(t, "null", jsonField(t, r.body, "error", "param"))
}

func TestGitHubRateLimitIs403(t *testing.T) {
	clk := newClock()
	tr := transport(retrytest.Config{
		Family:     retrytest.GitHub,
		RetryAfter: retrytest.RetryAfterNone,
		RateLimit:  retrytest.RateLimit{Rate: 1, Burst: 3},
	}, clk)
	names := []string{
		"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset",
		"X-Ratelimit-Used", "X-Ratelimit-Resource", "Retry-After",
	}
	r := do(t, tr, apiURL, "")
	require.Equal(t, 200, r.status)
	assert.Equal(t, map[string]string{
		"X-Ratelimit-Limit":     "3",
		"X-Ratelimit-Remaining": "2",
		"X-Ratelimit-Reset":     "1796040001",
		"X-Ratelimit-Used":      "1",
		"X-Ratelimit-Resource":  "core",
		"Retry-After":           "",
	}, headers(r.header, names...))
	do(t, tr, apiURL, "")
	do(t, tr, apiURL, "")
	r = do(t, tr, apiURL, "")
	require.Equal(t, 403, r.status)
	assert.Equal(t, map[string]string{
		"X-Ratelimit-Limit":     "3",
		"X-Ratelimit-Remaining": "0",
		"X-Ratelimit-Reset":     "1796040003",
		"X-Ratelimit-Used":      "3",
		"X-Ratelimit-Resource":  "core",
		"Retry-After":           "",
	}, headers(r.header, names...))
	assert.Contains(t, jsonField(t, r.body, "message"), "API rate limit exceeded")
	assert.Contains(t, jsonField(t, r.body, "documentation_url"), "rate-limits")
	assert.NotEmpty(t, r.header.Get("X-Github-Request-Id"))

	// The other form GitHub documents.
	tr = transport(retrytest.Config{
		Family:    retrytest.GitHub,
		RateLimit: retrytest.RateLimit{Rate: 1, Burst: 1, Status: 429},
	}, newClock())
	do(t, tr, apiURL, "")
	assert.Equal(t, 429, do(t, tr, apiURL, "").status)
}

func TestIETFRateLimitHeaders(t *testing.T) {
	for _, tc := range []struct {
		rate   float64
		burst  int
		rl     string
		policy string
	}{
		{2, 4, `"default";r=3;t=1`, `"default";q=2;w=1`},
		{0.5, 1, `"default";r=0;t=2`, `"default";q=30;w=60`},
		{1.0 / 7, 1, `"default";r=0;t=7`, `"default";q=514;w=3600`},
	} {
		tr := transport(retrytest.Config{
			Family:    retrytest.IETF,
			RateLimit: retrytest.RateLimit{Rate: tc.rate, Burst: tc.burst},
		}, newClock())
		r := do(t, tr, apiURL, "")
		require.Equal(t, 200, r.status)
		assert.Equal(t, tc.rl, r.header.Get("RateLimit"), "rate %v", tc.rate)
		assert.Equal(t, tc.policy, r.header.Get("RateLimit-Policy"), "rate %v", tc.rate)
	}

	tr := transport(retrytest.Config{
		Family:    retrytest.IETF,
		RateLimit: retrytest.RateLimit{Rate: 1, Burst: 1},
	}, newClock())
	do(t, tr, apiURL, "")
	r := do(t, tr, apiURL, "")
	require.Equal(t, 429, r.status)
	assert.Equal(t, `"default";r=0;t=1`, r.header.Get("RateLimit"))
	assert.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
	assert.JSONEq(t, `{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"Request quota exhausted; see RateLimit and Retry-After."}`, r.body)
}

func TestRetryAfterStyles(t *testing.T) {
	for _, tc := range []struct {
		style       retrytest.RetryAfterStyle
		retryAfter  string
		retryAfterM string
	}{
		{"", "2", ""},
		{retrytest.RetryAfterSeconds, "2", ""},
		{retrytest.RetryAfterDate, "Mon, 30 Nov 2026 12:00:02 GMT", ""},
		{retrytest.RetryAfterMillis, "", "1500"},
		{retrytest.RetryAfterMillisAndSeconds, "2", "1500"},
		{retrytest.RetryAfterNone, "", ""},
	} {
		clk := newClock()
		tr := transport(retrytest.Config{
			RetryAfter: tc.style,
			RateLimit:  retrytest.RateLimit{Rate: 0.5, Burst: 1},
		}, clk)
		do(t, tr, apiURL, "")
		// A quarter of the way to the next token: 1.5s to wait, which is
		// 2 whole seconds rounded up, or the date 12:00:02.
		clk.Advance(500 * time.Millisecond)
		r := do(t, tr, apiURL, "")
		require.Equal(t, 429, r.status, tc.style)
		assert.Equal(t, tc.retryAfter, r.header.Get("Retry-After"), "style %q", tc.style)
		assert.Equal(t, tc.retryAfterM, r.header.Get("Retry-After-Ms"), "style %q", tc.style)
	}
}

// TestGitHubFixedWindow: GitHub's real limit, a fixed window. Each window
// admits Burst requests, what one leaves over is lost, and the reset is the
// window's end.
func TestGitHubFixedWindow(t *testing.T) {
	clk := newClock()
	tr := transport(retrytest.Config{
		Family:    retrytest.GitHub,
		RateLimit: retrytest.RateLimit{Window: time.Hour, Burst: 3},
	}, clk)
	names := []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "X-Ratelimit-Used", "Retry-After"}
	const firstEnd = "1796043600" // t0 + 1h
	for _, tc := range []struct {
		at     time.Duration
		status int
		want   map[string]string
	}{
		{0, 200, map[string]string{"X-Ratelimit-Limit": "3", "X-Ratelimit-Remaining": "2", "X-Ratelimit-Reset": firstEnd, "X-Ratelimit-Used": "1", "Retry-After": ""}},
		{10 * time.Minute, 200, map[string]string{"X-Ratelimit-Limit": "3", "X-Ratelimit-Remaining": "1", "X-Ratelimit-Reset": firstEnd, "X-Ratelimit-Used": "2", "Retry-After": ""}},
		{20 * time.Minute, 200, map[string]string{"X-Ratelimit-Limit": "3", "X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": firstEnd, "X-Ratelimit-Used": "3", "Retry-After": ""}},
		// Nothing refills within the window: the wait is to its end.
		{30 * time.Minute, 403, map[string]string{"X-Ratelimit-Limit": "3", "X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": firstEnd, "X-Ratelimit-Used": "3", "Retry-After": "1800"}},
		{time.Hour - time.Millisecond, 403, map[string]string{"X-Ratelimit-Limit": "3", "X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": firstEnd, "X-Ratelimit-Used": "3", "Retry-After": "1"}},
		// The next window starts afresh at its first instant.
		{time.Hour, 200, map[string]string{"X-Ratelimit-Limit": "3", "X-Ratelimit-Remaining": "2", "X-Ratelimit-Reset": "1796047200", "X-Ratelimit-Used": "1", "Retry-After": ""}},
		// Its unused requests are not carried over; windows nobody used
		// are skipped.
		{5*time.Hour + 30*time.Minute, 200, map[string]string{"X-Ratelimit-Limit": "3", "X-Ratelimit-Remaining": "2", "X-Ratelimit-Reset": "1796061600", "X-Ratelimit-Used": "1", "Retry-After": ""}},
	} {
		clk.Set(tc.at)
		r := do(t, tr, apiURL, "")
		assert.Equal(t, tc.status, r.status, "at %v", tc.at)
		assert.Equal(t, tc.want, headers(r.header, names...), "at %v", tc.at)
		if tc.status == 403 {
			assert.Contains(t, jsonField(t, r.body, "message"), "API rate limit exceeded")
		}
	}
	assert.Equal(t, map[int]int{200: 5, 403: 2}, tr.Stats().Statuses)
}

// TestFixedWindowEveryFamily: every family reports a fixed window: the
// quota left in it and the time until it ends.
func TestFixedWindowEveryFamily(t *testing.T) {
	rl := retrytest.RateLimit{Window: time.Minute, Burst: 2}
	send := func(f retrytest.Family, style retrytest.RetryAfterStyle) (first, rejected reply) {
		clk := newClock()
		tr := transport(retrytest.Config{Family: f, RetryAfter: style, RateLimit: rl}, clk)
		clk.Set(15 * time.Second)
		first = do(t, tr, apiURL, "")
		require.Equal(t, 200, first.status, f)
		do(t, tr, apiURL, "")
		clk.Set(40*time.Second + 500*time.Millisecond)
		rejected = do(t, tr, apiURL, "")
		return first, rejected
	}

	first, r := send(retrytest.Anthropic, retrytest.RetryAfterDate)
	assert.Equal(t, "1", first.header.Get("Anthropic-Ratelimit-Requests-Remaining"))
	assert.Equal(t, "2026-11-30T12:01:00Z", first.header.Get("Anthropic-Ratelimit-Requests-Reset"))
	assert.Equal(t, 429, r.status)
	assert.Equal(t, "0", r.header.Get("Anthropic-Ratelimit-Requests-Remaining"))
	assert.Equal(t, "2026-11-30T12:01:00Z", r.header.Get("Anthropic-Ratelimit-Requests-Reset"))
	assert.Equal(t, "Mon, 30 Nov 2026 12:01:00 GMT", r.header.Get("Retry-After"), "until the window's end")

	first, r = send(retrytest.OpenAI, retrytest.RetryAfterMillisAndSeconds)
	assert.Equal(t, "2", first.header.Get("X-Ratelimit-Limit-Requests"))
	assert.Equal(t, "1", first.header.Get("X-Ratelimit-Remaining-Requests"))
	assert.Equal(t, "45s", first.header.Get("X-Ratelimit-Reset-Requests"))
	assert.Equal(t, 429, r.status)
	assert.Equal(t, "19.5s", r.header.Get("X-Ratelimit-Reset-Requests"))
	assert.Equal(t, "19500", r.header.Get("Retry-After-Ms"))
	assert.Equal(t, "20", r.header.Get("Retry-After"))

	first, r = send(retrytest.IETF, retrytest.RetryAfterSeconds)
	assert.Equal(t, `"default";r=1;t=45`, first.header.Get("RateLimit"))
	assert.Equal(t, `"default";q=2;w=60`, first.header.Get("RateLimit-Policy"))
	assert.Equal(t, 429, r.status)
	assert.Equal(t, `"default";r=0;t=20`, r.header.Get("RateLimit"))
	assert.Equal(t, "20", r.header.Get("Retry-After"))

	_, r = send(retrytest.Plain, retrytest.RetryAfterSeconds)
	assert.Equal(t, 429, r.status)
	assert.Equal(t, "20", r.header.Get("Retry-After"))
}

// TestFixedWindowDefaultsAndTokens: Burst defaults to Rate*Window, and a
// token limit counts per window too.
func TestFixedWindowDefaultsAndTokens(t *testing.T) {
	tr := transport(retrytest.Config{
		Family:    retrytest.OpenAI,
		RateLimit: retrytest.RateLimit{Window: time.Minute, Rate: 0.5},
	}, newClock())
	assert.Equal(t, "30", do(t, tr, apiURL, "").header.Get("X-Ratelimit-Limit-Requests"), "0.5/s for a minute")

	clk := newClock()
	tr = transport(retrytest.Config{
		Family:    retrytest.Anthropic,
		RateLimit: retrytest.RateLimit{Window: time.Minute, Burst: 10, TokenBurst: 100},
	}, clk)
	r := do(t, tr, apiURL, strings.Repeat("x", 240)) // 60 tokens
	require.Equal(t, 200, r.status)
	for _, p := range []string{"Anthropic-Ratelimit-Tokens-", "Anthropic-Ratelimit-Input-Tokens-"} {
		assert.Equal(t, "100", r.header.Get(p+"Limit"), p)
		assert.Equal(t, "40", r.header.Get(p+"Remaining"), p)
		assert.Equal(t, "2026-11-30T12:01:00Z", r.header.Get(p+"Reset"), p)
	}
	clk.Set(30 * time.Second)
	r = do(t, tr, apiURL, strings.Repeat("x", 240))
	require.Equal(t, 429, r.status, "60 tokens, 40 left")
	assert.Equal(t, "9", r.header.Get("Anthropic-Ratelimit-Requests-Remaining"), "a rejection takes nothing")
	assert.Equal(t, "30", r.header.Get("Retry-After"))
	assert.Contains(t, jsonField(t, r.body, "error", "message"), "100 tokens")
	assert.Equal(t, 200, do(t, tr, apiURL, strings.Repeat("x", 160)).status, "40 tokens fit")
	clk.Set(time.Minute)
	r = do(t, tr, apiURL, strings.Repeat("x", 240))
	assert.Equal(t, 200, r.status)
	assert.Equal(t, "40", r.header.Get("Anthropic-Ratelimit-Tokens-Remaining"))
}

// TestPlainSendsNoRateLimitHeaders: the "no headers at all" world. A Plain
// provider limits without saying so: its answers carry no rate-limit state,
// its 429 only the Retry-After of the style, and with RetryAfterNone
// nothing but the status.
func TestPlainSendsNoRateLimitHeaders(t *testing.T) {
	for _, tc := range []struct {
		style retrytest.RetryAfterStyle
		rl    retrytest.RateLimit
		extra []string // headers a 429 has beyond the bare ones
	}{
		{retrytest.RetryAfterSeconds, retrytest.RateLimit{Rate: 1, Burst: 1}, []string{"Retry-After"}},
		{retrytest.RetryAfterMillis, retrytest.RateLimit{Rate: 1, Burst: 1}, []string{"Retry-After-Ms"}},
		{retrytest.RetryAfterNone, retrytest.RateLimit{Rate: 1, Burst: 1}, nil},
		{retrytest.RetryAfterNone, retrytest.RateLimit{Rate: 1, Burst: 1, TokenRate: 100}, nil},
		{retrytest.RetryAfterNone, retrytest.RateLimit{Window: time.Minute, Burst: 1}, nil},
	} {
		cfg := retrytest.Config{RetryAfter: tc.style, RateLimit: tc.rl}
		srv := retrytest.NewServer(cfg)
		for form, rt := range map[string]http.RoundTripper{"server": srv.Client().Transport, "transport": retrytest.NewTransport(cfg)} {
			url := apiURL
			if form == "server" {
				url = srv.URL
			}
			bare := []string{"Content-Length", "Content-Type", "Date"}
			r := do(t, rt, url, "")
			require.Equal(t, 200, r.status)
			assert.ElementsMatch(t, bare, keys(r.header), "%s %s 200", form, tc.style)
			r = do(t, rt, url, "")
			require.Equal(t, 429, r.status)
			assert.ElementsMatch(t, append(bare, tc.extra...), keys(r.header), "%s %s 429", form, tc.style)
			assert.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
		}
		srv.Close()
	}
}

// keys lists the names of the headers in h.
func keys(h http.Header) []string {
	var names []string
	for k := range h {
		names = append(names, k)
	}
	return names
}
