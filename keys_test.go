package retryhttp

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Whatever WithKeyFunc returns is written out as a fingerprint only, in
// Stats, in breaker events and in log lines: keying by API key is what the
// option is for, and keys of no known shape (a vendor prefix, a UUID) look
// like any label.
func TestCustomKeysAreFingerprintedWhereWritten(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	for _, secret := range []string{"XAPIKEY-3f9a2c7e5b1d4a6c8e0f", "9b2f6c1e-4d3a-4e8b-a7c5-0f1e2d3c4b5a"} {
		t.Run(secret, func(t *testing.T) {
			var logs bytes.Buffer
			var mu sync.Mutex
			var events []BreakerEvent
			rt := New(nil, WithClock(autoClock()), WithMaxRetries(4), // 5 failures open the breaker
				WithBackoff(time.Millisecond, time.Millisecond), WithJitter(0),
				WithKeyFunc(func(r *http.Request) string { return r.Header.Get("X-Api-Key") }),
				WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
				WithHooks(Hooks{OnBreaker: func(e BreakerEvent) { mu.Lock(); events = append(events, e); mu.Unlock() }}))
			defer rt.CloseIdleConnections()
			req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/models", nil)
			require.NoError(t, err)
			req.Header.Set("X-Api-Key", secret)
			resp, err := rt.RoundTrip(req)
			require.NoError(t, err)
			resp.Body.Close()

			stats := rt.Stats()
			require.Len(t, stats, 1)
			key := stats[0].Key
			assert.NotContains(t, key, secret)
			assert.Regexp(t, `^key:[0-9a-f]+$`, key)
			mu.Lock()
			require.NotEmpty(t, events, "the breaker opened")
			for _, e := range events {
				assert.Equal(t, key, e.Key, "hooks name the upstream as Stats does")
			}
			mu.Unlock()
			assert.Contains(t, logs.String(), key, "the breaker's log line names the upstream")
			assert.NotContains(t, logs.String(), secret)
			// No part of the key is kept either.
			for _, part := range strings.FieldsFunc(secret, func(r rune) bool { return r == '-' }) {
				if len(part) >= 8 {
					assert.NotContains(t, key+logs.String(), part)
				}
			}
		})
	}
}

func TestKeyFingerprintsAreStableAndDistinct(t *testing.T) {
	a := upstreamKey{custom: "XAPIKEY-3f9a2c7e5b1d4a6c8e0f"}.String()
	assert.Equal(t, a, upstreamKey{custom: "XAPIKEY-3f9a2c7e5b1d4a6c8e0f"}.String(), "the same key names the same upstream")
	assert.NotEqual(t, a, upstreamKey{custom: "XAPIKEY-3f9a2c7e5b1d4a6c8e0e"}.String(), "different keys stay apart")
	assert.Regexp(t, `^key:[0-9a-f]+$`, upstreamKey{custom: "tenant-42"}.String(), "a label is fingerprinted too: no pattern tells it from a key")
	assert.Equal(t, "https://api.test:8443", upstreamKey{scheme: "https", host: "api.test:8443"}.String(), "the default key is the host, kept readable")
}
