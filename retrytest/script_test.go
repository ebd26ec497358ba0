package retrytest_test

import (
	"errors"
	"io"
	"net/http"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp/retrytest"
)

func TestParseScript(t *testing.T) {
	steps, err := retrytest.ParseScript(" 429@2s , 529*2, 400:invalid_request_error, reset~5ms, truncate, 200~100ms, 503:x.y-z truncate@1m0s~1s*1")
	require.NoError(t, err)
	assert.Equal(t, []retrytest.Step{
		{Status: 429, RetryAfter: 2 * time.Second},
		{Status: 529},
		{Status: 529},
		{Status: 400, ErrorType: "invalid_request_error"},
		{Fault: retrytest.FaultReset, Delay: 5 * time.Millisecond},
		{Status: 200, Fault: retrytest.FaultTruncate},
		{Status: 200, Delay: 100 * time.Millisecond},
		{Status: 503, ErrorType: "x.y-z", Fault: retrytest.FaultTruncate, RetryAfter: time.Minute, Delay: time.Second},
	}, steps)
	assert.Equal(t, "429@2s, 529, 529, 400:invalid_request_error, reset~5ms, truncate, 200~100ms, 503:x.y-z truncate@1m0s~1s",
		retrytest.FormatScript(steps))

	steps, err = retrytest.ParseScript("  ")
	assert.NoError(t, err)
	assert.Empty(t, steps)
	assert.Equal(t, "200", retrytest.Step{}.String())
	assert.Equal(t, "429", retrytest.Step{Status: 429, Header: http.Header{"X": {"y"}}, Body: "b"}.String())
}

func TestParseScriptErrors(t *testing.T) {
	for _, s := range []string{
		"429,", ",", "abc", "100", "600", "0429", "+429", "429*0", "429*10001", "429*x",
		"429@-1s", "429@1", "429~x", "reset@1s", "429:", "429:a b", "429:a\"b",
		"truncate:x", "429*2@1s", "429~1s@1s", "200 truncated", "4 29",
		"200*10000,200*10000,200*10000,200*10000,200*10000,200*10000,200*10000,200*10000,200*10000,200*10000,200",
	} {
		_, err := retrytest.ParseScript(s)
		assert.Error(t, err, "%q", s)
	}
	assert.Panics(t, func() { retrytest.MustParseScript("nope") })
}

func TestScriptThenNormalBehaviour(t *testing.T) {
	tr := retrytest.NewTransport(retrytest.Config{
		Family: retrytest.Anthropic,
		Script: retrytest.MustParseScript("429@2s, 529, 400:invalid_request_error, reset, truncate, 201, 200"),
		Flaky:  retrytest.Flaky{Reset: 1}, // does not touch scripted steps
	})
	r := do(t, tr, apiURL, "")
	assert.Equal(t, 429, r.status)
	assert.Equal(t, "2", r.header.Get("Retry-After"))
	assert.Equal(t, "rate_limit_error", jsonField(t, r.body, "error", "type"))
	assert.Empty(t, r.header.Get("Anthropic-Ratelimit-Requests-Remaining"), "a scripted step carries only what it says")

	r = do(t, tr, apiURL, "")
	assert.Equal(t, 529, r.status)
	assert.Empty(t, r.header.Get("Retry-After"))
	assert.Equal(t, "overloaded_error", jsonField(t, r.body, "error", "type"))
	assert.Equal(t, "req_retrytest_2", r.header.Get("Request-Id"))

	r = do(t, tr, apiURL, "")
	assert.Equal(t, 400, r.status)
	assert.Equal(t, "invalid_request_error", jsonField(t, r.body, "error", "type"))

	_, err := try(tr, apiURL, "", nil)
	assert.ErrorIs(t, err, syscall.ECONNRESET)

	_, err = try(tr, apiURL, "", nil)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)

	r = do(t, tr, apiURL, "")
	assert.Equal(t, 201, r.status)
	assert.Empty(t, r.body)

	r = do(t, tr, apiURL, "")
	assert.Equal(t, 200, r.status)
	assert.Equal(t, "message", jsonField(t, r.body, "type"))

	// The script is used up: the Config's own behaviour (every request
	// reset) takes over.
	_, err = try(tr, apiURL, "", nil)
	assert.ErrorIs(t, err, syscall.ECONNRESET)

	st := tr.Stats()
	assert.Equal(t, 8, st.Attempts)
	assert.Equal(t, map[int]int{0: 2, 200: 2, 201: 1, 400: 1, 429: 1, 529: 1}, st.Statuses)
	assert.Equal(t, 2, st.Resets)
	assert.Equal(t, 1, st.Truncated)
}

