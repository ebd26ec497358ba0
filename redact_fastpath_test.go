package retryhttp

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// redactTextAlways is redactText without its fast paths: every pattern on
// every text.
func redactTextAlways(s string) string {
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

// The fast paths skip a pattern only where it cannot match: texts made of
// the fragments every pattern looks for, in any order and case, come out
// the same either way.
func TestRedactTextFastPathsChangeNothing(t *testing.T) {
	fragments := []string{
		"https://", "user:pw@", "@", "://", "api.test/v1?", "api_key=", "SECRET123", "&", " ", "\"", "\"token\": ",
		"\"x\":\"y\"", "Bearer ", "bEaReR ", "basic ", "TOKEN ", "to\u212Aen ", "abcdefghijklmnop", "sk-", "sk-ant-",
		"rk_live_", "sk_test_", "ghp_", "github_pat_", "xoxb-", "AKIA", "ABCDEFGHIJKLMNOP", "AIza",
		"0123456789abcdefghijklmnopqrstuvwxyz", "503 Service Unavailable", "é", "\n", "=", "?",
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		var b strings.Builder
		for n := r.IntN(8); n >= 0; n-- {
			b.WriteString(fragments[r.IntN(len(fragments))])
		}
		s := b.String()
		if got, want := redactText(s), redactTextAlways(s); got != want {
			t.Fatalf("redactText(%q) = %q, want %q", s, got, want)
		}
	}
}

func BenchmarkRedactTextPlain(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		redactText("https://api.test/v1/models?model=m")
		redactText("503 Service Unavailable")
	}
}

func BenchmarkRedactTextPlainAlways(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		redactTextAlways("https://api.test/v1/models?model=m")
		redactTextAlways("503 Service Unavailable")
	}
}
