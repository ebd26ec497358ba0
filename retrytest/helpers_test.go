package retrytest_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp/retrytest"
)

// t0 is the test clocks' start: a fixed instant, so dates and epochs in
// headers can be written out (Monday, Unix 1796040000).
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// clock is a manual clock for Config.Now, safe to read from handlers while
// the test advances it.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: t0} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t0+d.
func (c *clock) Set(d time.Duration) {
	c.mu.Lock()
	c.now = t0.Add(d)
	c.mu.Unlock()
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// reply is a response with its body read.
type reply struct {
	status int
	header http.Header
	body   string
}

// do sends one POST with body through rt and reads the answer.
func do(t *testing.T, rt http.RoundTripper, url, body string) reply {
	t.Helper()
	r, err := try(rt, url, body, nil)
	require.NoError(t, err)
	return r
}

// try sends one POST with body (and extra headers) through rt.
func try(rt http.RoundTripper, url, body string, header http.Header) (reply, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}, err
}

// transport is a Transport with the given clock, answering https://api.test.
func transport(cfg retrytest.Config, c *clock) *retrytest.Transport {
	if c != nil {
		cfg.Now = c.Now
	}
	return retrytest.NewTransport(cfg)
}

const apiURL = "https://api.test/v1/messages"

// jsonField digs a string out of a JSON body along path.
func jsonField(t *testing.T, body string, path ...string) string {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(body), &v), body)
	for _, p := range path {
		m, ok := v.(map[string]any)
		require.True(t, ok, "%s: no object at %q", body, p)
		v = m[p]
	}
	if v == nil {
		return "null"
	}
	s, ok := v.(string)
	require.True(t, ok, "%s: %v is not a string", body, path)
	return s
}
