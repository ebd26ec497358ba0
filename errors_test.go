package retryhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Real provider error bodies (see shared/reference/signals.md).
const (
	anthropicOverloaded = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`
	anthropicRateLimit  = `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 50 requests per minute."},"request_id":"req_011CRateLimited"}`
	openAIQuota         = `{"error":{"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`
	openAIRateLimit     = `{"error":{"message":"Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in 20s. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`
	openAIBadRequest    = `{"error":{"message":"'messages' must contain at least one message.","type":"invalid_request_error","param":"messages","code":null}}`
	openAIBadKey        = `{"error":{"message":"Incorrect API key provided: sk-proj-Zq9XwV8uT7sR6pO5nM4. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`
	githubSecondary     = `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID 1C2D:3E4F:5A6B.","documentation_url":"https://docs.github.com/free-pro-team@latest/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits","status":"403"}`
	githubNotFound      = `{"message":"Not Found","documentation_url":"https://docs.github.com/rest","status":"404"}`
	nginxBadGateway     = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
	envoyReset          = "upstream connect error or disconnect/reset before headers. reset reason: overflow"
)

// peResponse builds a response that did not come from a RetryTransport.
func peResponse(status int, h http.Header, body string) *http.Response {
	if h == nil {
		h = http.Header{}
	}
	req, _ := http.NewRequest(http.MethodPost, "https://api.test/v1/messages", nil)
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body)), Request: req}
}

// peCheck runs CheckResponse and requires an *Error.
func peCheck(t *testing.T, resp *http.Response, err error) *Error {
	t.Helper()
	got := CheckResponse(resp, err)
	require.Error(t, got)
	var e *Error
	require.ErrorAs(t, got, &e)
	return e
}

func TestCheckResponseNilBelow400(t *testing.T) {
	for _, code := range []int{200, 201, 204, 301, 304, 399} {
		assert.NoError(t, CheckResponse(peResponse(code, nil, "fine"), nil), code)
	}
}

func TestCheckResponseNoResponseNoError(t *testing.T) {
	e := peCheck(t, nil, nil)
	assert.Equal(t, 0, e.StatusCode)
	assert.False(t, e.Retryable)
}

