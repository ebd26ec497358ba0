package retryhttp

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jarcoal/httpmock"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp/internal/fakeclock"
)

// testStart is the fake clocks' epoch: a fixed instant so dates in headers
// can be written out in tests.
var testStart = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// autoClock returns a clock on which every wait passes at once, recording it.
func autoClock() *fakeclock.Clock { return fakeclock.NewAuto(testStart) }

// step is one scripted outcome: a response (status, headers, body) or an error.
type step struct {
	status int
	header http.Header
	body   string
	err    error
}

// scripted returns an httpmock transport that answers any GET or POST to
// https://api.test/ with the steps in order, repeating the last one, and the
// request bodies it received, in order.
func scripted(t *testing.T, steps ...step) (*httpmock.MockTransport, func() []string) {
	t.Helper()
	require.NotEmpty(t, steps)
	mock := httpmock.NewMockTransport()
	var mu sync.Mutex
	var bodies []string
	i := 0
	responder := func(req *http.Request) (*http.Response, error) {
		mu.Lock()
		s := steps[min(i, len(steps)-1)]
		i++
		mu.Unlock()
		if req.Body != nil {
			b, err := readAll(req.Body)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			bodies = append(bodies, string(b))
			mu.Unlock()
		}
		if s.err != nil {
			return nil, s.err
		}
		resp := httpmock.NewStringResponse(s.status, s.body)
		for k, v := range s.header {
			resp.Header[k] = v
		}
		resp.Request = req
		return resp, nil
	}
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch} {
		mock.RegisterRegexpResponder(m, regexpAny, responder)
	}
	return mock, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), bodies...)
	}
}

var regexpAny = regexp.MustCompile(`^https://api\.test/`)

func readAll(r io.Reader) ([]byte, error) { return io.ReadAll(r) }

// sequence is a base transport that answers any URL with the steps in order,
// repeating the last one.
func sequence(steps ...step) http.RoundTripper {
	var mu sync.Mutex
	i := 0
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		mu.Lock()
		s := steps[min(i, len(steps)-1)]
		i++
		mu.Unlock()
		if req.Body != nil {
			io.Copy(io.Discard, req.Body)
			req.Body.Close()
		}
		if s.err != nil {
			return nil, s.err
		}
		h := http.Header{}
		for k, v := range s.header {
			h[k] = v
		}
		return &http.Response{StatusCode: s.status, Header: h, Body: io.NopCloser(strings.NewReader(s.body)), Request: req}, nil
	})
}
