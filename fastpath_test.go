package retryhttp

import (
	"context"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scanHeader stands in for three readings of a response's header on the
// hot path: it must agree with each of them on every header, the small
// ones it accounts for by lookups included.
func TestScanHeaderAgreesWithTheReadingsItReplaces(t *testing.T) {
	headers := []http.Header{
		{},
		{"Content-Type": {"application/json"}},
		{"Content-Length": {"11"}},
		{"Date": {"Mon, 01 Dec 2026 12:00:00 GMT"}},
		{"Content-Type": {"application/json"}, "Content-Length": {"11"}},
		{"Content-Type": {"application/json"}, "Content-Length": {"11"}, "Date": {"x"}},
		// Small, but with a key the lookups do not account for.
		{"Content-Type": {"application/json"}, "X-Ratelimit-Remaining": {"0"}},
		{"X-Ratelimit-Remaining": {"0"}},
		{"Ratelimit": {`"default";r=0;t=1`}},
		{"Anthropic-Ratelimit-Requests-Remaining": {"3"}},
		{"X-Rate-Limit-Remaining": {"3"}, "Date": {"x"}},
		{"X-Should-Retry": {"true"}},
		{"Content-Type": {"text/plain"}, "X-Should-Retry": {"false"}, "Content-Length": {"1"}},
		{"Content-Type": {"text/event-stream"}, "Date": {"x"}, "Content-Length": {"1"}, "Server": {"s"}},
		// Non-canonical keys are invisible to Get, and so to scanHeader.
		{"x-should-retry": {"true"}, "content-type": {"text/event-stream"}, "x-ratelimit-remaining": {"0"}},
		// Large: iterated.
		{"Content-Type": {"application/json"}, "Content-Length": {"1"}, "Date": {"x"}, "Server": {"s"}, "Vary": {"v"}, "X-Request-Id": {"r"}},
		{"Content-Type": {"application/json"}, "Content-Length": {"1"}, "Date": {"x"}, "Server": {"s"}, "Vary": {"v"}, "X-Ratelimit-Limit": {"9"}},
	}
	for _, h := range headers {
		s := scanHeader(h)
		if s.rateLimit != hasRateLimitKey(h) {
			t.Errorf("%v: rateLimit %v, hasRateLimitKey %v", h, s.rateLimit, hasRateLimitKey(h))
		}
		if _, ok := h["X-Should-Retry"]; s.shouldRetry != ok {
			t.Errorf("%v: shouldRetry %v, key present %v", h, s.shouldRetry, ok)
		}
		if got, want := strings.Join(s.contentType, ","), strings.Join(h.Values("Content-Type"), ","); got != want {
			t.Errorf("%v: contentType %q, want %q", h, got, want)
		}
	}
}

// mayBeEventStream is a necessary condition: it must never be false where
// isEventStream is true, whatever white space leads the media type.
func TestMayBeEventStreamNeverHidesAStream(t *testing.T) {
	for _, ct := range []string{
		"text/event-stream", "TEXT/Event-Stream", " \t text/event-stream; charset=utf-8",
		"\u00a0text/event-stream", "\u0085text/event-stream", "\ftext/event-stream",
		"application/json", "", " ", "application/x-ndjson", "tex", "\u00a0application/json",
	} {
		resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(strings.NewReader("x"))}
		s := scanHeader(resp.Header)
		if isEventStream(resp) && !s.mayBeEventStream() {
			t.Errorf("Content-Type %q: an event stream, but mayBeEventStream says it cannot be", ct)
		}
		if strings.HasPrefix(ct, "application/") && s.mayBeEventStream() {
			t.Errorf("Content-Type %q: mayBeEventStream should rule it out", ct)
		}
	}
}