func TestCheckResponseProviderBodies(t *testing.T) {
	cases := []struct {
		name      string
		status    int
		header    http.Header
		body      string
		retryable bool
		typ       string
		message   string // exact, or prefix when it ends with "*"
		requestID string
		retryIn   time.Duration // 0: RetryAt must be zero
		kind      errorKind
	}{
		{name: "anthropic overloaded", status: 529, header: peHeader("Content-Type", "application/json"), body: anthropicOverloaded,
			retryable: true, typ: "overloaded_error", message: "Overloaded", requestID: "req_011CSHoEeqs5C35K2UUqR7Fy", kind: kindOverloaded},
		{name: "anthropic rate limit", status: 429, header: peHeader("request-id", "req_from_header", "retry-after", "30"), body: anthropicRateLimit,
			retryable: true, typ: "rate_limit_error", message: "This request would exceed the rate limit*", requestID: "req_from_header", retryIn: 30 * time.Second, kind: kindRateLimited},
		{name: "anthropic with x-should-retry false", status: 529, header: peHeader("x-should-retry", "false"), body: anthropicOverloaded,
			retryable: false, typ: "overloaded_error", message: "Overloaded", requestID: "req_011CSHoEeqs5C35K2UUqR7Fy", kind: kindOverloaded},
		{name: "openai insufficient quota", status: 429, header: peHeader("x-request-id", "req_9f8e7d"), body: openAIQuota,
			retryable: false, typ: "insufficient_quota", message: "You exceeded your current quota*", requestID: "req_9f8e7d", kind: kindQuota},
		{name: "openai rate limit with hint", status: 429, header: peHeader("x-request-id", "req_1"), body: openAIRateLimit,
			retryable: true, typ: "rate_limit_exceeded", message: "Rate limit reached for gpt-4o*", requestID: "req_1", retryIn: 20 * time.Second, kind: kindRateLimited},
		{name: "retry-after wins over the message hint", status: 429, header: peHeader("retry-after", "5"), body: openAIRateLimit,
			retryable: true, typ: "rate_limit_exceeded", message: "Rate limit reached*", retryIn: 5 * time.Second, kind: kindRateLimited},
		{name: "openai bad request, code null", status: 400, body: openAIBadRequest,
			typ: "invalid_request_error", message: "'messages' must contain at least one message.", kind: kindBadRequest},
		{name: "github secondary rate limit", status: 403, header: peHeader("X-GitHub-Request-Id", "1C2D:3E4F:5A6B"), body: githubSecondary,
			retryable: true, typ: "secondary_rate_limit", message: "You have exceeded a secondary rate limit.*", requestID: "1C2D:3E4F:5A6B", kind: kindRateLimited},
		{name: "github not found", status: 404, body: githubNotFound, typ: "", message: "Not Found", kind: kindNotFound},
		{name: "plain text", status: 503, header: peHeader("Content-Type", "text/plain"), body: envoyReset,
			retryable: true, message: envoyReset, kind: kindOverloaded},
		{name: "html body has no message", status: 502, header: peHeader("Content-Type", "text/html"), body: nginxBadGateway,
			retryable: true, kind: kindServer},
		{name: "html content type, text body", status: 500, header: peHeader("Content-Type", "text/html; charset=utf-8"), body: "Internal error",
			retryable: true, kind: kindServer},
		{name: "truncated json", status: 529, body: `{"type":"error","error":{"type":"overloaded_er`,
			retryable: true, kind: kindOverloaded},
		{name: "numeric code keeps the rest", status: 429, body: `{"error":{"message":"Too many requests","type":"rate_limit","code":429}}`,
			retryable: true, typ: "rate_limit", message: "Too many requests", kind: kindRateLimited},
		{name: "object message keeps the rest", status: 400, body: `{"error":{"message":{"text":"x"},"type":"invalid_request_error"}}`,
			typ: "invalid_request_error", kind: kindBadRequest},
		{name: "string error", status: 401, body: `{"error":"invalid_token"}`, message: "invalid_token", kind: kindAuth},
		{name: "json array", status: 422, body: `[{"field":"name"}]`, message: `[{"field":"name"}]`, kind: kindBadRequest},
		{name: "empty body", status: 504, retryable: true, kind: kindTimeout},
		{name: "white space folded", status: 500, body: "  line one\n\n\tline\x00two  ", retryable: true, message: "line one line two", kind: kindServer},
		{name: "retry hint in words", status: 429, body: "Slow down. Please try again in 2 minutes.", retryable: true,
			message: "Slow down.*", retryIn: 2 * time.Minute, kind: kindRateLimited},
		{name: "retry hint h m s", status: 429, body: "Please try again in 1h2m3s.", retryable: true,
			message: "Please try again in 1h2m3s.", retryIn: time.Hour + 2*time.Minute + 3*time.Second, kind: kindRateLimited},
		{name: "retry hint ms", status: 429, body: "Please try again in 250ms.", retryable: true,
			message: "Please try again in 250ms.", retryIn: 250 * time.Millisecond, kind: kindRateLimited},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now()
			e := peCheck(t, peResponse(tc.status, tc.header, tc.body), nil)
			assert.Equal(t, tc.status, e.StatusCode)
			assert.Equal(t, 1, e.Attempts, "a response not from RetryTransport is one attempt")
			assert.Equal(t, tc.retryable, e.Retryable)
			assert.Equal(t, tc.typ, e.ProviderType)
			if p, ok := strings.CutSuffix(tc.message, "*"); ok {
				assert.True(t, strings.HasPrefix(e.Message, p), "message %q", e.Message)
			} else {
				assert.Equal(t, tc.message, e.Message)
			}
			assert.Equal(t, tc.requestID, e.RequestID)
			if tc.retryIn == 0 {
				assert.True(t, e.RetryAt.IsZero(), "RetryAt %v", e.RetryAt)
			} else {
				assert.WithinRange(t, e.RetryAt, before.Add(tc.retryIn), time.Now().Add(tc.retryIn))
			}
			assert.Equal(t, tc.kind, e.kind())
			assert.Equal(t, "POST", e.Method)
			assert.Equal(t, "https://api.test/v1/messages", e.URL)
			assert.NoError(t, e.Err)
		})
	}
}

func TestCheckResponseRedactsEchoedKey(t *testing.T) {
	e := peCheck(t, peResponse(401, nil, openAIBadKey), nil)
	assert.Equal(t, "invalid_api_key", e.ProviderType)
	assert.Contains(t, e.Message, "Incorrect API key provided")
	assert.NotContains(t, e.Message, "Zq9XwV8uT7sR6pO5nM4")
	assert.NotContains(t, e.Error(), "Zq9XwV8uT7sR6pO5nM4")
}

func TestCheckResponseBoundsMessage(t *testing.T) {
	long := strings.Repeat("é", 3*maxMessage)
	e := peCheck(t, peResponse(500, nil, `{"error":{"message":"`+long+`","type":"`+strings.Repeat("t", 1000)+`"}}`), nil)
	assert.Equal(t, maxMessage+1, utf8.RuneCountInString(e.Message))
	assert.True(t, strings.HasSuffix(e.Message, "…"))
	assert.LessOrEqual(t, utf8.RuneCountInString(e.ProviderType), maxField+1)
}

