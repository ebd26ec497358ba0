package retrytest_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp/retrytest"
)

// outcomes sends n requests one after another and writes what each met:
// "." for a clean 200, "R" for a reset, "T" for a truncated body.
func outcomes(t *testing.T, rt http.RoundTripper, url string, n int) string {
	t.Helper()
	var b strings.Builder
	for range n {
		r, err := try(rt, url, "hello", nil)
		switch {
		case err == nil:
			require.Equal(t, 200, r.status)
			b.WriteByte('.')
		case errors.Is(err, syscall.ECONNRESET):
			b.WriteByte('R')
		case errors.Is(err, io.ErrUnexpectedEOF):
			require.Equal(t, 200, r.status)
			b.WriteByte('T')
		default:
			t.Fatalf("unexpected error %v", err)
		}
	}
	return b.String()
}

func TestFlakyTransportIsSeeded(t *testing.T) {
	cfg := retrytest.Config{Seed: 42, Flaky: retrytest.Flaky{Reset: 0.2, Truncate: 0.2}}
	tr := retrytest.NewTransport(cfg)
	got := outcomes(t, tr, apiURL, 60)
	// Pinned: a run with a seed meets the same faults on every Go release
	// (math/rand/v2's PCG is specified), so a failure seen once can be
	// replayed.
	assert.Equal(t, "...............RT..R.T..RR.T..R......T.T..TRT..R..T..R.T.R.R", got)
	again := outcomes(t, retrytest.NewTransport(cfg), apiURL, 60)
	assert.Equal(t, got, again, "the same seed meets the same faults")
	cfg.Seed = 43
	assert.NotEqual(t, got, outcomes(t, retrytest.NewTransport(cfg), apiURL, 60), "another seed, other faults")

	st := tr.Stats()
	assert.Equal(t, strings.Count(got, "R"), st.Resets)
	assert.Equal(t, strings.Count(got, "T"), st.Truncated)
	assert.Positive(t, st.Resets)
	assert.Positive(t, st.Truncated)
	assert.Equal(t, 60, st.Attempts)
	assert.Equal(t, map[int]int{0: st.Resets, 200: 60 - st.Resets}, st.Statuses)
}

func TestFlakyTransportErrorTypes(t *testing.T) {
	tr := retrytest.NewTransport(retrytest.Config{Flaky: retrytest.Flaky{Reset: 1}})
	_, err := try(tr, "https://api.test/v1", "", nil)
	var op *net.OpError
	require.ErrorAs(t, err, &op)
	assert.Equal(t, "read", op.Op)
	assert.Equal(t, "api.test:443", op.Addr.String())
	assert.ErrorIs(t, err, syscall.ECONNRESET)
	assert.Equal(t, "read tcp api.test:443: read: connection reset by peer", err.Error())

	// Through an http.Client it is wrapped in a *url.Error, as usual.
	_, err = (&http.Client{Transport: tr}).Get("http://api.test:8080/")
	assert.ErrorIs(t, err, syscall.ECONNRESET)

	tr = retrytest.NewTransport(retrytest.Config{Family: retrytest.OpenAI, Flaky: retrytest.Flaky{Truncate: 1}})
	req, _ := http.NewRequest(http.MethodGet, apiURL, nil)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	assert.Equal(t, int64(2*len(b)), resp.ContentLength)
	assert.True(t, strings.HasPrefix(string(b), `{"id":"chatcmpl-1"`), string(b))
	resp.Body.Close()
}

