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
// credentials (api_key, access_token, X-Amz-Signature, sig, ...). Matching
// on parts errs towards hiding too much ("monkey=") rather than too little.
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

// redactURL renders u without its userinfo, its fragment (never sent, and
// where OAuth puts tokens) and with secret-looking values replaced, in the
// query and anywhere else in the text.
func redactURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	r := *u
	if r.User != nil {
		r.User = url.User(redacted)
	}
	r.Fragment, r.RawFragment = "", ""
	return redactText(r.String())
}

var (
	// userinfoPattern runs to the last '@' before the host ends, as url.Parse
	// does, so a password holding an '@' is hidden whole.
	userinfoPattern = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#\s"'<>]+@`)
	jsonPairPattern = regexp.MustCompile(`"([A-Za-z0-9_.-]{1,64})"(\s*:\s*)"(?:[^"\\]|\\.)*"`)
	schemePattern   = regexp.MustCompile(`(?i)\b(bearer|basic|token)\s+[a-z0-9._~+/=-]{8,}`)
	// tokenPattern matches well-known API key shapes: OpenAI and Anthropic
	// (sk-, sk-ant-), Stripe, GitHub, Slack, AWS access key ids, Google.
	tokenPattern = regexp.MustCompile(`\b(sk-[a-zA-Z0-9_-]{8,}|[sr]k_(?:live|test)_[A-Za-z0-9]{8,}|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}|xox[abprs]-[A-Za-z0-9-]{8,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,})`)
)

// redactText removes credentials from free text such as an error message
// that may quote a URL or echo a key: URL userinfo, secret-looking key=value
// and "key": "value" pairs, Bearer/Basic credentials and well-known API key
// shapes.
func redactText(s string) string {
	if s == "" {
		return s
	}
	s = userinfoPattern.ReplaceAllString(s, "${1}"+redacted+"@")
	s = redactPairs(s)
	s = jsonPairPattern.ReplaceAllStringFunc(s, func(m string) string {
		sub := jsonPairPattern.FindStringSubmatch(m)
		if !secretQueryKey(sub[1]) {
			return m
		}
		return `"` + sub[1] + `"` + sub[2] + `"` + redacted + `"`
	})
	s = schemePattern.ReplaceAllString(s, "${1} "+redacted)
	return tokenPattern.ReplaceAllString(s, redacted)
}

// redactPairs replaces the value of every key=value pair whose key looks
// secret, in a query or in free text. Each '=' is judged on its own, with the
// key read backwards from it, so a pair hidden in another pair's value
// ("?x=?api_key=S", "a=1;token=S") is found as well.
func redactPairs(s string) string {
	if strings.IndexByte(s, '=') < 0 {
		return s
	}
	var b strings.Builder
	done := 0 // s[:done] is settled
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			continue
		}
		k := i
		for k > done && isKeyByte(s[k-1]) {
			k--
		}
		if k == i || !secretQueryKey(unescapeKey(s[k:i])) {
			continue
		}
		j := i + 1
		for j < len(s) && !isValueEnd(s[j]) {
			j++
		}
		if j == i+1 {
			continue // no value to hide
		}
		b.WriteString(s[done : i+1])
		b.WriteString(redacted)
		done, i = j, j-1
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

func unescapeKey(k string) string {
	if dk, err := url.QueryUnescape(k); err == nil {
		return dk
	}
	return k
}

// isKeyByte reports whether c can be part of a parameter name. Separators of
// URLs and sentences end a name.
func isKeyByte(c byte) bool {
	return c > ' ' && c < 0x7f && strings.IndexByte(`=?&;#"'<>/,:(){}@\|`+"`", c) < 0
}

// isValueEnd reports whether c ends a parameter value.
func isValueEnd(c byte) bool {
	return c <= ' ' || strings.IndexByte(`&;#"'<>`+"`", c) >= 0
}

// redactedError presents an error with its message redacted, while errors.Is
// and errors.As still reach the original.
type redactedError struct{ err error }

func (e redactedError) Error() string { return redactText(e.err.Error()) }
func (e redactedError) Unwrap() error { return e.err }
