package retryhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const secretURL = "https://user:hunter2@api.test/v1/messages?api_key=SECRETKEY&model=m"

func TestHooksSeeEveryStepWithoutCredentials(t *testing.T) {
	var mu sync.Mutex
	var attempts, retries, giveUps []Event
	hooks := Hooks{
		OnAttempt: func(e Event) { mu.Lock(); attempts = append(attempts, e); mu.Unlock() },
		OnRetry:   func(e Event) { mu.Lock(); retries = append(retries, e); mu.Unlock() },
		OnGiveUp:  func(e Event) { mu.Lock(); giveUps = append(giveUps, e); mu.Unlock() },
	}
	leak := errors.New(`dial failed for ` + secretURL + ` with Bearer sk-ant-abcdefghijklmnop`)
	base := sequence(step{status: 503}, step{err: leak}, step{status: 429})
	req, err := http.NewRequest(http.MethodGet, secretURL, nil)
	require.NoError(t, err)
	resp, err := New(base, WithClock(autoClock()), WithHooks(hooks), WithMaxRetries(2), WithJitter(0)).RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()

	require.Len(t, attempts, 3)
	for i, e := range attempts {
		assert.Equal(t, i+1, e.Attempt)
		assert.Equal(t, http.MethodGet, e.Method)
	}
	require.Len(t, retries, 2)
	assert.Equal(t, 503, retries[0].StatusCode)
	assert.Equal(t, time.Second, retries[0].Wait)
	assert.Equal(t, "503 Service Unavailable", retries[0].Reason)
	assert.Equal(t, 2*time.Second, retries[1].Wait)
	assert.ErrorIs(t, retries[1].Err, leak, "errors.Is reaches the original")
	require.Len(t, giveUps, 1)
	assert.Equal(t, 429, giveUps[0].StatusCode)
	assert.Equal(t, "retries exhausted", giveUps[0].Reason)

	for _, e := range append(append(attempts, retries...), giveUps...) {
		text := e.URL + " " + e.Reason
		if e.Err != nil {
			text += " " + e.Err.Error()
		}
		assert.NotContains(t, text, "hunter2")
		assert.NotContains(t, text, "SECRETKEY")
		assert.NotContains(t, text, "abcdefghijklmnop")
		assert.Contains(t, e.URL, "api.test/v1/messages")
		assert.Contains(t, e.URL, "model=m")
	}
}

func TestLogLevelsAndNoCredentials(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	base := sequence(step{status: 529})
	req, err := http.NewRequest(http.MethodPost, secretURL, strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk-live-abcdefghijklmnop")
	req.Header.Set("X-Api-Key", "sk-ant-zyxwvutsrqponm")
	resp, err := New(base, WithClock(autoClock()), WithLogger(logger), WithMaxRetries(1), WithJitter(0)).RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()

	out := buf.String()
	for _, secret := range []string{"hunter2", "SECRETKEY", "abcdefghijklmnop", "zyxwvutsrqponm"} {
		assert.NotContains(t, out, secret)
	}
	var levels, msgs []string
	var retryLine map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		levels = append(levels, rec["level"].(string))
		msgs = append(msgs, rec["msg"].(string))
		if rec["level"] == "INFO" {
			retryLine = rec
		}
	}
	assert.Equal(t, []string{"DEBUG", "INFO", "DEBUG", "WARN"}, levels)
	assert.Equal(t, []string{"retryhttp: attempt", "retryhttp: retrying", "retryhttp: attempt", "retryhttp: giving up"}, msgs)
	require.NotNil(t, retryLine)
	assert.Equal(t, "529 Overloaded", retryLine["reason"])
	assert.Equal(t, float64(time.Second), retryLine["wait"])
	assert.Equal(t, float64(529), retryLine["status"])
}

func TestSilentWithoutLogger(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(old)
	mock, _ := scripted(t, step{status: 503})
	resp, err := New(mock, WithClock(autoClock()), WithMaxRetries(1)).RoundTrip(get(t, "https://api.test/x").WithContext(context.Background()))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Empty(t, buf.String(), "nothing goes to the default logger")
}

// An upstream that answers 429s without rate-limit headers is paced by the
// rate it accepts: Stats says so, and the log says it once, at info.
func TestObservedPaceIsReportedOnce(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	mock, _ := scripted(t, step{status: 200}, step{status: 429, header: http.Header{"Retry-After": {"1"}}},
		step{status: 200}, step{status: 429}, step{status: 200})
	rt := New(mock, WithClock(autoClock()), WithLogger(logger))
	assert.Equal(t, "off", func() string {
		roundTrips(t, rt, 1)
		return rt.Stats()[0].Pacing
	}(), "no 429 yet: not paced")
	roundTrips(t, rt, 3)
	st := rt.Stats()[0]
	assert.Equal(t, "observed", st.Pacing)
	assert.Positive(t, st.Rate)
	assert.Equal(t, 1, strings.Count(buf.String(), "pacing by the rate the upstream accepts"), buf.String())
	assert.Contains(t, buf.String(), "it sends no rate-limit headers")
}