func TestCheckResponseBodyCanStillBeReadWhole(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", (maxErrorBody+10<<10)/16) // over the 64 KiB peek
	for name, body := range map[string]string{"small": openAIQuota, "larger than the peek": big, "empty": ""} {
		t.Run(name, func(t *testing.T) {
			resp := peResponse(429, nil, body)
			e := peCheck(t, resp, nil)
			got, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, body, string(got))
			assert.NoError(t, resp.Body.Close())
			if body == big {
				assert.True(t, strings.HasPrefix(e.Message, big[:100]))
			}
		})
	}
}

// peClosable is a body that fails after Close, as net/http's does.
type peClosable struct {
	r      io.Reader
	closed atomic.Bool
	closes atomic.Int32
}

func (b *peClosable) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errors.New("http: read on closed response body")
	}
	return b.r.Read(p)
}

func (b *peClosable) Close() error {
	b.closed.Store(true)
	b.closes.Add(1)
	return nil
}

func TestCheckResponseBodyAlreadyReadOrClosed(t *testing.T) {
	t.Run("read", func(t *testing.T) {
		resp := peResponse(529, peHeader("Retry-After", "10", "request-id", "req_x"), anthropicOverloaded)
		_, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		e := peCheck(t, resp, nil)
		assert.Equal(t, 529, e.StatusCode)
		assert.True(t, e.Retryable)
		assert.Equal(t, "req_x", e.RequestID)
		assert.False(t, e.RetryAt.IsZero())
		assert.Empty(t, e.Message)
		assert.Equal(t, kindOverloaded, e.kind())
	})
	t.Run("closed", func(t *testing.T) {
		body := &peClosable{r: strings.NewReader(openAIQuota)}
		resp := peResponse(429, nil, "")
		resp.Body = body
		require.NoError(t, resp.Body.Close())
		e := peCheck(t, resp, nil)
		assert.Equal(t, 429, e.StatusCode)
		assert.True(t, e.Retryable, "status and headers alone: a 429")
		assert.Empty(t, e.ProviderType)
		assert.NoError(t, e.Err)
		assert.NoError(t, resp.Body.Close())
		assert.EqualValues(t, 2, body.closes.Load(), "Close still reaches the original body")
	})
	t.Run("nil body", func(t *testing.T) {
		resp := peResponse(503, nil, "")
		resp.Body = nil
		e := peCheck(t, resp, nil)
		assert.Equal(t, 503, e.StatusCode)
	})
	t.Run("real response closed", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "3")
			w.Header().Set("x-request-id", "req_srv")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, openAIRateLimit)
		}))
		defer srv.Close()
		client := srv.Client()
		defer client.CloseIdleConnections()
		resp, err := client.Get(srv.URL + "/v1")
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		e := peCheck(t, resp, nil)
		assert.Equal(t, 429, e.StatusCode)
		assert.Equal(t, "req_srv", e.RequestID)
		assert.Equal(t, "GET", e.Method)
		assert.True(t, e.Retryable)
	})
}

func TestCheckResponseWithoutRequest(t *testing.T) {
	resp := peResponse(500, nil, "boom")
	resp.Request = nil
	e := peCheck(t, resp, nil)
	assert.Empty(t, e.Method)
	assert.Empty(t, e.URL)
	assert.Equal(t, "boom", e.Message)
	assert.Contains(t, e.Error(), "500 Internal Server Error")
}

func TestCheckResponseForeignTransportError(t *testing.T) {
	cause := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	e := peCheck(t, nil, cause)
	assert.ErrorIs(t, e, syscall.ECONNREFUSED)
	assert.Same(t, cause, e.Err)
	assert.Equal(t, 0, e.StatusCode)
	assert.Equal(t, 1, e.Attempts)
	assert.True(t, e.Retryable)
	assert.Equal(t, kindNetwork, e.kind())

	e = peCheck(t, nil, fmt.Errorf("wrapped: %w", context.Canceled))
	assert.ErrorIs(t, e, context.Canceled)
	assert.False(t, e.Retryable)
	assert.Equal(t, kindCanceled, e.kind())

	// With a response that carries the request, the request is named.
	resp := peResponse(200, nil, "")
	e = peCheck(t, resp, io.ErrUnexpectedEOF)
	assert.ErrorIs(t, e, io.ErrUnexpectedEOF)
	assert.Equal(t, "POST", e.Method)
}

