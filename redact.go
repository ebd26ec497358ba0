package retryhttp

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
)

// Credentials never leave the transport in text: every URL, error message,
// log line, hook argument and upstream key the library writes goes through
// these functions. Three things are hidden:
//
//   - the request's own credentials: the values of its Authorization,
//     Proxy-Authorization, X-Api-Key, Api-Key and Cookie headers, wherever
//     they appear (a provider that echoes the key back, a proxy that quotes
//     it, a URL that holds it), literally;
//   - credentials of known forms in any text: URL userinfo, secret-looking
//     key=value and "key": "value" pairs (secretQueryKey), Bearer/Basic
//     credentials and well-known API key shapes;
//   - WithKeyFunc values, which are written out only as a fingerprint.

const redacted = "REDACTED"

// secretNameParts make a parameter name secret wherever they appear in it,
// case-insensitively (api_key, access_token, X-Amz-Signature, ...).
// Matching on parts errs towards hiding too much ("monkey=") rather than too
// little.
var secretNameParts = []string{"key", "token", "secret", "passw", "pwd", "signature", "credential", "auth", "session", "jwt", "hmac", "assertion"}

// secretNameWords make a name secret as one of its words (split at '_', '-'
// and '.'): "pass" and "pw" match "user_pass" and "db_pw", but as parts they
// would hide "compass" and "bypass".
var secretNameWords = []string{"sig", "pass", "pw", "otp"}

// secretQueryKey reports whether the value of the query parameter (or
// key=value pair, or JSON field) named k is a credential. Case does not
// matter. The name is secret when it
//
//   - contains key, token, secret, passw (password, passwd), pwd,
//     signature, credential, auth, session, jwt, hmac or assertion;
//   - has sig, pass, pw or otp as a word: the whole name or a part between
//     '_', '-' or '.' ("url_sig", "user_pass", "db_pw");
//   - is code: an OAuth authorization code ("error_code" is not).
func secretQueryKey(k string) bool {
	k = strings.ToLower(k)
	if k == "code" {
		return true
	}
	for _, s := range secretNameParts {
		if strings.Contains(k, s) {
			return true
		}
	}
	for _, w := range strings.FieldsFunc(k, func(r rune) bool { return r == '_' || r == '-' || r == '.' }) {
		for _, s := range secretNameWords {
			if w == s {
				return true
			}
		}
	}
	return false
}

// redactURL renders u without its userinfo, its fragment (never sent, and
// where OAuth puts tokens) and with secret-looking values replaced, in the
// query (see secretQueryKey for the names) and anywhere else in the text.
func redactURL(u *url.URL) string { return (*credentials)(nil).url(u) }

// credentialHeaders are the request headers whose values are credentials.
var credentialHeaders = []string{"Authorization", "Proxy-Authorization", "X-Api-Key", "Api-Key", "Cookie"}

// minCredential is the shortest header value redacted literally: a shorter
// one ("abc", "1") would blank out ordinary words and numbers.
const minCredential = 6

// credentials are the literal values of one request's credential headers,
// to be taken out of any text written about that request. Errors hold them
// through a pointer, so printing an Error with %#v shows an address, not
// the values.
type credentials struct {
	values []string // longest first: a whole value goes before a part of it
}

// credentialsOf collects req's credentials: each credential header value,
// the token of an Authorization ("Bearer <token>", "Basic <x>"), each cookie
// value, and their URL-escaped forms, as a URL in an error quotes them. It
// returns nil when there are none.
func credentialsOf(req *http.Request) *credentials {
	if req == nil {
		return nil
	}
	var vs []string
	for name, values := range req.Header { // not Header.Values: a name set uncanonical counts too
		for _, v := range values {
			vs = append(vs, credentialParts(name, v)...)
		}
	}
	return newCredentials(vs)
}

// credentialParts returns what of header value v is a credential: none
// unless name is a credential header; the value itself, and the token of an
// Authorization or each value of a Cookie.
func credentialParts(name, v string) []string {
	i := 0
	for i < len(credentialHeaders) && !strings.EqualFold(name, credentialHeaders[i]) {
		i++
	}
	if i == len(credentialHeaders) {
		return nil
	}
	parts := []string{v}
	switch credentialHeaders[i] {
	case "Authorization", "Proxy-Authorization":
		if _, token, ok := strings.Cut(strings.TrimSpace(v), " "); ok {
			parts = append(parts, token)
		}
	case "Cookie":
		for _, c := range strings.Split(v, ";") {
			if _, val, ok := strings.Cut(c, "="); ok {
				parts = append(parts, strings.Trim(strings.TrimSpace(val), `"`))
			}
		}
	}
	return parts
}

