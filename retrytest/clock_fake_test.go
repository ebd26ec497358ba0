package retrytest_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

var _ retryhttp.Clock = retrytest.NewClock()

func TestClockRunsAScriptedScheduleInNoRealTime(t *testing.T) {
	srv := retrytest.NewServer(retrytest.Config{Script: retrytest.MustParseScript("529, 429@1s, 200")})
	defer srv.Close()
	clock := retrytest.NewClock()
	start := clock.Now()
	rt := retryhttp.New(srv.Client().Transport, retryhttp.WithClock(clock), retryhttp.WithJitter(0))
	realStart := time.Now()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1", nil)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 3, retryhttp.Attempts(resp))
	waits := clock.Waits()
	require.Len(t, waits, 2)
	assert.Equal(t, time.Second, waits[0], "the backoff after the 529")
	assert.Equal(t, time.Second, waits[1], "the server's Retry-After")
	assert.Equal(t, 2*time.Second, clock.Now().Sub(start), "the transport saw the time pass")
	assert.Less(t, time.Since(realStart), time.Second, "but the test did not (a loaded machine's margin: the waits were 2 s)")
}

func TestClockFiresTimeoutsOnlyWhenItsTimePassesThem(t *testing.T) {
	clock := retrytest.NewClock()
	var fired atomic.Int32
	stop := clock.AfterFunc(time.Second, func() { fired.Add(1) })
	clock.AfterFunc(3*time.Second, func() { fired.Add(10) })
	time.Sleep(10 * time.Millisecond)
	assert.Zero(t, fired.Load(), "nothing fires by itself")
	clock.NewTimer(1500 * time.Millisecond) // a wait moves the time past the first
	assert.Eventually(t, func() bool { return fired.Load() == 1 }, 2*time.Second, time.Millisecond)
	assert.False(t, stop(), "it fired: stop is too late")
	stop2 := clock.AfterFunc(time.Second, func() { fired.Add(100) })
	assert.True(t, stop2(), "stopped before it fired")
	clock.Advance(5 * time.Second)
	assert.Eventually(t, func() bool { return fired.Load() == 11 }, 2*time.Second, time.Millisecond, "the 3 s one fires, the stopped one never")
}

func TestClockIsSafeForConcurrentUse(t *testing.T) {
	clock := retrytest.NewClock()
	start := clock.Now()
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch, _ := clock.NewTimer(time.Second)
			<-ch
			clock.AfterFunc(time.Millisecond, func() {})
			clock.Advance(time.Millisecond)
		}()
	}
	wg.Wait()
	assert.Equal(t, 20*time.Second+20*time.Millisecond, clock.Now().Sub(start), "concurrent waits add up")
	assert.Len(t, clock.Waits(), 20)
}

func TestClockKeepsContextDeadlinesMeaningful(t *testing.T) {
	srv := retrytest.NewServer(retrytest.Config{Script: retrytest.MustParseScript("503@30s, 200")})
	defer srv.Close()
	rt := retryhttp.New(srv.Client().Transport, retryhttp.WithClock(retrytest.NewClock()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1", nil)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "a 30 s wait does not fit a 10 s deadline: the 503 is returned at once")
	assert.ErrorIs(t, retryhttp.CheckResponse(resp, nil), retryhttp.ErrPastDeadline)
}
