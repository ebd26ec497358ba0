package retryhttp

import (
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// na marks a count the server did not state, in rlq.
const na = -1

// rlq builds the Quota a test expects; na leaves a count unset, a zero
// reset leaves Reset unset.
func rlq(limit, remaining int64, reset time.Time) Quota {
	q := Quota{Reset: reset}
	if limit != na {
		q.Limit, q.HasLimit = limit, true
	}
	if remaining != na {
		q.Remaining, q.HasRemaining = remaining, true
	}
	return q
}

// coarse marks a quota whose reset is an absolute time in whole seconds.
func coarse(q Quota) Quota {
	q.Coarse = true
	return q
}

// requireRateLimits compares field by field, resets by instant (Equal), so
// a location or representation difference does not fail a right answer.
func requireRateLimits(t *testing.T, want, got RateLimits) {
	t.Helper()
	for _, d := range dimensions {
		w, g := *want.Quota(d), *got.Quota(d)
		assert.Truef(t, w.Reset.Equal(g.Reset), "%v reset: want %v, got %v", d, w.Reset, g.Reset)
		w.Reset, g.Reset = time.Time{}, time.Time{}
		assert.Equalf(t, w, g, "%v", d)
	}
	assert.Equal(t, want.Window, got.Window, "window")
	assert.Equal(t, want.Replenishing, got.Replenishing, "replenishing")
}

func TestParseRateLimits(t *testing.T) {
	now := testStart // Mon, 30 Nov 2026 12:00:00 UTC
	epoch := now.Unix()
	in := func(d time.Duration) time.Time { return now.Add(d) }
	itoa := func(n int64) string { return strconv.FormatInt(n, 10) }
	var never time.Time
	capped := now.Add(maxServerWait)

	cases := []struct {
		name string
		h    http.Header
		want RateLimits
	}{
		{"no headers", peHeader(), RateLimits{}},
		{"unrelated headers", peHeader("Content-Type", "application/json", "X-Request-Id", "req_1", "Retry-After", "5"), RateLimits{}},
		{"unknown rate-limit key", peHeader("X-Ratelimit-Bucket", "abc", "Ratelimitx", "5"), RateLimits{}},

		// IETF draft, current (RFC 9651 lists).
		{"IETF current", peHeader("RateLimit", `"default";r=50;t=30`, "RateLimit-Policy", `"default";q=100;w=60`),
			RateLimits{Requests: rlq(100, 50, in(30*time.Second)), Window: time.Minute}},
		{"IETF token names", peHeader("RateLimit", `default;r=5;t=1`, "RateLimit-Policy", `default;q=10;w=2`),
			RateLimits{Requests: rlq(10, 5, in(time.Second)), Window: 2 * time.Second}},
		{"IETF two policies, the tighter reported", peHeader(
			"RateLimit", `"burst";r=40;t=20, "daily";r=900;t=3600`,
			"RateLimit-Policy", `"burst";q=100;w=60, "daily";q=1000;w=86400`),
			RateLimits{Requests: rlq(100, 40, in(20*time.Second)), Window: time.Minute}},
		{"IETF two policies, the daily one binds", peHeader(
			"RateLimit", `"burst";r=40;t=20, "daily";r=5;t=3600`,
			"RateLimit-Policy", `"burst";q=100;w=60, "daily";q=1000;w=86400`),
			RateLimits{Requests: rlq(1000, 5, in(time.Hour)), Window: 24 * time.Hour}},
		{"IETF equal remaining: the later reset", peHeader(
			"RateLimit", `"a";r=0;t=5, "b";r=0;t=50`),
			RateLimits{Requests: rlq(na, 0, in(50*time.Second))}},
		{"IETF items across field lines", peHeader(
			"RateLimit", `"a";r=9;t=1`, "RateLimit", `"b";r=3;t=2`,
			"RateLimit-Policy", `"a";q=10`, "RateLimit-Policy", `"b";q=20;w=10`),
			RateLimits{Requests: rlq(20, 3, in(2*time.Second)), Window: 10 * time.Second}},
		{"IETF extra params, byte sequence, unit requests", peHeader(
			"RateLimit", `"default";r=50;t=30;pk=:cHsdsRa894==:`,
			"RateLimit-Policy", `"default";q=100;qu="requests";w=60;pk=:cHsdsRa894==:;x=?1;d=@1659578233;s=%"caf%c3%a9"`),
			RateLimits{Requests: rlq(100, 50, in(30*time.Second)), Window: time.Minute}},
		{"IETF parameter order does not matter", peHeader("RateLimit", `"p";t=7;r=1`, "RateLimit-Policy", `"p";w=1;q=2`),
			RateLimits{Requests: rlq(2, 1, in(7*time.Second)), Window: time.Second}},
		{"IETF tokens by name", peHeader(
			"RateLimit", `"requests";r=9;t=1, "tokens";r=900;t=1`,
			"RateLimit-Policy", `"requests";q=10;w=1, "tokens";q=1000;w=1`),
			RateLimits{Requests: rlq(10, 9, in(time.Second)), Tokens: rlq(1000, 900, in(time.Second)), Window: time.Second}},
		{"IETF input and output tokens by name", peHeader(
			"RateLimit", `"input-tokens";r=100;t=6, "Output_Tokens";r=10;t=7`,
			"RateLimit-Policy", `"input-tokens";q=1000;w=60, "Output_Tokens";q=200;w=60`),
			RateLimits{InputTokens: rlq(1000, 100, in(6*time.Second)), OutputTokens: rlq(200, 10, in(7*time.Second)), Window: time.Minute}},
		{"IETF tokens by unit", peHeader("RateLimit", `"tpm";r=7;t=3`, "RateLimit-Policy", `"tpm";q=8;qu="tokens"`),
			RateLimits{Tokens: rlq(8, 7, in(3*time.Second))}},
		{"IETF other units ignored", peHeader(
			"RateLimit", `"bytes";r=7;t=3, "conc";r=1`,
			"RateLimit-Policy", `"bytes";q=8;qu="content-bytes", "conc";q=2;qu="concurrent-requests"`),
			RateLimits{}},
		{"IETF item without policy", peHeader("RateLimit", `"default";r=3;t=10`),
			RateLimits{Requests: rlq(na, 3, in(10*time.Second))}},
		{"IETF policy without item", peHeader("RateLimit-Policy", `"default";q=100;w=60`),
			RateLimits{Requests: rlq(100, na, never), Window: time.Minute}},
		{"IETF policy without item is not mixed with another item", peHeader(
			"RateLimit", `"a";r=3;t=10`, "RateLimit-Policy", `"b";q=100;w=60`),
			RateLimits{Requests: rlq(na, 3, in(10*time.Second))}},
		{"IETF escaped name matches", peHeader("RateLimit", `"de\"f";r=5`, "RateLimit-Policy", `"de\"f";q=10`),
			RateLimits{Requests: rlq(10, 5, never)}},
		{"IETF names match exactly", peHeader("RateLimit", `"Default";r=5`, "RateLimit-Policy", `"default";q=10`),
			RateLimits{Requests: rlq(na, 5, never)}},
		{"IETF malformed member skipped", peHeader("RateLimit", `(a b);r=1, "x\q";r=1, garbage(, ;r=2, "default";r=7;t=2, "z";R`),
			RateLimits{Requests: rlq(na, 7, in(2*time.Second))}},
		{"IETF unterminated string", peHeader("RateLimit", `"default;r=7;t=2`), RateLimits{}},
		{"IETF lenient spaces", peHeader("RateLimit", ` "default" ; r=7 ;t=2 ,`, "RateLimit-Policy", "\t\"default\";q=9\t"),
			RateLimits{Requests: rlq(9, 7, in(2*time.Second))}},
		{"IETF negative and fractional counts ignored", peHeader("RateLimit", `"d";r=-1;t=-5, "e";r=1.5;t=1.5`),
			RateLimits{Requests: rlq(na, na, in(1500*time.Millisecond))}},
		{"IETF epoch in t", peHeader("RateLimit", `"d";r=0;t=`+itoa(epoch+40)),
			RateLimits{Requests: coarse(rlq(na, 0, in(40*time.Second)))}},
		{"IETF huge values", peHeader("RateLimit", `"d";r=999999999999999999999;t=999999999999999`, "RateLimit-Policy", `"d";q=1;w=99999999999999999999`),
			RateLimits{Requests: rlq(1, math.MaxInt64, capped), Window: maxServerWait}},

		// IETF draft, older.
		{"IETF older", peHeader("RateLimit-Limit", "100", "RateLimit-Remaining", "50", "RateLimit-Reset", "30"),
			RateLimits{Requests: rlq(100, 50, in(30*time.Second))}},
		{"IETF older with policy suffix", peHeader("RateLimit-Limit", "100, 100;w=60", "RateLimit-Remaining", "0", "RateLimit-Reset", "5"),
			RateLimits{Requests: rlq(100, 0, in(5*time.Second)), Window: time.Minute}},
		{"IETF older, several windows", peHeader("RateLimit-Limit", "10, 10;w=1, 50;w=60", "RateLimit-Remaining", "9"),
			RateLimits{Requests: rlq(10, 9, never), Window: time.Second}},
		{"IETF older numeric RateLimit-Policy", peHeader("RateLimit-Limit", "50", "RateLimit-Policy", "10;w=1, 50;w=60"),
			RateLimits{Requests: rlq(50, na, never), Window: time.Minute}},
		{"IETF older reset sent as epoch", peHeader("RateLimit-Remaining", "1", "RateLimit-Reset", itoa(epoch+30)),
			RateLimits{Requests: coarse(rlq(na, 1, in(30*time.Second)))}},

		// OpenAI and Azure OpenAI.
		{"OpenAI", peHeader(
			"x-ratelimit-limit-requests", "10000", "x-ratelimit-remaining-requests", "9999", "x-ratelimit-reset-requests", "6m0s",
			"x-ratelimit-limit-tokens", "1000000", "x-ratelimit-remaining-tokens", "999000", "x-ratelimit-reset-tokens", "20ms"),
			RateLimits{Replenishing: true, Requests: rlq(10000, 9999, in(6*time.Minute)), Tokens: rlq(1000000, 999000, in(20*time.Millisecond))}},
		{"OpenAI fractional duration", peHeader("x-ratelimit-reset-requests", "1m30.5s", "x-ratelimit-reset-tokens", "1s"),
			RateLimits{Replenishing: true, Requests: rlq(na, na, in(90500*time.Millisecond)), Tokens: rlq(na, na, in(time.Second))}},
		{"OpenAI 0s is now", peHeader("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "0s"),
			RateLimits{Replenishing: true, Requests: rlq(na, 0, now)}},
		{"OpenAI huge duration capped", peHeader("x-ratelimit-reset-tokens", "99999999999999999999h"),
			RateLimits{Replenishing: true, Tokens: rlq(na, na, capped)}},
		{"OpenAI negative duration ignored", peHeader("x-ratelimit-remaining-tokens", "5", "x-ratelimit-reset-tokens", "-1s"),
			RateLimits{Replenishing: true, Tokens: rlq(na, 5, never)}},
		{"Azure spelling fills the reset", peHeader("x-ratelimit-remaining-tokens", "100", "x-ratelimit-limit-tokens", "120000", "x-rate-limit-reset-tokens", "55"),
			RateLimits{Replenishing: true, Tokens: rlq(120000, 100, in(55*time.Second))}},
		{"Azure -1 ignored", peHeader("x-ratelimit-remaining-tokens", "100", "x-rate-limit-reset-tokens", "-1"),
			RateLimits{Replenishing: true, Tokens: rlq(na, 100, never)}},
		{"Azure 0 is now", peHeader("x-rate-limit-reset-tokens", "0"), RateLimits{Replenishing: true, Tokens: rlq(na, na, now)}},
		{"Azure alone", peHeader("x-rate-limit-remaining-requests", "3", "x-rate-limit-reset-requests", "2"),
			RateLimits{Replenishing: true, Requests: rlq(na, 3, in(2*time.Second))}},
		{"OpenAI spelling wins field by field", peHeader(
			"x-ratelimit-remaining-tokens", "100", "x-rate-limit-remaining-tokens", "7",
			"x-ratelimit-reset-tokens", "garbage", "x-rate-limit-reset-tokens", "9"),
			RateLimits{Replenishing: true, Tokens: rlq(na, 100, in(9*time.Second))}},

		// Anthropic.
		{"Anthropic", peHeader(
			"anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "49",
			"anthropic-ratelimit-requests-reset", "2026-11-30T12:00:59Z",
			"anthropic-ratelimit-tokens-limit", "100000", "anthropic-ratelimit-tokens-remaining", "90000",
			"anthropic-ratelimit-tokens-reset", "2026-11-30T12:00:06Z",
			"anthropic-ratelimit-input-tokens-limit", "80000", "anthropic-ratelimit-input-tokens-remaining", "75000",
			"anthropic-ratelimit-input-tokens-reset", "2026-11-30T12:00:01.5Z",
			"anthropic-ratelimit-output-tokens-limit", "20000", "anthropic-ratelimit-output-tokens-remaining", "15000",
			"anthropic-ratelimit-output-tokens-reset", "2026-11-30T13:00:07+01:00"),
			RateLimits{Replenishing: true,
				Requests:     coarse(rlq(50, 49, in(59*time.Second))),
				Tokens:       coarse(rlq(100000, 90000, in(6*time.Second))),
				InputTokens:  rlq(80000, 75000, in(1500*time.Millisecond)),
				OutputTokens: coarse(rlq(20000, 15000, in(7*time.Second))),
			}},
		{"Anthropic nanosecond fraction", peHeader("anthropic-ratelimit-requests-reset", "2026-11-30T12:00:00.123456789Z"),
			RateLimits{Replenishing: true, Requests: rlq(na, na, in(123456789*time.Nanosecond))}},
		{"Anthropic reset in the past is now", peHeader("anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", "2025-08-21T12:40:59Z"),
			RateLimits{Replenishing: true, Requests: coarse(rlq(na, 0, now))}},
		{"Anthropic far future capped", peHeader("anthropic-ratelimit-requests-reset", "9999-12-31T23:59:59Z"),
			RateLimits{Replenishing: true, Requests: coarse(rlq(na, na, capped))}},
		{"Anthropic garbage reset", peHeader("anthropic-ratelimit-requests-remaining", "3", "anthropic-ratelimit-requests-reset", "2026-13-45T99:00:00Z"),
			RateLimits{Replenishing: true, Requests: rlq(na, 3, never)}},

		// GitHub and generic X-RateLimit.
		{"GitHub", peHeader("x-ratelimit-limit", "5000", "x-ratelimit-remaining", "4999", "x-ratelimit-used", "1",
			"x-ratelimit-reset", itoa(epoch+3600), "x-ratelimit-resource", "core"),
			RateLimits{Requests: coarse(rlq(5000, 4999, in(time.Hour)))}},
		{"GitHub exhausted, reset passed", peHeader("x-ratelimit-limit", "60", "x-ratelimit-remaining", "0", "x-ratelimit-reset", itoa(epoch-10)),
			RateLimits{Requests: coarse(rlq(60, 0, now))}},
		{"used gives remaining", peHeader("x-ratelimit-limit", "60", "x-ratelimit-used", "59"),
			RateLimits{Requests: rlq(60, 1, never)}},
		{"used above limit gives nothing", peHeader("x-ratelimit-limit", "60", "x-ratelimit-used", "61"),
			RateLimits{Requests: rlq(60, na, never)}},
		{"remaining above limit as given", peHeader("x-ratelimit-limit", "10", "x-ratelimit-remaining", "11"),
			RateLimits{Requests: rlq(10, 11, never)}},
		{"reset delta seconds", peHeader("X-RateLimit-Reset", "30"), RateLimits{Requests: rlq(na, na, in(30*time.Second))}},
		{"reset fractional delta seconds", peHeader("X-RateLimit-Reset", "1.5"), RateLimits{Requests: rlq(na, na, in(1500*time.Millisecond))}},
		{"reset one day is a day", peHeader("X-RateLimit-Reset", "86400"), RateLimits{Requests: rlq(na, na, in(24*time.Hour))}},
		{"reset epoch seconds", peHeader("X-RateLimit-Reset", itoa(epoch+60)), RateLimits{Requests: coarse(rlq(na, na, in(time.Minute)))}},
		{"reset epoch seconds with fraction", peHeader("X-RateLimit-Reset", itoa(epoch+10)+".25"),
			RateLimits{Requests: rlq(na, na, in(10250*time.Millisecond))}},
		{"reset epoch milliseconds", peHeader("X-RateLimit-Reset", itoa((epoch+60)*1000+500)),
			RateLimits{Requests: rlq(na, na, in(60500*time.Millisecond))}},
		{"reset epoch milliseconds half a year ahead", peHeader("X-RateLimit-Reset", itoa((epoch+180*86400)*1000)),
			RateLimits{Requests: rlq(na, na, in(180*24*time.Hour))}},
		{"reset epoch seconds in the past is now", peHeader("X-RateLimit-Reset", itoa(epoch-3600)), RateLimits{Requests: coarse(rlq(na, na, now))}},
		{"reset epoch milliseconds in the past is now", peHeader("X-RateLimit-Reset", itoa((epoch-3600)*1000)), RateLimits{Requests: rlq(na, na, now)}},
		{"ten digits far from now are delay-seconds", peHeader("X-RateLimit-Reset", "1000000000"),
			RateLimits{Requests: rlq(na, na, in(1_000_000_000*time.Second))}},
		{"thirteen digits far from now are a capped delay", peHeader("X-RateLimit-Reset", "1000000000000"),
			RateLimits{Requests: rlq(na, na, capped)}},
		{"epoch seconds a year and more away are a delay", peHeader("X-RateLimit-Reset", itoa(epoch+400*86400)),
			RateLimits{Requests: rlq(na, na, in(time.Duration(epoch+400*86400)*time.Second))}},
		{"reset more digits than int64", peHeader("X-RateLimit-Reset", "99999999999999999999999999"), RateLimits{Requests: rlq(na, na, capped)}},
		{"reset int64 max", peHeader("X-RateLimit-Reset", "9223372036854775807"), RateLimits{Requests: rlq(na, na, capped)}},
		{"reset HTTP-date", peHeader("X-RateLimit-Reset", "Mon, 30 Nov 2026 12:01:30 GMT"), RateLimits{Requests: coarse(rlq(na, na, in(90*time.Second)))}},
		{"reset RFC 850 date", peHeader("X-RateLimit-Reset", "Monday, 30-Nov-26 12:01:30 GMT"), RateLimits{Requests: coarse(rlq(na, na, in(90*time.Second)))}},
		{"reset RFC 3339", peHeader("X-RateLimit-Reset", "2026-11-30T12:01:30.5Z"), RateLimits{Requests: rlq(na, na, in(90500*time.Millisecond))}},
		{"reset Go duration", peHeader("X-RateLimit-Reset", "2m"), RateLimits{Requests: rlq(na, na, in(2*time.Minute))}},
		{"Discord: Reset-After wins over Reset", peHeader("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", itoa(epoch+10)+".123", "X-RateLimit-Reset-After", "9.5"),
			RateLimits{Requests: rlq(na, 0, in(9500*time.Millisecond))}},
		{"X-RateLimit-Limit with policy suffix", peHeader("X-RateLimit-Limit", "100, 100;w=60"), RateLimits{Requests: rlq(100, na, never)}},

		// X (Twitter).
		{"X", peHeader("x-rate-limit-limit", "900", "x-rate-limit-remaining", "899", "x-rate-limit-reset", itoa(epoch+900)),
			RateLimits{Requests: coarse(rlq(900, 899, in(15*time.Minute)))}},

		// Garbage.
		{"garbage counts", peHeader("x-ratelimit-limit", "abc", "x-ratelimit-remaining", "12abc"), RateLimits{}},
		{"negative counts", peHeader("x-ratelimit-limit", "-1", "x-ratelimit-remaining", "-5"), RateLimits{}},
		{"signed, exponent, hex, float counts", peHeader("x-ratelimit-limit", "+5", "x-ratelimit-remaining", "1e3",
			"x-rate-limit-limit", "0x10", "x-rate-limit-remaining", "2.5"), RateLimits{}},
		{"NaN and Inf resets", peHeader("x-ratelimit-reset", "NaN", "x-rate-limit-reset", "Inf"), RateLimits{}},
		{"negative, signed and exponent resets", peHeader("x-ratelimit-reset", "-30", "x-rate-limit-reset", "1e9",
			"RateLimit-Reset", "+5", "anthropic-ratelimit-tokens-reset", "soon"), RateLimits{}},
		{"empty values", peHeader("x-ratelimit-limit", "", "x-ratelimit-reset", " ", "RateLimit", "", "RateLimit-Policy", ","), RateLimits{}},
		{"space around numbers", peHeader("x-ratelimit-limit", " 42\t", "x-ratelimit-reset", " 5 "),
			RateLimits{Requests: rlq(42, na, in(5*time.Second))}},
		{"count beyond int64", peHeader("x-ratelimit-limit", "99999999999999999999999"), RateLimits{Requests: rlq(math.MaxInt64, na, never)}},
		{"first line of a repeated header", peHeader("x-ratelimit-remaining", "3", "x-ratelimit-remaining", "9"), RateLimits{Requests: rlq(na, 3, never)}},

		// Mixed families: the most specific wins per dimension, whole.
		{"Anthropic over generic", peHeader("anthropic-ratelimit-requests-remaining", "5", "x-ratelimit-remaining", "50",
			"x-ratelimit-limit", "100", "x-ratelimit-reset", "30"),
			RateLimits{Replenishing: true, Requests: rlq(na, 5, never)}},
		{"OpenAI tokens, generic requests", peHeader("x-ratelimit-remaining-tokens", "500", "x-ratelimit-remaining", "7"),
			RateLimits{Requests: rlq(na, 7, never), Tokens: rlq(na, 500, never)}},
		{"OpenAI over IETF", peHeader("x-ratelimit-remaining-requests", "1", "RateLimit", `"default";r=50;t=30`, "RateLimit-Policy", `"default";q=100;w=60`),
			RateLimits{Replenishing: true, Requests: rlq(na, 1, never)}},
		{"IETF current over older over generic", peHeader("RateLimit", `"d";r=2;t=3`, "RateLimit-Remaining", "20", "X-RateLimit-Remaining", "200"),
			RateLimits{Requests: rlq(na, 2, in(3*time.Second))}},
		{"IETF window only from the winning family", peHeader("anthropic-ratelimit-requests-remaining", "5", "RateLimit", `"d";r=2`, "RateLimit-Policy", `"d";q=3;w=60`),
			RateLimits{Replenishing: true, Requests: rlq(na, 5, never)}},
		{"IETF window of tokens when requests come from elsewhere", peHeader("x-ratelimit-remaining", "5",
			"RateLimit", `"tokens";r=2`, "RateLimit-Policy", `"tokens";q=3;w=60`),
			RateLimits{Requests: rlq(na, 5, never), Tokens: rlq(3, 2, never), Window: time.Minute}},
		{"older over generic", peHeader("RateLimit-Remaining", "20", "X-RateLimit-Remaining", "200"), RateLimits{Requests: rlq(na, 20, never)}},
		{"GitHub over X", peHeader("x-ratelimit-remaining", "1", "x-rate-limit-remaining", "2"), RateLimits{Requests: rlq(na, 1, never)}},
		{"token bucket flag follows Requests", peHeader("anthropic-ratelimit-tokens-remaining", "9", "x-ratelimit-remaining", "5"),
			RateLimits{Requests: rlq(na, 5, never), Tokens: rlq(na, 9, never)}},
		{"token bucket flag from tokens without Requests", peHeader("x-ratelimit-remaining-tokens", "9", "RateLimit", `"tokens";r=1`),
			RateLimits{Tokens: rlq(na, 9, never), Replenishing: true}},
		{"unreadable specific family falls through", peHeader("x-ratelimit-remaining-requests", "abc", "x-ratelimit-remaining", "5"),
			RateLimits{Requests: rlq(na, 5, never)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requireRateLimits(t, tc.want, ParseRateLimits(tc.h, now))
		})
	}
}

// TestParseRateLimitsCanonicalKeys: keys are matched as http.Header.Get
// matches them, so a map built by hand with other spellings says nothing.
func TestParseRateLimitsCanonicalKeys(t *testing.T) {
	h := http.Header{"x-ratelimit-remaining": {"5"}, "RateLimit": {`"d";r=1`}}
	assert.False(t, ParseRateLimits(h, testStart).Known())
	h = http.Header{"X-Ratelimit-Remaining": nil}
	assert.False(t, ParseRateLimits(h, testStart).Known())
}

// TestParseRateLimitsBoundsMembers: a hostile RateLimit field with
// thousands of members is read only up to maxSFMembers.
func TestParseRateLimitsBoundsMembers(t *testing.T) {
	var items, pols []byte
	for i := 0; i < 5000; i++ {
		items = append(items, `"p`+strconv.Itoa(i)+`";r=`+strconv.Itoa(5000-i)+`, `...)
		pols = append(pols, `"p`+strconv.Itoa(i)+`";q=9999, `...)
	}
	h := peHeader("RateLimit", string(items), "RateLimit-Policy", string(pols))
	got := ParseRateLimits(h, testStart)
	// The tightest of the first 32 members, not of all 5000.
	requireRateLimits(t, RateLimits{Requests: rlq(9999, 5000-(maxSFMembers-1), time.Time{})}, got)
}

// TestParseRateLimitsNow: with a real clock reading (monotonic) resets
// still come out right, and a zero now does not mistake anything for epochs.
func TestParseRateLimitsNow(t *testing.T) {
	now := time.Now()
	got := ParseRateLimits(peHeader("X-RateLimit-Reset", strconv.FormatInt(now.Unix()+60, 10)), now)
	d := got.Requests.Reset.Sub(now)
	assert.True(t, d > 59*time.Second && d <= 60*time.Second, "%v", d)

	got = ParseRateLimits(peHeader("X-RateLimit-Reset", "1796040030"), time.Time{})
	require.False(t, got.Requests.Reset.IsZero())
	assert.Equal(t, 1796040030*time.Second, got.Requests.Reset.Sub(time.Time{}))
}

func TestParseRateLimitsNoAllocWithoutHeaders(t *testing.T) {
	h := typicalHeader()
	allocs := testing.AllocsPerRun(100, func() { _ = ParseRateLimits(h, testStart) })
	assert.Zero(t, allocs)
}

// typicalHeader is an ordinary JSON API response's header set.
func typicalHeader() http.Header {
	return peHeader(
		"Content-Type", "application/json",
		"Content-Length", "1234",
		"Date", "Mon, 30 Nov 2026 12:00:00 GMT",
		"Server", "cloudflare",
		"X-Request-Id", "req_0123456789abcdef",
		"Cache-Control", "no-store",
		"Vary", "Accept-Encoding",
		"Strict-Transport-Security", "max-age=31536000",
	)
}

func BenchmarkParseRateLimits(b *testing.B) {
	openai := typicalHeader()
	for k, v := range map[string]string{
		"x-ratelimit-limit-requests": "10000", "x-ratelimit-remaining-requests": "9999", "x-ratelimit-reset-requests": "6m0s",
		"x-ratelimit-limit-tokens": "1000000", "x-ratelimit-remaining-tokens": "999000", "x-ratelimit-reset-tokens": "20ms",
	} {
		openai.Set(k, v)
	}
	for _, bc := range []struct {
		name string
		h    http.Header
	}{
		{"none", typicalHeader()},
		{"openai", openai},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var r RateLimits
			for i := 0; i < b.N; i++ {
				r = ParseRateLimits(bc.h, testStart)
			}
			_ = r
		})
	}
}