func TestScriptStepHeaderAndBody(t *testing.T) {
	tr := retrytest.NewTransport(retrytest.Config{
		Family:     retrytest.OpenAI,
		RetryAfter: retrytest.RetryAfterMillis,
		Script: []retrytest.Step{
			{Status: 429, RetryAfter: 1500 * time.Millisecond, Header: http.Header{"X-Should-Retry": {"false"}, "X-Request-Id": {"mine"}}},
			{Status: 503, Body: "upstream connect error"},
			{Status: 200, Body: `{"custom":true}`},
		},
	})
	r := do(t, tr, apiURL, "")
	assert.Equal(t, 429, r.status)
	assert.Equal(t, "1500", r.header.Get("Retry-After-Ms"))
	assert.Equal(t, "false", r.header.Get("X-Should-Retry"))
	assert.Equal(t, "mine", r.header.Get("X-Request-Id"), "the step's headers win")
	assert.Equal(t, "rate_limit_exceeded", jsonField(t, r.body, "error", "code"))

	r = do(t, tr, apiURL, "")
	assert.Equal(t, "upstream connect error", r.body)
	assert.Equal(t, "text/plain; charset=utf-8", r.header.Get("Content-Type"))

	r = do(t, tr, apiURL, "")
	assert.Equal(t, `{"custom":true}`, r.body)
	assert.Equal(t, "application/json", r.header.Get("Content-Type"))
}

func TestScriptPerRequest(t *testing.T) {
	srv := retrytest.NewServer(retrytest.Config{
		Script:           retrytest.MustParseScript("503, 200"),
		ScriptPerRequest: true,
		RequestIDHeader:  "X-Test-Request",
	})
	defer srv.Close()
	rt := srv.Client().Transport
	send := func(id string) int {
		var h http.Header
		if id != "" {
			h = http.Header{"X-Test-Request": {id}}
		}
		r, err := try(rt, srv.URL, "", h)
		require.NoError(t, err)
		return r.status
	}
	// Interleaved logical requests each get the whole script.
	assert.Equal(t, 503, send("a"))
	assert.Equal(t, 503, send("b"))
	assert.Equal(t, 200, send("a"))
	assert.Equal(t, 200, send("b"))
	assert.Equal(t, 200, send("a"), "past the script")
	// Requests without an id share one run.
	assert.Equal(t, 503, send(""))
	assert.Equal(t, 200, send(""))

	st := srv.Stats()
	assert.Equal(t, map[string]retrytest.RequestStats{
		"a": {Attempts: 3, Statuses: []int{503, 200, 200}},
		"b": {Attempts: 2, Statuses: []int{503, 200}},
	}, st.Requests)
}

func TestScriptDelay(t *testing.T) {
	tr := retrytest.NewTransport(retrytest.Config{Script: retrytest.MustParseScript("200~20ms")})
	start := time.Now()
	assert.Equal(t, 200, do(t, tr, apiURL, "").status)
	assert.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
	assert.Equal(t, 1, tr.Stats().Slowed)
}

func FuzzParseScript(f *testing.F) {
	for _, s := range []string{
		"429, 529, 200", "429@2s*3, reset~1ms, truncate", "400:invalid_request_error",
		"503:a truncate@1m~2s*2", "", "429,", "reset@1s", "200*10000",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		steps, err := retrytest.ParseScript(s)
		if err != nil {
			if steps != nil {
				t.Fatalf("%q: steps %v with error %v", s, steps, err)
			}
			return
		}
		// What parses formats back to the same script.
		text := retrytest.FormatScript(steps)
		again, err := retrytest.ParseScript(text)
		if err != nil {
			t.Fatalf("%q formats as %q, which does not parse: %v", s, text, err)
		}
		if !reflect.DeepEqual(steps, again) {
			t.Fatalf("%q: %+v, formatted as %q: %+v", s, steps, text, again)
		}
		// And every parsed script is a valid Config.
		if err := (retrytest.Config{Script: steps}).Validate(); err != nil {
			t.Fatalf("%q: %v", s, errors.Unwrap(err))
		}
	})
}
