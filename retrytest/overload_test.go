package retrytest_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp/retrytest"
)

func TestOverloadWindows(t *testing.T) {
	clk := newClock()
	tr := transport(retrytest.Config{
		Family: retrytest.OpenAI,
		Overload: []retrytest.Window{
			{From: time.Second, Until: 2 * time.Second, Status: 529, RetryAfter: 3 * time.Second},
			{From: 3 * time.Second, Until: 4 * time.Second},
		},
	}, clk)
	for _, tc := range []struct {
		at         time.Duration
		status     int
		retryAfter string
	}{
		{0, 200, ""},
		{time.Second - 1, 200, ""},
		{time.Second, 529, "3"},
		{2*time.Second - 1, 529, "3"},
		{2 * time.Second, 200, ""},
		{3500 * time.Millisecond, 503, ""},
		{4 * time.Second, 200, ""},
	} {
		clk.Set(tc.at)
		r := do(t, tr, apiURL, "")
		assert.Equal(t, tc.status, r.status, "at %v", tc.at)
		assert.Equal(t, tc.retryAfter, r.header.Get("Retry-After"), "at %v", tc.at)
		switch tc.status {
		case 529:
			// 529 is Anthropic's; its body is Anthropic's whatever the family.
			assert.Equal(t, "overloaded_error", jsonField(t, r.body, "error", "type"))
			assert.Equal(t, "Overloaded", jsonField(t, r.body, "error", "message"))
		case 503:
			assert.Equal(t, "server_error", jsonField(t, r.body, "error", "type"))
		}
	}
	st := tr.Stats()
	assert.Equal(t, map[int]int{200: 4, 529: 2, 503: 1}, st.Statuses)
	assert.Equal(t, []time.Duration{0, time.Second - 1, time.Second, 2*time.Second - 1, 2 * time.Second, 3500 * time.Millisecond, 4 * time.Second}, st.Arrivals)
}

func TestOverloadWindowSkipsTheBucket(t *testing.T) {
	clk := newClock()
	tr := transport(retrytest.Config{
		Family:    retrytest.Anthropic,
		RateLimit: retrytest.RateLimit{Rate: 1, Burst: 1},
		Overload:  []retrytest.Window{{Until: time.Second, Status: 529}},
	}, clk)
	r := do(t, tr, apiURL, "")
	require.Equal(t, 529, r.status)
	assert.Empty(t, r.header.Get("Anthropic-Ratelimit-Requests-Remaining"), "an overloaded server does not get as far as its rate limiter")
	clk.Advance(time.Second)
	assert.Equal(t, 200, do(t, tr, apiURL, "").status, "the window took no token")
}

// blocker is a Success handler that holds each request until released.
type blocker struct {
	entered chan struct{}
	release chan struct{}
}

func newBlocker() *blocker {
	return &blocker{entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (b *blocker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.entered <- struct{}{}
	<-b.release
	w.Write([]byte("served"))
}

func TestCapacitySheds503(t *testing.T) {
	b := newBlocker()
	srv := retrytest.NewServer(retrytest.Config{
		Family:   retrytest.Anthropic,
		Capacity: retrytest.Capacity{Max: 2, RetryAfter: 2 * time.Second},
		Success:  b,
	})
	defer srv.Close()
	client := srv.Client()

	var wg sync.WaitGroup
	results := make(chan reply, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := try(client.Transport, srv.URL, "", nil)
			assert.NoError(t, err)
			results <- r
		}()
	}
	<-b.entered
	<-b.entered
	st := srv.Stats()
	assert.Equal(t, 2, st.InService)

	r := do(t, client.Transport, srv.URL, "")
	assert.Equal(t, 503, r.status)
	assert.Equal(t, "2", r.header.Get("Retry-After"))
	assert.Equal(t, "api_error", jsonField(t, r.body, "error", "type"))

	close(b.release)
	wg.Wait()
	close(results)
	for r := range results {
		assert.Equal(t, 200, r.status)
		assert.Equal(t, "served", r.body)
	}
	st = srv.Stats()
	assert.Equal(t, 0, st.InService)
	assert.Equal(t, 2, st.PeakInService)
	assert.Equal(t, map[int]int{200: 2, 503: 1}, st.Statuses)
	// A freed slot serves again.
	assert.Equal(t, 200, do(t, client.Transport, srv.URL, "").status)
}

// TestCapacityStatus: Capacity.Status sets the refusal's status; 529 comes
// with Anthropic's overloaded_error body whatever the family, and a
// RetryAfter of none sends no Retry-After.
func TestCapacityStatus(t *testing.T) {
	for _, tc := range []struct {
		family     retrytest.Family
		status     int
		retryAfter time.Duration
		want       int
		header     string
		errType    string
	}{
		{retrytest.OpenAI, 529, 0, 529, "", "overloaded_error"},
		{retrytest.Anthropic, 529, 3 * time.Second, 529, "3", "overloaded_error"},
		{retrytest.Anthropic, 0, 0, 503, "", "api_error"},
	} {
		b := newBlocker()
		tr := retrytest.NewTransport(retrytest.Config{
			Family:   tc.family,
			Capacity: retrytest.Capacity{Max: 1, Status: tc.status, RetryAfter: tc.retryAfter},
			Success:  b,
		})
		done := make(chan int)
		go func() { done <- do(t, tr, apiURL, "").status }()
		<-b.entered
		r := do(t, tr, apiURL, "")
		assert.Equal(t, tc.want, r.status, "%+v", tc)
		assert.Equal(t, tc.header, r.header.Get("Retry-After"), "%+v", tc)
		if tc.family == retrytest.Anthropic || tc.want == 529 {
			assert.Equal(t, tc.errType, jsonField(t, r.body, "error", "type"), "%+v", tc)
		}
		close(b.release)
		assert.Equal(t, 200, <-done, "the request in service is served")
		assert.Equal(t, map[int]int{200: 1, tc.want: 1}, tr.Stats().Statuses)
	}
	for _, bad := range []int{200, 302, 600, -1} {
		assert.Error(t, retrytest.Config{Capacity: retrytest.Capacity{Max: 1, Status: bad}}.Validate(), "Status %d", bad)
	}
}

func TestCapacityHold(t *testing.T) {
	tr := retrytest.NewTransport(retrytest.Config{Capacity: retrytest.Capacity{Max: 1, Hold: 30 * time.Millisecond}})
	start := time.Now()
	assert.Equal(t, 200, do(t, tr, apiURL, "").status)
	assert.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)

	// A client that gives up during the hold frees its slot.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	tr = retrytest.NewTransport(retrytest.Config{Capacity: retrytest.Capacity{Max: 1, Hold: time.Minute}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, apiURL, nil)
	_, err := tr.RoundTrip(req)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	st := tr.Stats()
	assert.Equal(t, 0, st.InService)
	assert.Equal(t, map[int]int{0: 1}, st.Statuses)
}