// FuzzParseRateLimits puts arbitrary text in the headers of every family at
// once (mask chooses which are present). Whatever they say, the parser must
// not panic, must report no negative count, must keep resets within
// [now, now+100 years] and the window within [0, 100 years], and must not
// depend on map iteration order.
func FuzzParseRateLimits(f *testing.F) {
	epoch := strconv.FormatInt(testStart.Unix()+30, 10)
	for _, s := range []struct {
		ietf, policy, count, reset, other string
		mask                              uint16
	}{
		{`"default";r=50;t=30`, `"default";q=100;w=60`, "100", "30", "1", 0xffff},
		{`"burst";r=40;t=20, "daily";r=900;t=3600`, `"burst";q=100;w=60, "daily";q=1000;w=86400;qu="requests"`, "", "", "", 0x0001},
		{`"d";r=1;pk=:cHsdsRa894==:`, `"d";q=2;qu="tokens"`, "100, 100;w=60", "6m0s", "55", 0x00ff},
		{"", "", "49", "2026-11-30T12:00:59.5Z", "", 0x0f00},
		{"", "", "5000", epoch, "1", 0xf000},
		{"", "", "5000", epoch + "000", "9.5", 0xf000},
		{`(a b), "x\q";r=1, garbage(`, `"a\`, "-1", "-1", "-1", 0xffff},
		{"", "", "99999999999999999999999", "99999999999999999999h", "NaN", 0xffff},
		{"", "", " 42 ", "Mon, 30 Nov 2026 12:01:30 GMT", "1e9", 0xffff},
	} {
		f.Add(s.ietf, s.policy, s.count, s.reset, s.other, s.mask)
	}
	now := testStart
	f.Fuzz(func(t *testing.T, ietf, policy, count, reset, other string, mask uint16) {
		h := http.Header{}
		set := func(bit uint, k, v string) {
			if mask&(1<<bit) != 0 {
				h.Set(k, v)
			}
		}
		set(0, "RateLimit", ietf)
		set(0, "RateLimit-Policy", policy)
		set(1, "RateLimit-Limit", count)
		set(1, "RateLimit-Remaining", other)
		set(1, "RateLimit-Reset", reset)
		set(2, "X-Ratelimit-Remaining-Requests", count)
		set(2, "X-Ratelimit-Reset-Requests", reset)
		set(3, "X-Ratelimit-Limit-Tokens", other)
		set(3, "X-Rate-Limit-Reset-Tokens", reset)
		set(4, "X-Ratelimit-Reset-Tokens", other)
		set(8, "Anthropic-Ratelimit-Requests-Remaining", count)
		set(8, "Anthropic-Ratelimit-Requests-Reset", reset)
		set(9, "Anthropic-Ratelimit-Input-Tokens-Limit", other)
		set(10, "Anthropic-Ratelimit-Output-Tokens-Reset", reset)
		set(11, "Anthropic-Ratelimit-Tokens-Reset", other)
		set(12, "X-Ratelimit-Limit", count)
		set(12, "X-Ratelimit-Reset", reset)
		set(13, "X-Ratelimit-Used", other)
		set(14, "X-Ratelimit-Reset-After", other)
		set(15, "X-Rate-Limit-Remaining", count)
		set(15, "X-Rate-Limit-Reset", reset)

		r := ParseRateLimits(h, now)
		for _, d := range dimensions {
			q := r.Quota(d)
			if q.Limit < 0 || q.Remaining < 0 || !q.HasLimit && q.Limit != 0 || !q.HasRemaining && q.Remaining != 0 {
				t.Fatalf("%v: bad counts %+v", d, *q)
			}
			if !q.Reset.IsZero() && (q.Reset.Before(now) || q.Reset.After(now.Add(maxServerWait))) {
				t.Fatalf("%v: reset %v out of [now, now+100y]", d, q.Reset)
			}
		}
		if r.Window < 0 || r.Window > maxServerWait {
			t.Fatalf("window %v", r.Window)
		}
		if !r.Known() && r != (RateLimits{}) {
			t.Fatalf("nothing known, yet %+v", r)
		}
		for i := 0; i < 3; i++ {
			if again := ParseRateLimits(h, now); again != r {
				t.Fatalf("depends on map order: %+v then %+v", r, again)
			}
		}
	})
}

// A server whose clock is off the client's sends absolute resets and
// Retry-After dates on its own clock; read against its Date header, they
// come out the same whatever the skew.
func TestAbsoluteTimesAreReadAgainstTheServersDate(t *testing.T) {
	local := testStart.Add(300 * time.Millisecond)
	for _, skew := range []time.Duration{-5 * time.Second, -time.Second, 0, time.Second, 5 * time.Second, 3 * time.Hour} {
		t.Run(skew.String(), func(t *testing.T) {
			server := testStart.Add(skew) // the Date header is whole seconds
			h := peHeader(
				"Date", server.Format(http.TimeFormat),
				"anthropic-ratelimit-requests-remaining", "3",
				"anthropic-ratelimit-requests-reset", server.Add(2*time.Second).Format(time.RFC3339),
				"x-ratelimit-reset", strconv.FormatInt(server.Unix()+7, 10),
				"Retry-After", server.Add(4*time.Second).Format(http.TimeFormat))
			l := ParseRateLimits(h, local)
			assert.Equal(t, local.Add(2*time.Second), l.Requests.Reset, "Anthropic reset")
			assert.True(t, l.Requests.Coarse)
			wait, ok := ParseRetryAfter(h, local)
			assert.True(t, ok)
			assert.Equal(t, 4*time.Second, wait, "Retry-After date")
		})
	}
}

// A reset at or before the server's now means now, even when the local
// clock is behind the server's.
func TestResetAtTheServersNowIsNow(t *testing.T) {
	local := testStart.Add(-5 * time.Second) // the client is 5s behind
	h := peHeader("Date", testStart.Format(http.TimeFormat),
		"anthropic-ratelimit-requests-limit", "4",
		"anthropic-ratelimit-requests-remaining", "0",
		"anthropic-ratelimit-requests-reset", testStart.Add(-time.Second).Format(time.RFC3339))
	l := ParseRateLimits(h, local)
	assert.Equal(t, local, l.Requests.Reset)
}

// A Date header more than a day off, or unreadable, is a broken header,
// not a clock: the local clock is used.
func TestBrokenDateHeaderIsIgnored(t *testing.T) {
	for _, date := range []string{"Fri, 31 Dec 9999 23:59:59 GMT", "Thu, 01 Jan 1970 00:00:00 GMT", "yesterday", ""} {
		h := peHeader("Date", date, "x-ratelimit-remaining", "0", "x-ratelimit-reset", strconv.FormatInt(testStart.Unix()+30, 10))
		assert.Equal(t, testStart, ServerNow(h, testStart), "%q", date)
		assert.Equal(t, testStart.Add(30*time.Second), ParseRateLimits(h, testStart).Requests.Reset, "%q", date)
	}
}
