package retryhttp

import (
	"net/url"
	"regexp"
	"strings"
)

// Credentials never leave the transport in text: every URL and error message
// that reaches an Error, a log line or a hook goes through these functions.
// Headers (Authorization, x-api-key, api-key, Cookie) are never written out at
// all.

const redacted = "REDACTED"

// secretQueryKeys are query parameter names, in part or whole, that carry
// credentials (api_key, access_token, X-Amz-Signature, sig, ...).
var secretQueryKeys = []string{"key", "token", "secret", "passw", "pwd", "signature", "credential", "auth", "session"}

func secretQueryKey(k string) bool {
	k = strings.ToLower(k)
	if k == "sig" || k == "code" {
		return true
	}
	for _, s := range secretQueryKeys {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// redactURL renders u without its userinfo and with secret-looking query
// values replaced.
func redactURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	r := *u
	if r.User != nil {
		r.User = url.User(redacted)
	}
	if r.RawQuery != "" {
		r.RawQuery = redactQuery(r.RawQuery)
	}
	return r.String()
}

// redactQuery replaces the values of secret-looking keys in a raw query,
// leaving the rest byte for byte as it was.
func redactQuery(q string) string {
	parts := strings.Split(q, "&")
	for i, p := range parts {
		k, _, hasValue := strings.Cut(p, "=")
		if dk, err := url.QueryUnescape(k); err == nil {
			k = dk
		}
		if hasValue && secretQueryKey(k) {
			parts[i] = p[:strings.IndexByte(p, '=')+1] + redacted
		}
	}
	return strings.Join(parts, "&")
}

var (
	userinfoPattern = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s"'<>]+@`)
	queryPattern    = regexp.MustCompile(`([?&;][^=&\s"'<>#]+)=([^&\s"'<>#]*)`)
	schemePattern   = regexp.MustCompile(`(?i)\b(bearer|basic|token)\s+[a-z0-9._~+/=-]{8,}`)
	tokenPattern    = regexp.MustCompile(`\b(sk-[a-zA-Z0-9_-]{8,}|sk-ant-[a-zA-Z0-9_-]{8,}|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}|xox[abprs]-[A-Za-z0-9-]{8,}|AKIA[0-9A-Z]{16})`)
)

// redactText removes credentials from free text such as an error message
// that may quote a URL or echo a key: URL userinfo, secret-looking query
// values, Bearer/Basic credentials and well-known API key shapes.
func redactText(s string) string {
	if s == "" {
		return s
	}
	s = userinfoPattern.ReplaceAllString(s, "${1}"+redacted+"@")
	s = queryPattern.ReplaceAllStringFunc(s, func(m string) string {
		k, _, _ := strings.Cut(m[1:], "=")
		if secretQueryKey(k) {
			return m[:1] + k + "=" + redacted
		}
		return m
	})
	s = schemePattern.ReplaceAllString(s, "${1} "+redacted)
	return tokenPattern.ReplaceAllString(s, redacted)
}

// redactedError presents an error with its message redacted, while errors.Is
// and errors.As still reach the original.
type redactedError struct{ err error }

func (e redactedError) Error() string { return redactText(e.err.Error()) }
func (e redactedError) Unwrap() error { return e.err }
