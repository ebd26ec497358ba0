package retryhttp

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRedactURL(t *testing.T) {
	cases := []struct {
		in, want string
	}{
		{"https://api.test/v1/messages", "https://api.test/v1/messages"},
		{"https://user:secret@api.test/v1", "https://REDACTED@api.test/v1"},
		{"https://tokenonly@api.test/v1", "https://REDACTED@api.test/v1"},
		{"https://api.test/v1?api_key=SECRET&x=1", "https://api.test/v1?api_key=REDACTED&x=1"},
		{"https://api.test/v1?x=1&access_token=SECRET", "https://api.test/v1?x=1&access_token=REDACTED"},
		{"https://api.test/v1?key=SECRET", "https://api.test/v1?key=REDACTED"},
		{"https://api.test/v1?apikey=SECRET&API-KEY=S2", "https://api.test/v1?apikey=REDACTED&API-KEY=REDACTED"},
		{"https://api.test/v1?client_secret=S&password=P&pwd=Q", "https://api.test/v1?client_secret=REDACTED&password=REDACTED&pwd=REDACTED"},
		{"https://api.test/v1?code=OAUTHCODE&state=xyz", "https://api.test/v1?code=REDACTED&state=xyz"},
		{"https://api.test/v1?sessionid=S", "https://api.test/v1?sessionid=REDACTED"},
		{"https://b.s3.test/o?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F20261130&X-Amz-Signature=abc123&X-Amz-Security-Token=T",
			"https://b.s3.test/o?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED&X-Amz-Security-Token=REDACTED"},
		{"https://acct.blob.test/c/b?sv=2022-11-02&se=2026-12-01&sp=r&sig=SIGVALUE%3D", "https://acct.blob.test/c/b?sv=2022-11-02&se=2026-12-01&sp=r&sig=REDACTED"},
		{"https://api.test/v1?api%5Fkey=SECRET", "https://api.test/v1?api%5Fkey=REDACTED"},
		{"https://api.test/v1?model=claude&max=5&q=hello+world&page=2", "https://api.test/v1?model=claude&max=5&q=hello+world&page=2"},
		{"https://api.test/v1?api_key=&x=1", "https://api.test/v1?api_key=&x=1"},
		{"https://api.test/cb#access_token=SECRET&state=1", "https://api.test/cb"},
		{"https://api.test/v1/keys/sk-ant-api03-abcdefghijkl", "https://api.test/v1/keys/REDACTED"},
		{"http://[::1]:8080/p?token=T", "http://[::1]:8080/p?token=REDACTED"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			u, err := url.Parse(tc.in)
			require.NoError(t, err)
			before := u.String()
			assert.Equal(t, tc.want, redactURL(u))
			assert.Equal(t, before, u.String(), "the URL itself is untouched")
		})
	}
	assert.Equal(t, "", redactURL(nil))
}

