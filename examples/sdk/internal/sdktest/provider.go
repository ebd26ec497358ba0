package sdktest

import (
	"reflect"
	"testing"

	"github.com/retryhttp/retryhttp/retrytest"
)

// SDKAttemptHeader is the header in which the official SDKs number their own
// attempts ("0" for the first). The provider groups arrivals by it, so a test
// sees whether the repeats came from retryhttp (all under "0") or from the
// SDK.
const SDKAttemptHeader = "X-Stainless-Retry-Count"

// Provider starts a retrytest server on loopback speaking family, as cfg
// says, on clk, grouping arrivals by SDKAttemptHeader, with a fuse against a
// runaway retry loop. It is closed when the test ends.
func Provider(t *testing.T, clk *Clock, family retrytest.Family, cfg retrytest.Config) *retrytest.Server {
	t.Helper()
	cfg.Family = family
	cfg.Now = clk.Now
	cfg.RequestIDHeader = SDKAttemptHeader
	cfg.MaxAttempts = 20
	srv := retrytest.NewServer(cfg)
	t.Cleanup(srv.Close)
	return srv
}

// SDKCall checks that the provider saw one SDK attempt (header "0", none
// with "1") answered with want, in that order.
func SDKCall(t *testing.T, st retrytest.Stats, want ...int) {
	t.Helper()
	if got := st.Requests["0"].Statuses; !reflect.DeepEqual(got, want) {
		t.Errorf("SDK attempt 0 was answered %v, want %v", got, want)
	}
	if n := len(st.Requests) - 1; n != 0 {
		t.Errorf("the SDK retried on its own (%d more attempt ids: %v); WithMaxRetries(0) should stop it", n, st.Requests)
	}
}

// SameBody checks that the arrivals from index from on all carried the same,
// non-empty body.
func SameBody(t *testing.T, st retrytest.Stats, from int) {
	t.Helper()
	hashes := st.BodySHA256[from:]
	if n := (retrytest.Stats{BodySHA256: hashes}).DistinctBodies(); n != 1 {
		t.Errorf("the attempts carried %d different bodies, want 1: %v", n, hashes)
	}
	const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	if len(hashes) > 0 && hashes[0] == emptySHA256 {
		t.Error("the attempts carried an empty body")
	}
}

// Getenv is a getenv function reading env.
func Getenv(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}