func TestCheckResponseReturnsOwnErrorAsIs(t *testing.T) {
	own := &Error{StatusCode: 503, Attempts: 4, Retryable: true}
	assert.Same(t, own, CheckResponse(nil, own))
	// http.Client wraps RoundTrip errors in *url.Error.
	wrapped := &url.Error{Op: "Get", URL: "https://api.test/", Err: own}
	assert.Same(t, own, CheckResponse(nil, wrapped))
}

// peRoundTrip runs New(mock) over steps and returns the response or error of
// one GET.
func peRoundTrip(t *testing.T, opts []Option, steps ...step) (*http.Response, error) {
	t.Helper()
	mock, _ := scripted(t, steps...)
	req, err := http.NewRequest(http.MethodGet, "https://api.test/v1/messages?api_key=SECRETKEY&x=1", nil)
	require.NoError(t, err)
	return New(mock, append([]Option{WithClock(autoClock()), WithJitter(0)}, opts...)...).RoundTrip(req)
}

func TestCheckResponseFromRetryTransport(t *testing.T) {
	resp, err := peRoundTrip(t, []Option{WithMaxRetries(2)},
		step{status: 503},
		step{status: 529, body: anthropicOverloaded},
		step{status: 529, header: peHeader("request-id", "req_last"), body: anthropicOverloaded},
	)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 3, Attempts(resp))

	e := peCheck(t, resp, nil)
	assert.Equal(t, 529, e.StatusCode)
	assert.Equal(t, 3, e.Attempts)
	assert.True(t, e.Retryable)
	assert.Equal(t, "retries exhausted", e.StopReason)
	assert.Equal(t, "overloaded_error", e.ProviderType)
	assert.Equal(t, "req_last", e.RequestID)
	assert.NotContains(t, e.URL, "SECRETKEY")
	assert.Contains(t, e.URL, "x=1")

	assert.Equal(t, 3, Attempts(resp), "Attempts still works after the peek")
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, anthropicOverloaded, string(got))
}

func TestCheckResponseFromRetryTransportLargeBody(t *testing.T) {
	big := strings.Repeat("x", maxErrorBody*2+7)
	resp, err := peRoundTrip(t, []Option{WithMaxRetries(0)}, step{status: 500, body: big})
	require.NoError(t, err)
	defer resp.Body.Close()
	e := peCheck(t, resp, nil)
	assert.Equal(t, 1, e.Attempts)
	assert.Equal(t, 1, Attempts(resp))
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, len(big), len(got))
	assert.True(t, bytes.Equal([]byte(big), got))
}

// A server wait over the limit stops retrying; the Error says when a retry
// is worth it, from the transport's clock rather than the wall clock.
func TestCheckResponseRetryAtFromTransport(t *testing.T) {
	resp, err := peRoundTrip(t, nil, step{status: 429, header: peHeader("Retry-After", "3600"), body: anthropicRateLimit})
	require.NoError(t, err)
	defer resp.Body.Close()
	e := peCheck(t, resp, nil)
	assert.Equal(t, 1, e.Attempts)
	assert.Contains(t, e.StopReason, "longer than the limit")
	assert.Equal(t, testStart.Add(time.Hour), e.RetryAt)
	assert.Equal(t, kindRateLimited, e.kind())
}

