package retryhttp

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
)

// peHeader builds a header from name/value pairs.
func peHeader(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestRetryableFollowsXShouldRetry(t *testing.T) {
	cases := []struct {
		status int
		value  string
		want   bool
	}{
		{200, "true", true},
		{400, "true", true},
		{400, " TRUE ", true},
		{503, "false", false},
		{529, "False", false},
		{429, "false", false},
		{503, "maybe", true},   // other values are ignored
		{400, "1", false},      // not a boolean the SDKs know
		{503, "", true},        // empty is absent
		{400, "yes", false},    // ignored: status decides
		{500, "0", true},       // ignored: status decides
		{404, "TrUe", true},    // case-insensitive
		{502, "false ", false}, // trimmed
	}
	for _, tc := range cases {
		t.Run(strconv.Itoa(tc.status)+"/"+tc.value, func(t *testing.T) {
			resp := &http.Response{StatusCode: tc.status, Header: peHeader("X-Should-Retry", tc.value)}
			assert.Equal(t, tc.want, Retryable(resp, nil))
		})
	}
}

func TestRequestIDHeaders(t *testing.T) {
	assert.Equal(t, "req_011CX", requestID(peHeader("request-id", "req_011CX")))
	assert.Equal(t, "abc-123", requestID(peHeader("x-request-id", "abc-123")))
	assert.Equal(t, "req_a", requestID(peHeader("Request-Id", "req_a", "X-Request-Id", "other")), "request-id first")
	assert.Equal(t, "C0DE:1234", requestID(peHeader("X-GitHub-Request-Id", "C0DE:1234")))
	assert.Equal(t, "", requestID(http.Header{}))
}