func TestServerCloseEndsHolds(t *testing.T) {
	srv := retrytest.NewServer(retrytest.Config{Capacity: retrytest.Capacity{Max: 1, Hold: time.Minute}})
	client := srv.Client()
	errc := make(chan error, 1)
	go func() {
		_, err := try(client.Transport, srv.URL, "", nil)
		errc <- err
	}()
	require.Eventually(t, func() bool { return srv.Stats().InService == 1 }, 5*time.Second, time.Millisecond)
	start := time.Now()
	srv.Close()
	assert.Less(t, time.Since(start), 5*time.Second)
	err := <-errc
	require.Error(t, err, "the held request gets no made-up answer")
	assert.False(t, errors.Is(err, context.DeadlineExceeded))
	srv.Close() // twice is fine
}

func TestCapacityWithDefaultBody(t *testing.T) {
	tr := retrytest.NewTransport(retrytest.Config{Capacity: retrytest.Capacity{Max: 1}})
	for range 3 {
		r := do(t, tr, apiURL, "")
		assert.Equal(t, 200, r.status, "sequential requests never contend")
		assert.True(t, strings.HasPrefix(r.body, `{"ok":true`))
	}
	assert.Equal(t, 1, tr.Stats().PeakInService)
}

// TestCapacityChanges: Capacity.Changes move Max at their time on the
// provider's clock; requests in service when it drops finish as they are.
func TestCapacityChanges(t *testing.T) {
	clk := newClock()
	b := newBlocker()
	tr := transport(retrytest.Config{
		Capacity: retrytest.Capacity{Max: 2, Changes: []retrytest.CapacityChange{
			{At: time.Second, Max: 1},
			{At: 2 * time.Second, Max: 3},
		}},
		Success: b,
	}, clk)
	var wg sync.WaitGroup
	hold := func() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.Equal(t, 200, do(t, tr, apiURL, "").status)
		}()
		<-b.entered
	}
	hold()
	hold()
	assert.Equal(t, 503, do(t, tr, apiURL, "").status, "two slots, both taken")
	clk.Set(time.Second)
	assert.Equal(t, 503, do(t, tr, apiURL, "").status, "one slot now: the two in service finish as they are")
	clk.Set(2 * time.Second)
	hold()
	assert.Equal(t, 503, do(t, tr, apiURL, "").status, "three slots, all taken")
	close(b.release)
	wg.Wait()
	assert.Equal(t, 3, tr.Stats().PeakInService)

	for _, bad := range []retrytest.Capacity{
		{Changes: []retrytest.CapacityChange{{At: time.Second, Max: 1}}},
		{Max: 2, Changes: []retrytest.CapacityChange{{At: time.Second, Max: 0}}},
		{Max: 2, Changes: []retrytest.CapacityChange{{At: 2 * time.Second, Max: 1}, {At: time.Second, Max: 1}}},
	} {
		assert.Error(t, retrytest.Config{Capacity: bad}.Validate(), "%+v", bad)
	}
}