func TestUserMessages(t *testing.T) {
	now := time.Now()
	netErr := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		name string
		e    *Error
		kind errorKind
		want string // a phrase the message must contain
	}{
		{"rate limited", &Error{StatusCode: 429, Retryable: true}, kindRateLimited, "in a moment"},
		{"rate limited, seconds", &Error{StatusCode: 429, RetryAt: now.Add(20 * time.Second)}, kindRateLimited, "in about 20 seconds"},
		{"rate limited, soon", &Error{StatusCode: 429, RetryAt: now.Add(3 * time.Second)}, kindRateLimited, "in a few seconds"},
		{"rate limited, minutes", &Error{StatusCode: 429, RetryAt: now.Add(10*time.Minute + 5*time.Second)}, kindRateLimited, "in about 10 minutes"},
		{"rate limited, hours", &Error{StatusCode: 429, RetryAt: now.Add(5 * time.Hour)}, kindRateLimited, "later"},
		{"rate limit error type", &Error{StatusCode: 400, ProviderType: "rate_limit_error"}, kindRateLimited, "too many requests"},
		{"github secondary limit", &Error{StatusCode: 403, ProviderType: "secondary_rate_limit"}, kindRateLimited, "too many requests"},
		{"quota", &Error{StatusCode: 429, ProviderType: "insufficient_quota"}, kindQuota, "billing"},
		{"overloaded 529", &Error{StatusCode: 529, ProviderType: "overloaded_error"}, kindOverloaded, "busy"},
		{"overloaded 503", &Error{StatusCode: 503}, kindOverloaded, "busy"},
		{"overloaded, told when", &Error{StatusCode: 529, RetryAt: now.Add(2 * time.Second)}, kindOverloaded, "in a few seconds"},
		{"overloaded, unknown when", &Error{StatusCode: 529}, kindOverloaded, "in a few minutes"},
		{"server error, told when", &Error{StatusCode: 500, RetryAt: now.Add(70 * time.Second)}, kindServer, "in about a minute"},
		{"breaker, minutes", &Error{Err: ErrCircuitOpen, RetryAt: now.Add(3 * time.Minute)}, kindUnavailable, "in about 3 minutes"},
		{"server 500", &Error{StatusCode: 500, ProviderType: "api_error"}, kindServer, "temporary problem"},
		{"server 502", &Error{StatusCode: 502}, kindServer, "temporary problem"},
		{"not implemented", &Error{StatusCode: 501}, kindUnknown, "went wrong"},
		{"timeout 408", &Error{StatusCode: 408}, kindTimeout, "too long"},
		{"timeout 504", &Error{StatusCode: 504}, kindTimeout, "too long"},
		{"attempt timeout", &Error{Err: fmt.Errorf("%w: %w", errAttemptTimeout, context.Canceled), Attempts: 6}, kindTimeout, "too long"},
		{"deadline", &Error{Err: context.DeadlineExceeded}, kindTimeout, "too long"},
		{"canceled", &Error{Err: context.Canceled}, kindCanceled, "stopped"},
		{"canceled after a 503", &Error{StatusCode: 503, Err: fmt.Errorf("%w: %w", context.Canceled, io.ErrUnexpectedEOF)}, kindCanceled, "stopped"},
		{"attempt timeout after a 503", &Error{StatusCode: 503, Err: fmt.Errorf("%w: %w", errAttemptTimeout, context.Canceled)}, kindOverloaded, "busy"},
		{"network", &Error{Err: netErr, Attempts: 6}, kindNetwork, "connection"},
		{"network, untyped", &Error{Err: io.ErrUnexpectedEOF}, kindNetwork, "connection"},
		{"bad request 400", &Error{StatusCode: 400, ProviderType: "invalid_request_error"}, kindBadRequest, "check what you entered"},
		{"unprocessable 422", &Error{StatusCode: 422}, kindBadRequest, "check what you entered"},
		{"too large 413", &Error{StatusCode: 413, ProviderType: "request_too_large"}, kindTooLarge, "smaller"},
		{"unauthorized 401", &Error{StatusCode: 401, ProviderType: "authentication_error"}, kindAuth, "access key"},
		{"forbidden 403", &Error{StatusCode: 403, ProviderType: "permission_error"}, kindForbidden, "permissions"},
		{"not found 404", &Error{StatusCode: 404, ProviderType: "not_found_error"}, kindNotFound, "couldn't find"},
		{"gone 410", &Error{StatusCode: 410}, kindNotFound, "couldn't find"},
		{"invalid request", &Error{Err: fmt.Errorf("%w: unsupported protocol scheme %q", ErrInvalidRequest, "ftp")}, kindLocal, "preparing the request"},
		{"body not replayable", &Error{Err: ErrBodyNotReplayable}, kindLocal, "preparing the request"},
		{"nothing known", &Error{}, kindUnknown, "went wrong"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.e.Method, tc.e.URL = "POST", "https://REDACTED@api.test/v1?api_key=REDACTED"
			tc.e.Message = "Bearer sk-ant-api03-Secret0123456789 at https://user:pw@api.test/"
			assert.Equal(t, tc.kind, tc.e.kind())
			msg := tc.e.UserMessage()
			assert.Contains(t, msg, tc.want)
			peAssertCalm(t, tc.e, msg)
		})
	}
}

// peAssertCalm checks a UserMessage: a sentence, with no status code, no
// protocol talk, no provider identifiers and no credentials.
func peAssertCalm(t *testing.T, e *Error, msg string) {
	t.Helper()
	require.NotEmpty(t, msg)
	assert.True(t, strings.HasSuffix(msg, "."), "ends with a full stop: %q", msg)
	assert.True(t, msg[0] >= 'A' && msg[0] <= 'Z', "starts with a capital: %q", msg)
	if e.StatusCode != 0 {
		assert.NotContains(t, msg, strconv.Itoa(e.StatusCode))
	}
	assert.NotContains(t, strings.ToLower(msg), "http")
	assert.NotContains(t, msg, "_", "no identifiers")
	if e.ProviderType != "" {
		assert.NotContains(t, msg, e.ProviderType)
	}
	for _, s := range []string{"sk-", "Secret", "pw@", "REDACTED", "api.test", "Bearer", "retryhttp", "error"} {
		assert.NotContains(t, msg, s)
	}
}