func TestRedactText(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"no secrets", "dial tcp 127.0.0.1:443: connect: connection refused", "dial tcp 127.0.0.1:443: connect: connection refused"},
		{"empty", "", ""},
		{"quoted url", `Get "https://user:pw@api.test/v1?api_key=SECRET&x=1": EOF`, `Get "https://REDACTED@api.test/v1?api_key=REDACTED&x=1": EOF`},
		{"url as net/http strips it", `Get "https://user:***@api.test/v1": EOF`, `Get "https://REDACTED@api.test/v1": EOF`},
		{"password with @", "https://user:p@ss@api.test/v1", "https://REDACTED@api.test/v1"},
		{"userinfo, other scheme", "redis://default:pw@cache.test:6379/0", "redis://REDACTED@cache.test:6379/0"},
		{"at sign in the query is not userinfo", "https://api.test/v1?email=a@b.test", "https://api.test/v1?email=a@b.test"},
		{"email address", "contact ops@example.test", "contact ops@example.test"},
		{"bearer", "Authorization: Bearer abcdefghijklmnop", "Authorization: Bearer REDACTED"},
		{"bearer, lower case", "authorization: bearer abc.def.ghi-jkl", "authorization: bearer REDACTED"},
		{"basic", "Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: Basic REDACTED"},
		{"short bearer word kept", "a bearer of news", "a bearer of news"},
		{"openai key", "Incorrect API key provided: sk-proj-Zq9XwV8uT7sR6pO5nM4.", "Incorrect API key provided: REDACTED."},
		{"anthropic key", "x-api-key: sk-ant-api03-AbCdEf0123456789_-xyz", "x-api-key: REDACTED"},
		{"github classic", "token ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 rejected", "token REDACTED rejected"},
		{"github classic alone", "ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 rejected", "REDACTED rejected"},
		{"github fine-grained", "github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "REDACTED"},
		{"stripe", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "REDACTED"},
		{"slack", "xoxb-1234-5678-abcdefgh", "REDACTED"},
		{"aws key id", "AKIAIOSFODNN7EXAMPLE", "REDACTED"},
		{"google", "key AIzaSyA1234567890abcdefghijklmnopqrstu", "key REDACTED"},
		{"free text pair", "invalid api_key=SECRET given", "invalid api_key=REDACTED given"},
		{"pair hidden in a value", "https://api.test/v1?x=?api_key=SECRET", "https://api.test/v1?x=?api_key=REDACTED"},
		{"semicolon pair", "https://api.test/v1?x=1;token=SECRET", "https://api.test/v1?x=1;token=REDACTED"},
		{"value with equals", "access_token=abc==&x=1", "access_token=REDACTED&x=1"},
		{"json pair", `{"api_key": "SECRET", "model": "m"}`, `{"api_key": "REDACTED", "model": "m"}`},
		{"json escaped quote", `{"client_secret":"a\"b"}`, `{"client_secret":"REDACTED"}`},
		{"non-secret pair kept", "model=claude&max_retries=3", "model=claude&max_retries=3"},
		{"word ending in sk- kept", "task-abcdefghijk", "task-abcdefghijk"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, redactText(tc.in))
			assert.Equal(t, tc.want, redactText(tc.want), "idempotent")
		})
	}
}

func TestSecretQueryKey(t *testing.T) {
	for _, k := range []string{"api_key", "apiKey", "key", "access_token", "refresh_token", "X-Amz-Signature", "X-Amz-Credential", "sig", "SIG", "code", "client_secret", "password", "passwd", "pwd", "auth", "session_id", "subscription-key"} {
		assert.True(t, secretQueryKey(k), k)
	}
	for _, k := range []string{"model", "x", "q", "page", "limit", "stream", "sv", "se", "sp", "signed", "state", "version"} {
		assert.False(t, secretQueryKey(k), k)
	}
}

func TestRedactedErrorKeepsTheChain(t *testing.T) {
	cause := errors.New("root")
	err := redactedError{err: fmt.Errorf("Get %q: %w", "https://u:pw@api.test/?token=T", cause)}
	assert.ErrorIs(t, err, cause)
	assert.Equal(t, `Get "https://REDACTED@api.test/?token=REDACTED": root`, err.Error())
}