// validateRequest checks a small header by lookups when its keys are all
// common ones: every value is still checked, and a key outside the common
// ones still sends it to the full pass.
func TestValidateRequestSmallHeaders(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header http.Header
		bad    string // "" when valid
	}{
		{"common keys", http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer x"}}, ""},
		{"bad value of a common key", http.Header{"Content-Type": {"a\nb"}}, `invalid value for header field "Content-Type"`},
		{"bad second value", http.Header{"Accept": {"a", "b\x00"}}, `invalid value for header field "Accept"`},
		{"common key and a bad name", http.Header{"Content-Type": {"a"}, "Bad Name": {"v"}}, `invalid header field name "Bad Name"`},
		{"common key and a bad value elsewhere", http.Header{"Accept": {"a"}, "X-A": {"\r"}}, `invalid value for header field "X-A"`},
		{"non-canonical common key", http.Header{"content-type": {"a\nb"}}, `invalid value for header field "content-type"`},
	} {
		req, _ := http.NewRequest(http.MethodPost, "https://api.test/v1", nil)
		req.Header = tc.header
		err := validateRequest(req, "")
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%s: got %v, want an error saying %s", tc.name, err, tc.bad)
		}
	}
}

// A first attempt admitted at once is counted as a request and an attempt
// by one add (counters.quick): Stats and the retry budget must see both,
// as they do for a request that waited or was retried.
func TestStatsCountQuickFirstAttempts(t *testing.T) {
	up := &switchable{downFor: 4} // 503 for attempts 1 to 4, then 200
	up.up.Store(true)
	rt := New(up, WithClock(autoClock()), WithJitter(0),
		WithCircuitBreaker(CircuitBreaker{Disabled: true}))
	for i := 0; i < 3; i++ {
		_, err := getWith(t, rt, context.Background())
		require.NoError(t, err)
	}
	s := rt.Stats()[0]
	assert.EqualValues(t, 3, s.Requests, "three plain requests")
	assert.EqualValues(t, 3, s.Attempts, "one attempt each")
	assert.EqualValues(t, 3, up.attempts.Load())

	up.up.Store(false)
	up.attempts.Store(2) // two more 503s, then 200
	resp, err := getWith(t, rt, context.Background())
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	s = rt.Stats()[0]
	assert.EqualValues(t, 4, s.Requests)
	assert.EqualValues(t, 6, s.Attempts, "the fourth request took three attempts")
	assert.EqualValues(t, 2, s.Retries)
	assert.EqualValues(t, 2, s.Failures)
}

// TestResponseWrapperFitsItsSizeClass guards the one allocation a plain
// request costs the transport: the body wrapper is made for every response,
// and a field more would take it from the 48-byte size class to 64 (more to
// clear and to scan on every request).
func TestResponseWrapperFitsItsSizeClass(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(responseBody{}), uintptr(48))
}

// TestAttemptsSurviveTheBodysRelease checks that the attempt count, kept in
// the same word as the held bit, reads the same before and after the body
// releases what it holds, and that a count too large for the word is capped
// rather than read as held.
func TestAttemptsSurviveTheBodysRelease(t *testing.T) {
	var l concurrencyLimit
	l.inflight.Add(1)
	resp := &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("x"))}
	wrapResponseBody(resp, 3, nil, &l, l.epoch.Load())
	assert.Equal(t, 3, Attempts(resp))
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, 3, Attempts(resp), "the count outlives the release")
	assert.Zero(t, l.inflight.Load(), "the slot was released once")
	require.NoError(t, resp.Body.Close())
	assert.Zero(t, l.inflight.Load(), "and only once")

	huge := &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}
	wrapResponseBody(huge, math.MaxInt, nil, nil, 0)
	assert.Equal(t, heldBit-1, Attempts(huge))

	// The count is capped below the held bit, whatever is held.
	assert.Equal(t, uint32(heldBit-1), bodyState(math.MaxInt, nil, nil), "nothing held")
	assert.Equal(t, uint32(heldBit|(heldBit-1)), bodyState(math.MaxInt, func() {}, nil), "something held")
	assert.Equal(t, uint32(heldBit), bodyState(-1, nil, &l), "no count below none")
}