// peSecretURL carries credentials in the userinfo and the query.
const peSecretURL = "https://user:hunter2pw@api.test/v1/messages?api_key=SECRETKEY123&x=1"

var peSecrets = []string{"hunter2pw", "SECRETKEY123", "abcdefghijklmnopqrstuv", "user:"}

func peAssertNoSecrets(t *testing.T, text string) {
	t.Helper()
	for _, s := range peSecrets {
		assert.NotContains(t, text, s)
	}
}

func TestErrorSummaryHasTheFactsAndNoCredentials(t *testing.T) {
	mock, _ := scripted(t, step{status: 529, header: peHeader("request-id", "req_011CAbc"), body: anthropicOverloaded})
	base := peRoundTripperFunc(func(req *http.Request) (*http.Response, error) {
		// httpmock matches on the URL without credentials.
		r := req.Clone(req.Context())
		r.URL.User, r.URL.RawQuery = nil, ""
		return mock.RoundTrip(r)
	})
	req, err := http.NewRequest(http.MethodPost, peSecretURL, strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk-abcdefghijklmnopqrstuv")
	resp, err := New(base, WithClock(autoClock()), WithJitter(0), WithMaxRetries(2)).RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	e := peCheck(t, resp, nil)
	s := e.Error()
	for _, want := range []string{"POST", "api.test/v1/messages", "529 Overloaded", "overloaded_error", "Overloaded", "after 3 attempts", "req_011CAbc", "retries exhausted"} {
		assert.Contains(t, s, want)
	}
	peAssertNoSecrets(t, s)
	peAssertNoSecrets(t, e.URL)
	peAssertNoSecrets(t, e.UserMessage())
	peAssertCalm(t, e, e.UserMessage())
}

type peRoundTripperFunc func(*http.Request) (*http.Response, error)

func (f peRoundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestErrorSummaryOfTransportErrorHasNoCredentials(t *testing.T) {
	leak := fmt.Errorf(`Post %q: dial tcp 127.0.0.1:443: connect: connection refused (Authorization: Bearer sk-abcdefghijklmnopqrstuv): %w`,
		peSecretURL, syscall.ECONNREFUSED)
	var calls atomic.Int32
	base := peRoundTripperFunc(func(*http.Request) (*http.Response, error) {
		calls.Add(1)
		return nil, leak
	})
	req, err := http.NewRequest(http.MethodGet, peSecretURL, nil)
	require.NoError(t, err)
	_, err = New(base, WithClock(autoClock()), WithJitter(0), WithMaxRetries(1)).RoundTrip(req)
	require.Error(t, err)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	assert.EqualValues(t, 2, calls.Load())
	assert.Equal(t, 2, e.Attempts)
	assert.Same(t, e, CheckResponse(nil, err))
	s := e.Error()
	for _, want := range []string{"GET", "api.test/v1/messages", "request failed", "after 2 attempts", "retries exhausted", "connection refused"} {
		assert.Contains(t, s, want)
	}
	peAssertNoSecrets(t, s)
	peAssertNoSecrets(t, e.UserMessage())
	peAssertCalm(t, e, e.UserMessage())

	// The same error, not from us, through CheckResponse.
	e2 := peCheck(t, nil, leak)
	peAssertNoSecrets(t, e2.Error())
	peAssertNoSecrets(t, e2.UserMessage())
	assert.ErrorIs(t, e2, syscall.ECONNREFUSED)
}

func TestErrorSummaryQuotesAnInvalidMethod(t *testing.T) {
	e := &Error{Method: "GE\nT", Err: ErrInvalidRequest}
	assert.NotContains(t, e.Error(), "\n")
	assert.Contains(t, e.Error(), `"GE\nT"`)
}

func TestErrorSummaryForms(t *testing.T) {
	e := &Error{StatusCode: 418, Attempts: 1, Method: "GET", URL: "https://api.test/teapot"}
	assert.Equal(t, "retryhttp: GET api.test/teapot: 418 I'm a teapot after 1 attempt", e.Error())
	e = &Error{StatusCode: 599, Attempts: 2, ProviderType: "odd"}
	assert.Equal(t, "retryhttp: 599 (odd) after 2 attempts", e.Error())
	e = &Error{StatusCode: 400, Attempts: 1, Message: "bad"}
	assert.Equal(t, "retryhttp: 400 Bad Request (bad) after 1 attempt", e.Error())
}

func TestRetryHint(t *testing.T) {
	cases := map[string]time.Duration{
		"Please try again in 20s.":              20 * time.Second,
		"Please try again in 7.5s":              7500 * time.Millisecond,
		"Please try again in 6m0s.":             6 * time.Minute,
		"please TRY AGAIN IN 20MS":              20 * time.Millisecond,
		"try again in 30 seconds":               30 * time.Second,
		"try again in 1 minute":                 time.Minute,
		"try again in 2 hours":                  2 * time.Hour,
		"try again in 500 milliseconds":         500 * time.Millisecond,
		"try again in 0s":                       0,
		"try again later":                       0,
		"try again in a while":                  0,
		"try again in 99999999999999999999999h": 0,
		"":                                      0,
	}
	for msg, want := range cases {
		d, ok := retryHint(msg)
		assert.Equal(t, want, d, msg)
		assert.Equal(t, want > 0, ok, msg)
	}
}

// FuzzParseProviderError feeds arbitrary bodies and content types to the
// provider error parser. It must never panic, and what it keeps must be safe
// to log: valid UTF-8, bounded, and free of any API key that was in the body.
func FuzzParseProviderError(f *testing.F) {
	for _, b := range []string{
		anthropicOverloaded, anthropicRateLimit, openAIQuota, openAIRateLimit, openAIBadRequest, openAIBadKey,
		githubSecondary, githubNotFound, nginxBadGateway, envoyReset,
		`{"type":"error","error":{"type":"overloaded_er`, `{"error":"x"}`, `{"error":{"code":5}}`, "\xff\xfe{", "",
	} {
		f.Add([]byte(b), "application/json", uint16(len(b)/2))
	}
	f.Add([]byte(nginxBadGateway), "text/html", uint16(0))
	const key = "sk-proj-Ab12Cd34Ef56Gh78Ij90"
	f.Fuzz(func(t *testing.T, body []byte, contentType string, at uint16) {
		check := func(p providerError, fed []byte) {
			for name, s := range map[string]string{"message": p.Message, "type": p.Type, "request id": p.RequestID} {
				if !utf8.ValidString(s) {
					t.Fatalf("%s %q is not valid UTF-8", name, s)
				}
				if strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }) {
					t.Fatalf("%s %q holds control characters", name, s)
				}
			}
			if n := utf8.RuneCountInString(p.Message); n > maxMessage+1 || n == maxMessage+1 && !strings.HasSuffix(p.Message, "…") {
				t.Fatalf("message of %d runes", n)
			}
			if utf8.RuneCountInString(p.Type) > maxField+1 || utf8.RuneCountInString(p.RequestID) > maxField+1 {
				t.Fatalf("type %q or request id %q too long", p.Type, p.RequestID)
			}
			if p.RetryIn < 0 || p.RetryIn > maxServerWait {
				t.Fatalf("RetryIn %v", p.RetryIn)
			}
			if bytes.Count(fed, []byte("Ab12Cd34")) == 1 {
				for _, s := range []string{p.Message, p.Type, p.RequestID} {
					if strings.Contains(s, "Ab12Cd34") {
						t.Fatalf("key leaked: %q", s)
					}
				}
			}
		}
		check(parseProviderError(body, contentType), body)
		// The same body with an API key in it, at a word boundary.
		i := min(int(at), len(body))
		fed := append(append(append([]byte(nil), body[:i]...), " "+key+" "...), body[i:]...)
		check(parseProviderError(fed, contentType), fed)
	})
}

