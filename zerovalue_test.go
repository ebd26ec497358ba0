package retryhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp"
)

func TestZeroValueRetryTransportWorks(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After-Ms", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()

	assert.Empty(t, (&retryhttp.RetryTransport{}).Stats(), "Stats on a zero value: nothing yet, no panic")
	(&retryhttp.RetryTransport{}).CloseIdleConnections()

	rt := &retryhttp.RetryTransport{}
	client := &http.Client{Transport: rt}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	for range 8 { // first uses race to set it up
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get(srv.URL)
			if assert.NoError(t, err) {
				resp.Body.Close()
				assert.Equal(t, http.StatusOK, resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	require.Len(t, rt.Stats(), 1)
	assert.Equal(t, uint64(8), rt.Stats()[0].Requests)
	assert.Equal(t, uint64(9), rt.Stats()[0].Attempts, "the 503 was retried, as New(nil) would")
}

// The zero value is New(nil) with the defaults, set up on first use.
func ExampleRetryTransport_zeroValue() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()

	client := &http.Client{Transport: &retryhttp.RetryTransport{}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	// Output: 200
}
