package retryhttp

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestScriptedRetriesUntilSuccess(t *testing.T) {
	mock, _ := scripted(t, step{status: 503}, step{status: 529}, step{status: 200, body: "ok"})
	clk := autoClock()
	rt := New(mock, WithClock(clk), WithJitter(0))
	req, err := http.NewRequest(http.MethodGet, "https://api.test/v1", nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, 3, Attempts(resp))
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second}, clk.Sleeps())
}