// peCredentialCases are credentials of no known shape, as a request carries
// them, and the part of each that a provider might echo back.
var peCredentialCases = []struct{ name, header, value, echoed string }{
	{"x-api-key", "X-Api-Key", "XAPIKEY-3f9a2c7e5b1d4a6c", "XAPIKEY-3f9a2c7e5b1d4a6c"},
	{"api-key", "Api-Key", "azk3f9a2c7e5b1d4a6c8e0f", "azk3f9a2c7e5b1d4a6c8e0f"},
	{"bearer token", "Authorization", "Bearer tok3f9a2c7e5b1d", "tok3f9a2c7e5b1d"},
	{"whole authorization", "Authorization", "ApiKey 3f9a2c7e5b1d", "ApiKey 3f9a2c7e5b1d"},
	{"basic", "Authorization", "Basic dXNlcjpodW50ZXIy", "dXNlcjpodW50ZXIy"},
	{"cookie value", "Cookie", "theme=dark; sid=c00k1e5ecret42", "c00k1e5ecret42"},
	{"lower-case header name", "x-api-key", "lck3f9a2c7e5b1d4a", "lck3f9a2c7e5b1d4a"},
}

// A provider error body that echoes the request's own credential does not
// carry it into Error.Message or Error(), whatever its shape.
func TestErrorRedactsTheRequestsOwnCredentials(t *testing.T) {
	for _, tc := range peCredentialCases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				fmt.Fprintf(w, `{"error":{"type":"authentication_error","message":"the credential %s is not valid"}}`, tc.echoed)
			}))
			defer srv.Close()
			rt := New(nil, WithMaxRetries(0))
			defer rt.CloseIdleConnections()
			req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/models", nil)
			require.NoError(t, err)
			req.Header[tc.header] = []string{tc.value} // as set, even uncanonical
			resp, err := rt.RoundTrip(req)
			require.NoError(t, err)
			defer resp.Body.Close()

			e := peCheck(t, resp, nil)
			assert.Contains(t, e.Message, "is not valid", "the message is kept")
			assert.Contains(t, e.Message, "REDACTED")
			for _, text := range []string{e.Message, e.Error(), e.URL, e.UserMessage()} {
				assert.NotContains(t, text, tc.echoed)
			}
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Contains(t, string(body), tc.echoed, "the body itself is the caller's, untouched")
		})
	}
}