// newCredentials keeps the values long enough to redact, with their escaped
// forms, longest first and without repeats.
func newCredentials(parts []string) *credentials {
	seen := map[string]bool{}
	var vs []string
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if len(p) < minCredential {
			continue
		}
		for _, form := range []string{p, url.QueryEscape(p), url.PathEscape(p)} {
			if !seen[form] {
				seen[form] = true
				vs = append(vs, form)
			}
		}
	}
	if len(vs) == 0 {
		return nil
	}
	sort.SliceStable(vs, func(i, j int) bool { return len(vs[i]) > len(vs[j]) })
	return &credentials{values: vs}
}

// literal replaces every credential value in s. A nil cr has none.
func (cr *credentials) literal(s string) string {
	if cr == nil || s == "" {
		return s
	}
	for _, v := range cr.values {
		s = strings.ReplaceAll(s, v, redacted)
	}
	return s
}

// text redacts s: the request's own credentials first, so that no pattern
// can cut one short, then whatever redactText finds.
func (cr *credentials) text(s string) string { return redactText(cr.literal(s)) }

// url is redactURL that also takes the request's credentials out.
func (cr *credentials) url(u *url.URL) string {
	if u == nil {
		return ""
	}
	r := *u
	if r.User != nil {
		r.User = url.User(redacted)
	}
	r.Fragment, r.RawFragment = "", ""
	return cr.text(r.String())
}

// fingerprint names a WithKeyFunc value in text: "key:" and the first 8
// bytes of its SHA-256, in hex. It is the same in every process, so a fleet
// sharing a quota backend agrees on it, and different keys stay apart; the
// value cannot be read back from it.
func fingerprint(custom string) string {
	sum := sha256.Sum256([]byte(custom))
	return "key:" + hex.EncodeToString(sum[:8])
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
//
// Each pattern runs only on text that holds what any match of it must (an
// '@' after a "://", a '"', one of the scheme words, one of the key
// prefixes): most text (a status line, a URL without credentials) has none,
// and hooks and logs redact text on every attempt.
func redactText(s string) string {
	if s == "" {
		return s
	}
	if strings.IndexByte(s, '@') >= 0 && strings.Contains(s, "://") {
		s = userinfoPattern.ReplaceAllString(s, "${1}"+redacted+"@")
	}
	s = redactPairs(s)
	if strings.IndexByte(s, '"') >= 0 {
		s = jsonPairPattern.ReplaceAllStringFunc(s, func(m string) string {
			sub := jsonPairPattern.FindStringSubmatch(m)
			if !secretQueryKey(sub[1]) {
				return m
			}
			return `"` + sub[1] + `"` + sub[2] + `"` + redacted + `"`
		})
	}
	if !ascii(s) || containsFold(s, "bearer") || containsFold(s, "basic") || containsFold(s, "token") {
		s = schemePattern.ReplaceAllString(s, "${1} "+redacted)
	}
	if mayHoldToken(s) {
		s = tokenPattern.ReplaceAllString(s, redacted)
	}
	return s
}

// ascii reports whether s is all ASCII: containsFold compares bytes, and
// (?i) folds a few other runes to ASCII letters (the Kelvin sign to k).
func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// mayHoldToken reports whether s holds what every match of tokenPattern
// holds: one of its prefixes ("k_live_" and "k_test_" for [sr]k_...).
func mayHoldToken(s string) bool {
	for _, p := range []string{"sk-", "k_live_", "k_test_", "gh", "github_pat_", "xox", "AKIA", "AIza"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
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

// redactedError presents an error with its message redacted (the request's
// credentials included), while errors.Is and errors.As still reach the
// original.
type redactedError struct {
	err   error
	creds *credentials
}

func (e redactedError) Error() string { return e.creds.text(e.err.Error()) }
func (e redactedError) Unwrap() error { return e.err }
