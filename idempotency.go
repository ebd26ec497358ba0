package retryhttp

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"syscall"
)

// IdempotencyKeyHeader is the header that makes a POST safe to retry on
// servers that support it (Stripe's convention, used by many APIs).
const IdempotencyKeyHeader = "Idempotency-Key"

// WithIdempotencyKey stamps an Idempotency-Key header (a random UUIDv4) on
// every POST and PATCH that has none, the same key on every attempt of one
// request, so a server that honours the header runs the request at most once
// however many times it arrives. A key the caller set is kept as it is.
// Per request: [IdempotencyKey].
func WithIdempotencyKey() Option {
	return IdempotencyKey().forTransport()
}

// IdempotencyKey turns on, for one request, what [WithIdempotencyKey]
// turns on for every request: if it is a POST or PATCH without an
// Idempotency-Key header, every attempt carries the same random key. There
// is no per-request way to turn off a transport-wide WithIdempotencyKey.
func IdempotencyKey() RequestOption {
	return RequestOption{func(p *policy) { p.idempotencyKey = true }}
}

// WithIdempotencyGuard narrows retries of non-idempotent requests (POST and
// PATCH without an Idempotency-Key) to outcomes where the server clearly did
// not act on them: 429, 503 and 529 responses, and connections that failed
// before the request was sent (refused, DNS, dial errors). A 500, 502, 504, a
// timeout or a connection reset after sending is returned as it is, since the
// request may already have run.
//
// By default every method is retried on every transient outcome, as the
// official LLM SDKs do: their POSTs are generations, which cost money when
// repeated but no harm. Turn the guard on when a duplicate would do harm
// (payments, messages sent) and the server has no idempotency keys.
// Per request: [IdempotencyGuard].
func WithIdempotencyGuard() Option {
	return IdempotencyGuard().forTransport()
}

// IdempotencyGuard turns on, for one request, what [WithIdempotencyGuard]
// turns on for every request: if it is a POST or PATCH without an
// Idempotency-Key, it is retried only when the server surely did not act
// on it. There is no per-request way to turn off a transport-wide
// WithIdempotencyGuard.
func IdempotencyGuard() RequestOption {
	return RequestOption{func(p *policy) { p.idempotencyGuard = true }}
}

// stampHeaders returns the headers every attempt of req carries, or nil when
// they are the caller's own, unchanged.
func (p *policy) stampHeaders(req *http.Request) http.Header {
	if !p.idempotencyKey || !nonIdempotentMethod(req.Method) || req.Header.Get(IdempotencyKeyHeader) != "" {
		return nil
	}
	h := req.Header.Clone()
	if h == nil {
		h = make(http.Header, 1)
	}
	h.Set(IdempotencyKeyHeader, newUUID())
	return h
}

func nonIdempotentMethod(m string) bool {
	return m == http.MethodPost || m == http.MethodPatch
}

// unsafeToRetry reports whether the idempotency guard forbids retrying this
// outcome of this request.
func (c *call) unsafeToRetry(resp *http.Response, err error) bool {
	if !c.policy.idempotencyGuard || !nonIdempotentMethod(c.req.Method) {
		return false
	}
	if c.req.Header.Get(IdempotencyKeyHeader) != "" || c.header != nil {
		return false
	}
	if err != nil {
		return !notSent(err)
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable, StatusOverloaded:
		return false
	}
	return true
}

// notSent reports whether err shows the request never reached the server.
func notSent(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}