// A transport error that quotes the request's credential (a proxy's, a
// custom base's) does not carry it into Error(), the hooks or the log, nor
// does a URL that holds it in its path.
func TestTransportErrorRedactsTheRequestsOwnCredentials(t *testing.T) {
	for _, tc := range peCredentialCases {
		t.Run(tc.name, func(t *testing.T) {
			base := peRoundTripperFunc(func(*http.Request) (*http.Response, error) {
				return nil, &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("proxy refused %s: %w", tc.echoed, syscall.ECONNREFUSED)}
			})
			var logs bytes.Buffer
			var events []string
			record := func(e Event) {
				events = append(events, e.URL, e.Reason)
				if e.Err != nil {
					events = append(events, e.Err.Error())
				}
			}
			rt := New(base, WithClock(autoClock()), WithMaxRetries(1), WithBackoff(time.Millisecond, time.Millisecond), WithJitter(0),
				WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
				WithHooks(Hooks{OnAttempt: record, OnRetry: record, OnGiveUp: record}))
			req, err := http.NewRequest(http.MethodGet, "https://api.test/v1/keys/"+url.PathEscape(tc.echoed)+"/usage", nil)
			require.NoError(t, err)
			req.Header[tc.header] = []string{tc.value}
			_, err = rt.RoundTrip(req)
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.ErrorIs(t, err, syscall.ECONNREFUSED, "the cause is still reached")
			assert.Contains(t, e.Error(), "proxy refused REDACTED")
			require.NotEmpty(t, events)
			for _, text := range append(events, e.Error(), e.URL, e.StopReason, logs.String()) {
				assert.NotContains(t, text, tc.echoed)
				assert.NotContains(t, text, url.PathEscape(tc.echoed))
			}
			assert.Contains(t, logs.String(), "proxy refused REDACTED")
		})
	}
}

// CheckResponse redacts the credentials of a response's request even when
// the response did not come through the transport, and copes without one.
func TestCheckResponseRedactsCredentialsOfAnyResponse(t *testing.T) {
	resp := peResponse(403, nil, `{"message":"key XAPIKEY-3f9a2c7e5b1d4a6c has no access"}`)
	resp.Request.Header.Set("X-Api-Key", "XAPIKEY-3f9a2c7e5b1d4a6c")
	e := peCheck(t, resp, nil)
	assert.Equal(t, "key REDACTED has no access", e.Message)
	assert.NotContains(t, e.Error(), "XAPIKEY-3f9a2c7e5b1d4a6c")

	resp.Request = nil
	assert.NotPanics(t, func() { peCheck(t, resp, nil) })

	// Short header values are not redacted literally: they would blank out
	// common words wherever they appear.
	resp = peResponse(401, nil, `{"error":{"message":"the key abc is not valid"}}`)
	resp.Request.Header.Set("X-Api-Key", "abc")
	assert.Equal(t, "the key abc is not valid", peCheck(t, resp, nil).Message)

	leak := fmt.Errorf("proxy refused XAPIKEY-3f9a2c7e5b1d4a6c: %w", syscall.ECONNREFUSED)
	req, _ := http.NewRequest(http.MethodGet, "https://api.test/", nil)
	req.Header.Set("X-Api-Key", "XAPIKEY-3f9a2c7e5b1d4a6c")
	e = peCheck(t, &http.Response{StatusCode: 502, Request: req, Header: http.Header{}, Body: http.NoBody}, leak)
	assert.NotContains(t, e.Error(), "XAPIKEY-3f9a2c7e5b1d4a6c")
	assert.ErrorIs(t, e, syscall.ECONNREFUSED)
}
