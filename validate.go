package retryhttp

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// ErrInvalidRequest reports a request that can never succeed, however often it
// is sent: no URL or host, a scheme other than http or https, or a method,
// host or header that is not valid HTTP. It is detected before the first attempt.
var ErrInvalidRequest = errors.New("retryhttp: invalid request")

// validateRequest refuses a request that can never succeed (see
// ErrInvalidRequest). knownHost is a host found valid before, "" if none:
// a request to it skips the check of the host's bytes, the costliest part
// of the check for a request with a small header.
func validateRequest(req *http.Request, knownHost string) error {
	if req != nil && req.URL != nil && (req.URL.Scheme == "https" || req.URL.Scheme == "http") &&
		req.URL.Host != "" && req.URL.Host == knownHost && (req.Host == "" || req.Host == req.URL.Host) &&
		commonMethod(req.Method) && len(req.Header) == 0 {
		// Most requests: valid on their face, to a host found valid before,
		// with no header to check; the checks below, without their
		// messages in the way (cold code in a hot function spreads it over
		// more of the instruction cache).
		return nil
	}
	return checkRequest(req, knownHost)
}

// checkRequest is validateRequest for any request.
func checkRequest(req *http.Request, knownHost string) error {
	switch {
	case req == nil:
		return fmt.Errorf("%w: nil request", ErrInvalidRequest)
	case req.URL == nil:
		return fmt.Errorf("%w: nil URL", ErrInvalidRequest)
	case req.URL.Scheme != "http" && req.URL.Scheme != "https":
		return fmt.Errorf("%w: unsupported protocol scheme %q", ErrInvalidRequest, req.URL.Scheme)
	case req.URL.Host == "":
		return fmt.Errorf("%w: no host in URL", ErrInvalidRequest)
	case req.URL.Host != knownHost && !validHost(req.URL.Host):
		return fmt.Errorf("%w: invalid host %q", ErrInvalidRequest, req.URL.Host)
	case req.Host != "" && req.Host != req.URL.Host && !validHost(req.Host):
		return fmt.Errorf("%w: invalid host %q", ErrInvalidRequest, req.Host)
	case !commonMethod(req.Method) && !isToken(req.Method):
		return fmt.Errorf("%w: invalid method %q", ErrInvalidRequest, req.Method)
	}
	return validHeaders(req.Header)
}

// validHeaders checks a request's header: valid field names and values.
func validHeaders(h http.Header) error {
	n := len(h)
	if n == 0 {
		return nil // most GETs: no map iteration to start
	}
	if n <= len(commonRequestKeys) {
		// A few keys: when they are all common ones, looking them up
		// finds them all, cheaper than starting an iteration (which draws
		// random numbers for its order).
		found := 0
		for _, name := range commonRequestKeys {
			if values, ok := h[name]; ok {
				if err := validHeaderValues(name, values); err != nil {
					return err
				}
				if found++; found == n {
					return nil
				}
			}
		}
	}
	for name, values := range h {
		if !isToken(name) {
			return fmt.Errorf("%w: invalid header field name %q", ErrInvalidRequest, name)
		}
		if err := validHeaderValues(name, values); err != nil {
			return err
		}
	}
	return nil
}

// commonMethod reports the methods most requests use ("" is GET), all
// tokens: comparing with them costs less than checking every byte.
func commonMethod(m string) bool {
	switch m {
	case "", http.MethodGet, http.MethodPost:
		return true
	}
	return false
}

// commonRequestKeys are header keys, valid names, that requests with few
// headers often carry (see validateRequest).
var commonRequestKeys = [...]string{"Content-Type", "Authorization", "Accept"}

func validHeaderValues(name string, values []string) error {
	for _, v := range values {
		if !validHeaderValue(v) {
			return fmt.Errorf("%w: invalid value for header field %q", ErrInvalidRequest, name)
		}
	}
	return nil
}

// Byte classes, as tables: validation runs on every request.
var (
	tokenByte = byteClass(func(c byte) bool {
		return c > ' ' && c < 0x7f && strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) < 0
	})
	hostByte = byteClass(func(c byte) bool {
		return c > ' ' && c != 0x7f && strings.IndexByte("\"#/<>?@\\^`{|}", c) < 0
	})
	valueByte = byteClass(func(c byte) bool { return (c >= ' ' || c == '\t') && c != 0x7f })
)

func byteClass(in func(byte) bool) (t [256]bool) {
	for i := range t {
		t[i] = in(byte(i))
	}
	return t
}

// isToken reports whether s is an RFC 9110 token (header names, methods).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tokenByte[s[i]] {
			return false
		}
	}
	return true
}

// validHost reports whether h can be sent as a Host header. net/http refuses
// the rest with an untyped error, which would otherwise be retried as a
// network failure; a line break in it would also split the request. Bytes
// from 0x80 up pass: net/http converts international names to punycode.
func validHost(h string) bool {
	for i := 0; i < len(h); i++ {
		if !hostByte[h[i]] {
			return false
		}
	}
	return true
}

// validHeaderValue reports whether v holds no control bytes but tab, as
// net/http requires.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if !valueByte[v[i]] {
			return false
		}
	}
	return true
}

// methodOf names the request's method for errors and logs ("" for no
// request; net/http reads an empty method as GET).
func methodOf(req *http.Request) string {
	switch {
	case req == nil:
		return ""
	case req.Method == "":
		return http.MethodGet
	}
	return req.Method
}

func urlOf(req *http.Request) *url.URL {
	if req == nil {
		return nil
	}
	return req.URL
}