// FuzzRedactText places a secret in a URL's userinfo, in an api_key query
// value and after Bearer, inside arbitrary text; shape picks how the URL is
// written. Whatever surrounds them, the output must not contain the secret,
// and redaction must not panic.
func FuzzRedactText(f *testing.F) {
	f.Add("", "hunter2secret", "", uint8(0))
	f.Add(`Get "`, "s3cr3tvalue", `": dial tcp: connection refused`, uint8(1))
	f.Add("?x=", "abcdefgh", "&y=2", uint8(2))
	f.Add("a://b@c", "pw1234567", "#frag", uint8(3))
	f.Add("x=1;", "topsecret99", ";z", uint8(12))
	f.Add("\xff\xfe", "k", "\x00", uint8(21))
	f.Add(`{"api_key":"`, "zzzzzzzzzz", `"}`, uint8(255))
	userinfos := []string{"u:%s@", "%s@", "u:p@%s@", "u%%40x:%s@"}
	queries := []string{"?x=1&api_key=%s", "?api_key=%s", "?x=1;api_key=%s", "?x=?api_key=%s", "?x=1&API_KEY=%s", " api_key=%s"}
	f.Fuzz(func(t *testing.T, prefix, secret, suffix string, shape uint8) {
		// The secret is lower-case letters and digits, so the REDACTED that
		// replaces it can never spell it again.
		const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
		var b strings.Builder
		for i := 0; i < len(secret); i++ {
			b.WriteByte(alphabet[int(secret[i])%len(alphabet)])
		}
		sec := b.String()
		if len(sec) < 8 {
			sec += "q7x9k2m4"[:8-len(sec)]
		}
		in := prefix + "https://" + fmt.Sprintf(userinfos[int(shape)%len(userinfos)], sec) + "api.test/v1" +
			fmt.Sprintf(queries[int(shape)/len(userinfos)%len(queries)], sec) + " Authorization: Bearer " + sec + suffix
		if strings.Count(in, sec) != 3 {
			return // the surrounding text holds the secret itself
		}
		out := redactText(in)
		if strings.Contains(out, sec) {
			t.Fatalf("secret %q survived:\n in: %q\nout: %q", sec, in, out)
		}
		if redactText(out) != out {
			t.Fatalf("not idempotent: %q", out)
		}
		// Nothing but redaction happens: text without secrets is kept.
		if plain := prefix + suffix; !strings.ContainsAny(plain, "@=:") && !strings.Contains(strings.ToLower(plain), "bearer") &&
			!strings.Contains(strings.ToLower(plain), "basic") && !strings.Contains(strings.ToLower(plain), "token") &&
			!tokenPattern.MatchString(plain) && redactText(plain) != plain {
			t.Fatalf("text without secrets changed: %q -> %q", plain, redactText(plain))
		}
	})
}

// secretQueryNames are the parameter names whose values must be redacted:
// each name of the documented list (secretQueryKey), alone and inside
// longer names.
var secretQueryNames = []string{
	"token", "access_token", "id_token", "key", "api_key", "apikey", "subscription-key",
	"secret", "client_secret", "sig", "url_sig", "signature", "X-Amz-Signature",
	"password", "passwd", "pass", "user_pass", "pwd", "pw", "db_pw",
	"auth", "oauth", "credential", "X-Amz-Credential", "jwt", "id_jwt",
	"hmac", "hmac_sha256", "session", "sessionid", "code", "otp", "client_assertion",
}

func TestSecretQueryValuesAreRedactedForEveryListedName(t *testing.T) {
	for _, name := range secretQueryNames {
		t.Run(name, func(t *testing.T) {
			u, err := url.Parse("https://api.test/v1?model=m&" + name + "=s3cr3tv4lue&page=2")
			require.NoError(t, err)
			assert.Equal(t, "https://api.test/v1?model=m&"+name+"=REDACTED&page=2", redactURL(u))
			assert.Equal(t, "rejected "+name+"=REDACTED here", redactText("rejected "+name+"=s3cr3tv4lue here"))
			assert.Equal(t, `{"`+name+`":"REDACTED"}`, redactText(`{"`+name+`":"s3cr3tv4lue"}`))
		})
	}
	// Short names match as a whole word of the name only, so that common
	// words holding them keep their values.
	for _, name := range []string{"compass", "bypass", "passenger", "signed", "design", "pwr", "error_code", "zip_code", "lotpe"} {
		assert.False(t, secretQueryKey(name), name)
	}
}

// A secret query value is redacted in the URL an Error reports, for every
// listed name.
func TestErrorURLRedactsEveryListedQueryName(t *testing.T) {
	for _, name := range secretQueryNames {
		resp := &http.Response{StatusCode: 400, Header: http.Header{}, Body: http.NoBody}
		req, err := http.NewRequest(http.MethodGet, "https://api.test/v1?"+name+"=s3cr3tv4lue", nil)
		require.NoError(t, err)
		resp.Request = req
		var e *Error
		require.ErrorAs(t, CheckResponse(resp, nil), &e)
		assert.NotContains(t, e.URL, "s3cr3tv4lue", name)
		assert.NotContains(t, e.Error(), "s3cr3tv4lue", name)
	}
}
