package retrytest_test

import (
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp/retrytest"
)

// TestRounding: the absolute times in headers (Anthropic's RFC 3339 reset,
// GitHub's epoch reset, a Retry-After HTTP-date) are cut to whole seconds
// as Config.Rounding says. The provider starts a fraction of a second past
// t0, so the instants it writes fall between whole seconds.
func TestRounding(t *testing.T) {
	for _, tc := range []struct {
		rounding retrytest.Rounding
		start    time.Duration // the provider's start, past t0
		// The reset and Retry-After one second after the start, in whole
		// seconds past t0.
		want int64
	}{
		{"", 300 * time.Millisecond, 2},
		{retrytest.RoundUp, 300 * time.Millisecond, 2},
		{retrytest.RoundUp, 700 * time.Millisecond, 2},
		{retrytest.RoundUp, 0, 1},
		{retrytest.RoundDown, 300 * time.Millisecond, 1},
		{retrytest.RoundDown, 700 * time.Millisecond, 1},
		{retrytest.RoundDown, 0, 1},
		{retrytest.RoundNearest, 300 * time.Millisecond, 1},
		{retrytest.RoundNearest, 500 * time.Millisecond, 2}, // halves up
		{retrytest.RoundNearest, 700 * time.Millisecond, 2},
		{retrytest.RoundNearest, 0, 1},
	} {
		name := string(tc.rounding) + " at +" + tc.start.String()
		want := t0.Add(time.Duration(tc.want) * time.Second)
		wantDate := want.Format(http.TimeFormat)
		// The reset of a bucket of 1 per second, emptied by the first
		// request, and the second request's Retry-After, are both one
		// second after the start.
		for _, family := range []retrytest.Family{retrytest.Anthropic, retrytest.GitHub} {
			clk := newClock()
			clk.Set(tc.start)
			tr := transport(retrytest.Config{
				Family:     family,
				Rounding:   tc.rounding,
				RetryAfter: retrytest.RetryAfterDate,
				RateLimit:  retrytest.RateLimit{Rate: 1, Burst: 1},
			}, clk)
			ok := do(t, tr, apiURL, "")
			require.Equal(t, 200, ok.status, name)
			r := do(t, tr, apiURL, "")
			require.Contains(t, []int{403, 429}, r.status, name)
			switch family {
			case retrytest.Anthropic:
				assert.Equal(t, want.Format(time.RFC3339), ok.header.Get("Anthropic-Ratelimit-Requests-Reset"), name)
				assert.Equal(t, want.Format(time.RFC3339), r.header.Get("Anthropic-Ratelimit-Requests-Reset"), name)
			case retrytest.GitHub:
				assert.Equal(t, strconv.FormatInt(want.Unix(), 10), ok.header.Get("X-Ratelimit-Reset"), name)
				assert.Equal(t, strconv.FormatInt(want.Unix(), 10), r.header.Get("X-Ratelimit-Reset"), name)
			}
			assert.Equal(t, wantDate, r.header.Get("Retry-After"), "%s %s", family, name)
			// The Date header is truncated whatever the rounding, as
			// net/http writes it.
			assert.Equal(t, t0.Format(http.TimeFormat), r.header.Get("Date"), name)
		}

		// A fixed window's end, GitHub's real reset, is cut the same way:
		// the window of a minute from the start ends at start+60s.
		clk := newClock()
		clk.Set(tc.start)
		tr := transport(retrytest.Config{
			Family:    retrytest.GitHub,
			Rounding:  tc.rounding,
			RateLimit: retrytest.RateLimit{Window: time.Minute, Burst: 10},
		}, clk)
		r := do(t, tr, apiURL, "")
		assert.Equal(t, strconv.FormatInt(want.Unix()+59, 10), r.header.Get("X-Ratelimit-Reset"), "window %s", name)
	}
}

// TestRoundingLeavesRelativeValues: delay-seconds are always rounded up,
// OpenAI's durations are whole milliseconds, whatever the rounding.
func TestRoundingLeavesRelativeValues(t *testing.T) {
	for _, rounding := range []retrytest.Rounding{retrytest.RoundUp, retrytest.RoundDown, retrytest.RoundNearest} {
		clk := newClock()
		clk.Set(300 * time.Millisecond)
		cfg := retrytest.Config{
			Rounding:   rounding,
			RetryAfter: retrytest.RetryAfterMillisAndSeconds,
			RateLimit:  retrytest.RateLimit{Rate: 0.8, Burst: 1},
		}
		cfg.Family = retrytest.OpenAI
		tr := transport(cfg, clk)
		do(t, tr, apiURL, "")
		r := do(t, tr, apiURL, "")
		require.Equal(t, 429, r.status)
		assert.Equal(t, "2", r.header.Get("Retry-After"), "%s: 1.25s rounds up", rounding)
		assert.Equal(t, "1250", r.header.Get("Retry-After-Ms"), rounding)
		assert.Equal(t, "1.25s", r.header.Get("X-Ratelimit-Reset-Requests"), rounding)

		cfg.Family = retrytest.IETF
		tr = transport(cfg, clk)
		r = do(t, tr, apiURL, "")
		assert.Equal(t, `"default";r=0;t=2`, r.header.Get("RateLimit"), "%s: t= rounds up", rounding)
	}
}

