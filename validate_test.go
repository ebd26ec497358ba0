package retryhttp

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jarcoal/httpmock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// peTrackedBody records whether the transport closed the caller's body.
type peTrackedBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *peTrackedBody) Close() error { b.closed.Store(true); return nil }

func TestInvalidRequestsAreRefusedBeforeAnyAttempt(t *testing.T) {
	cases := []struct {
		name string
		mod  func(r *http.Request)
		why  string // in the error text
	}{
		{"unsupported scheme", func(r *http.Request) { r.URL.Scheme = "ftp" }, `unsupported protocol scheme "ftp"`},
		{"no scheme", func(r *http.Request) { r.URL.Scheme = "" }, "unsupported protocol scheme"},
		{"upper-case scheme", func(r *http.Request) { r.URL.Scheme = "HTTPS" }, "unsupported protocol scheme"},
		{"empty host", func(r *http.Request) { r.URL.Host = "" }, "no host"},
		{"nil URL", func(r *http.Request) { r.URL = nil }, "nil URL"},
		{"header name with a space", func(r *http.Request) { r.Header["Bad Header"] = []string{"v"} }, `invalid header field name "Bad Header"`},
		{"empty header name", func(r *http.Request) { r.Header[""] = []string{"v"} }, "invalid header field name"},
		{"header name with a colon", func(r *http.Request) { r.Header["X-A:b"] = []string{"v"} }, "invalid header field name"},
		{"header value with a newline", func(r *http.Request) { r.Header.Set("X-Injected", "a\nSet-Cookie: x=y") }, `invalid value for header field "X-Injected"`},
		{"header value with CR", func(r *http.Request) { r.Header.Set("X-A", "a\rb") }, "invalid value"},
		{"header value with NUL", func(r *http.Request) { r.Header.Set("X-A", "a\x00b") }, "invalid value"},
		{"header value with DEL", func(r *http.Request) { r.Header.Set("X-A", "a\x7fb") }, "invalid value"},
		{"method with a space", func(r *http.Request) { r.Method = "GE T" }, `invalid method "GE T"`},
		{"method with a newline", func(r *http.Request) { r.Method = "GET\n" }, "invalid method"},
		{"host with a newline", func(r *http.Request) { r.Host = "api.test\r\nX-Evil: 1" }, "invalid host"},
		{"URL host with a space", func(r *http.Request) { r.URL.Host = "api .test" }, "invalid host"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mock := httpmock.NewMockTransport()
			mock.RegisterNoResponder(httpmock.NewStringResponder(200, "must not be called"))
			body := &peTrackedBody{Reader: strings.NewReader(`{"secret":"payload"}`)}
			req, err := http.NewRequest(http.MethodPost, "https://u:pw@api.test/v1?api_key=SECRETKEY", body)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer sk-abcdefghijklmnop")
			tc.mod(req)

			resp, err := New(mock, WithClock(autoClock())).RoundTrip(req)
			require.Nil(t, resp)
			require.Error(t, err)
			assert.Zero(t, mock.GetTotalCallCount(), "nothing was sent")
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.ErrorIs(t, err, ErrInvalidRequest)
			assert.Equal(t, 0, e.Attempts)
			assert.False(t, e.Retryable)
			assert.False(t, Retryable(nil, err))
			assert.Equal(t, 0, e.StatusCode)
			assert.Contains(t, err.Error(), tc.why)
			assert.True(t, body.closed.Load(), "the caller's body is closed")
			for _, s := range []string{"pw", "SECRETKEY", "sk-abcdefghijklmnop", "\n", "\r"} {
				assert.NotContains(t, err.Error(), s)
			}
			assert.Equal(t, kindLocal, e.kind())
			peAssertCalm(t, e, e.UserMessage())
			assert.Same(t, e, CheckResponse(nil, err))
		})
	}
}

// A request to the host of the upstream the transport found last skips the
// check of the host's bytes (that host was checked when the upstream was
// made): any other host is still checked, on a transport keyed by host and
// on one keyed by WithKeyFunc, whose keys hold no host.
func TestInvalidHostsAreRefusedAfterAValidRequest(t *testing.T) {
	for _, opts := range [][]Option{nil, {WithKeyFunc(func(*http.Request) string { return "tenant" })}} {
		mock := httpmock.NewMockTransport()
		mock.RegisterNoResponder(httpmock.NewStringResponder(200, "ok"))
		rt := New(mock, append(opts, WithClock(autoClock()))...)
		req, err := http.NewRequest(http.MethodGet, "https://api.test/v1", nil)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
		for _, mod := range []func(r *http.Request){
			func(r *http.Request) { r.URL.Host = "api .test" },
			func(r *http.Request) { r.URL.Host, r.Host = "api\\.test", "" },
			func(r *http.Request) { r.Host = "api.test\r\nX-Evil: 1" },
		} {
			req, err := http.NewRequest(http.MethodGet, "https://api.test/v1", nil)
			require.NoError(t, err)
			mod(req)
			_, err = rt.RoundTrip(req)
			assert.ErrorIs(t, err, ErrInvalidRequest, "URL host %q, Host %q", req.URL.Host, req.Host)
		}
		assert.Equal(t, 1, mock.GetTotalCallCount(), "only the valid request was sent")
	}
}

func TestNilRequestIsRefused(t *testing.T) {
	mock := httpmock.NewMockTransport()
	resp, err := New(mock).RoundTrip(nil)
	assert.Nil(t, resp)
	assert.ErrorIs(t, err, ErrInvalidRequest)
	assert.Zero(t, mock.GetTotalCallCount())
}

func TestValidRequestsPass(t *testing.T) {
	for _, raw := range []string{"https://api.test/v1", "http://127.0.0.1:8080/x", "http://[::1]:80/", "https://xn--bcher-kva.test/", "https://bücher.test/"} {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		req := &http.Request{Method: "", URL: u, Header: http.Header{
			"X-Tab":          {"a\tb"},
			"X-Unicode":      {"héllo"},
			"X-Empty":        {""},
			"X-Custom_Token": {"v"},
		}}
		assert.NoError(t, validateRequest(req, ""), raw)
		for _, m := range []string{"GET", "POST", "PATCH", "PROPFIND", "M-SEARCH"} {
			req.Method = m
			assert.NoError(t, validateRequest(req, ""), m)
		}
	}
	err := validateRequest(&http.Request{URL: &url.URL{Scheme: "https", Host: "api.test"}, Host: "other.test:8443"}, "")
	assert.NoError(t, err)
	assert.False(t, errors.Is(err, ErrInvalidRequest))
}