func TestFlakyServerFaults(t *testing.T) {
	srv := retrytest.NewServer(retrytest.Config{Flaky: retrytest.Flaky{Reset: 1}})
	defer srv.Close()
	_, err := try(srv.Client().Transport, srv.URL, "payload", nil)
	require.Error(t, err)
	assert.ErrorIs(t, err, syscall.ECONNRESET, "a TCP RST, not an orderly close: %v", err)
	st := srv.Stats()
	assert.Equal(t, 1, st.Attempts, "a POST is not resent by net/http")
	assert.Equal(t, 1, st.Resets)

	srv2 := retrytest.NewServer(retrytest.Config{Flaky: retrytest.Flaky{Truncate: 1}})
	defer srv2.Close()
	r, err := try(srv2.Client().Transport, srv2.URL, "", nil)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	assert.Equal(t, 200, r.status)
	assert.Equal(t, `{"ok":tru`, r.body, `half of {"ok":true,"id":1} came`)
	assert.Equal(t, 1, srv2.Stats().Truncated)
}

func TestFlakySlowHeaders(t *testing.T) {
	for _, form := range []string{"server", "transport"} {
		t.Run(form, func(t *testing.T) {
			cfg := retrytest.Config{Flaky: retrytest.Flaky{Slow: 1, SlowDelay: time.Minute}}
			var rt http.RoundTripper
			url := apiURL
			var stats func() retrytest.Stats
			if form == "server" {
				srv := retrytest.NewServer(cfg)
				defer srv.Close()
				rt, url, stats = srv.Client().Transport, srv.URL, srv.Stats
			} else {
				tr := retrytest.NewTransport(cfg)
				rt, stats = tr, tr.Stats
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			start := time.Now()
			_, err := rt.RoundTrip(req)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Less(t, time.Since(start), 10*time.Second)
			assert.Eventually(t, func() bool { return stats().Statuses[0] == 1 }, 5*time.Second, time.Millisecond)
			assert.Equal(t, 1, stats().Slowed)
		})
	}

	tr := retrytest.NewTransport(retrytest.Config{Flaky: retrytest.Flaky{Slow: 1, SlowDelay: 20 * time.Millisecond}})
	start := time.Now()
	assert.Equal(t, 200, do(t, tr, apiURL, "").status)
	assert.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
}

// Flaky.StreamError opens that share of streams with the family's
// transient error as their first event, leaves answers that are not
// streams alone, and does not change which other faults a seed stages.
func TestFlakyStreamError(t *testing.T) {
	for _, tc := range []struct {
		family retrytest.Family
		first  string // what the first event of an opened-with-error stream says
	}{
		{retrytest.Anthropic, `"overloaded_error"`},
		{retrytest.OpenAI, `"server_error"`},
	} {
		t.Run(string(tc.family), func(t *testing.T) {
			tr := retrytest.NewTransport(retrytest.Config{Family: tc.family, Seed: 7, Flaky: retrytest.Flaky{StreamError: 0.3}})
			errored := 0
			for range 100 {
				r := do(t, tr, apiURL, `{"model":"m","max_tokens":8,"stream":true}`)
				require.Equal(t, 200, r.status)
				first, _, _ := strings.Cut(r.body, "\n\n")
				if strings.Contains(first, tc.first) {
					errored++
					assert.NotContains(t, r.body, "message_stop", "an error event ends the stream")
				}
			}
			assert.Equal(t, errored, tr.Stats().StreamErrors)
			assert.InDelta(t, 30, errored, 15, "about 30 of 100 streams open with an error")

			// A request that does not stream gets its JSON success.
			r := do(t, tr, apiURL, `{"model":"m","max_tokens":8}`)
			assert.Equal(t, "application/json", r.header.Get("Content-Type"))
		})
	}

	// The other faults of a seed stay where they were.
	cfg := retrytest.Config{Seed: 42, Flaky: retrytest.Flaky{Reset: 0.2, Truncate: 0.2}}
	want := outcomes(t, retrytest.NewTransport(cfg), apiURL, 60)
	cfg.Flaky.StreamError = 0.5
	assert.Equal(t, want, outcomes(t, retrytest.NewTransport(cfg), apiURL, 60))

	assert.Error(t, retrytest.Config{Flaky: retrytest.Flaky{StreamError: 1.5}}.Validate())
}