// TestClockOffset: the server's clock is ClockOffset ahead of Config.Now;
// every absolute time it writes moves by the offset, relative ones do not,
// and its own limits still run on Config.Now.
func TestClockOffset(t *testing.T) {
	type written struct {
		date, anthropicReset, retryAfterDate, retryAfter, retryAfterMs string
		githubReset, openAIReset, ietf                                 string
	}
	// run sends through each family: one 200 to empty a bucket of one per
	// second, then a 429 half a second later.
	run := func(offset time.Duration) written {
		var w written
		cfg := func(f retrytest.Family, style retrytest.RetryAfterStyle) retrytest.Config {
			return retrytest.Config{
				Family:      f,
				RetryAfter:  style,
				ClockOffset: offset,
				RateLimit:   retrytest.RateLimit{Rate: 1, Burst: 1},
			}
		}
		rejected := func(c retrytest.Config) reply {
			clk := newClock()
			tr := transport(c, clk)
			require.Equal(t, 200, do(t, tr, apiURL, "").status)
			clk.Advance(500 * time.Millisecond)
			r := do(t, tr, apiURL, "")
			require.Contains(t, []int{403, 429}, r.status)
			return r
		}
		r := rejected(cfg(retrytest.Anthropic, retrytest.RetryAfterDate))
		w.date = r.header.Get("Date")
		w.anthropicReset = r.header.Get("Anthropic-Ratelimit-Requests-Reset")
		w.retryAfterDate = r.header.Get("Retry-After")
		r = rejected(cfg(retrytest.GitHub, retrytest.RetryAfterSeconds))
		w.githubReset = r.header.Get("X-Ratelimit-Reset")
		w.retryAfter = r.header.Get("Retry-After")
		r = rejected(cfg(retrytest.OpenAI, retrytest.RetryAfterMillis))
		w.openAIReset = r.header.Get("X-Ratelimit-Reset-Requests")
		w.retryAfterMs = r.header.Get("Retry-After-Ms")
		r = rejected(cfg(retrytest.IETF, retrytest.RetryAfterSeconds))
		w.ietf = r.header.Get("RateLimit")
		return w
	}

	base := run(0)
	assert.Equal(t, written{
		date:           "Mon, 30 Nov 2026 12:00:00 GMT",
		anthropicReset: "2026-11-30T12:00:01Z",
		retryAfterDate: "Mon, 30 Nov 2026 12:00:01 GMT",
		retryAfter:     "1",
		retryAfterMs:   "500",
		githubReset:    "1796040001",
		openAIReset:    "500ms",
		ietf:           `"default";r=0;t=1`,
	}, base)

	for _, offset := range []time.Duration{-3 * time.Second, 90 * time.Second, -time.Hour} {
		at := func(d time.Duration) time.Time { return t0.Add(d + offset) }
		assert.Equal(t, written{
			date:           at(0).Format(http.TimeFormat),
			anthropicReset: at(time.Second).Format(time.RFC3339),
			retryAfterDate: at(time.Second).Format(http.TimeFormat),
			retryAfter:     base.retryAfter,
			retryAfterMs:   base.retryAfterMs,
			githubReset:    strconv.FormatInt(at(time.Second).Unix(), 10),
			openAIReset:    base.openAIReset,
			ietf:           base.ietf,
		}, run(offset), "offset %v", offset)
	}

	// A fractional offset: the server's clock reads 12:00:01.7 when the
	// client's reads 12:00:00.5; the reset and Retry-After, at 12:00:01 by
	// the client's clock, are 12:00:02.2 by the server's and are cut to a
	// whole second on its clock, as the server writes them.
	assert.Equal(t, written{
		date:           "Mon, 30 Nov 2026 12:00:01 GMT",
		anthropicReset: "2026-11-30T12:00:03Z",
		retryAfterDate: "Mon, 30 Nov 2026 12:00:03 GMT",
		retryAfter:     "1",
		retryAfterMs:   "500",
		githubReset:    "1796040003",
		openAIReset:    "500ms",
		ietf:           `"default";r=0;t=1`,
	}, run(1200*time.Millisecond))

	// The provider's own state runs on Config.Now: an offset moves neither
	// its arrivals nor its overload windows.
	clk := newClock()
	tr := transport(retrytest.Config{
		ClockOffset: time.Hour,
		Overload:    []retrytest.Window{{From: time.Second, Until: 2 * time.Second}},
	}, clk)
	assert.Equal(t, 200, do(t, tr, apiURL, "").status)
	clk.Advance(time.Second)
	assert.Equal(t, 503, do(t, tr, apiURL, "").status)
	assert.Equal(t, []time.Duration{0, time.Second}, tr.Stats().Arrivals)
	assert.Equal(t, t0, tr.Start())
}

// TestDateHeader: every answer, whatever decided it, carries exactly one
// Date on the server's clock, over the Server as over the Transport.
func TestDateHeader(t *testing.T) {
	accepted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
	})
	for _, tc := range []struct {
		name      string
		cfg       retrytest.Config
		statuses  []int
		truncated bool
	}{
		{"rate limit", retrytest.Config{Family: retrytest.Anthropic, RateLimit: retrytest.RateLimit{Rate: 1, Burst: 1}}, []int{200, 429}, false},
		{"github window", retrytest.Config{Family: retrytest.GitHub, RateLimit: retrytest.RateLimit{Window: time.Hour, Burst: 1}}, []int{200, 403}, false},
		{"overload", retrytest.Config{Overload: []retrytest.Window{{Until: time.Hour, RetryAfter: time.Second}}}, []int{503}, false},
		{"script", retrytest.Config{Family: retrytest.OpenAI, Script: retrytest.MustParseScript("529, 503@1s, 400, 200, 201")}, []int{529, 503, 400, 200, 201}, false},
		{"success handler", retrytest.Config{Success: accepted}, []int{202}, false},
		{"fuse", retrytest.Config{MaxAttempts: 1}, []int{200, 410}, false},
		{"truncated", retrytest.Config{Flaky: retrytest.Flaky{Truncate: 1}}, []int{200}, true},
	} {
		for _, form := range []string{"server", "transport"} {
			clk := newClock()
			clk.Set(1700 * time.Millisecond)
			cfg := tc.cfg
			cfg.ClockOffset = -3 * time.Second
			cfg.Now = clk.Now
			rt, url := http.RoundTripper(retrytest.NewTransport(cfg)), apiURL
			if form == "server" {
				srv := retrytest.NewServer(cfg)
				defer srv.Close()
				rt, url = srv.Client().Transport, srv.URL
			}
			for i, status := range tc.statuses {
				r, err := try(rt, url, "", nil)
				if tc.truncated {
					require.ErrorIs(t, err, io.ErrUnexpectedEOF, "%s %s", tc.name, form)
				} else {
					require.NoError(t, err, "%s %s", tc.name, form)
				}
				assert.Equal(t, status, r.status, "%s %s #%d", tc.name, form, i)
				// 12:00:01.7 by the client's clock is 11:59:58.7 by the
				// server's, truncated.
				assert.Equal(t, []string{"Mon, 30 Nov 2026 11:59:58 GMT"}, r.header.Values("Date"), "%s %s #%d", tc.name, form, i)
			}
		}
	}

	// A Step's own headers may replace the Date, as they may any header.
	tr := retrytest.NewTransport(retrytest.Config{Script: []retrytest.Step{{Header: http.Header{"Date": {"yesterday"}}}}})
	assert.Equal(t, "yesterday", do(t, tr, apiURL, "").header.Get("Date"))

	// With no clock given, the Date is the real time, as net/http's is.
	before := time.Now().UTC().Truncate(time.Second)
	r := do(t, retrytest.NewTransport(retrytest.Config{}), apiURL, "")
	date, err := http.ParseTime(r.header.Get("Date"))
	require.NoError(t, err)
	assert.False(t, date.Before(before), "%v before %v", date, before)
	assert.False(t, date.After(time.Now()), date)
}

// TestProxyDate: with ProxyDate the Date is the client's time, as a
// proxy's own clock writes it, while the resets stay on the server's.
func TestProxyDate(t *testing.T) {
	offset := 5 * time.Second
	clk := newClock()
	tr := transport(retrytest.Config{
		Family: retrytest.Anthropic, ClockOffset: offset, ProxyDate: true,
		RateLimit: retrytest.RateLimit{Rate: 1, Burst: 1},
	}, clk)
	r := do(t, tr, apiURL, "")
	require.Equal(t, 200, r.status)
	assert.Equal(t, t0.Format(http.TimeFormat), r.header.Get("Date"), "the proxy's clock")
	assert.Equal(t, t0.Add(offset+time.Second).Format(time.RFC3339), r.header.Get("Anthropic-Ratelimit-Requests-Reset"), "the server's")
}
