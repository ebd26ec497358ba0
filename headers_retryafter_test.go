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

func TestParseRetryAfter(t *testing.T) {
	now := testStart // Mon, 30 Nov 2026 12:00:00 UTC
	epoch := now.Unix()
	cases := []struct {
		name   string
		h      http.Header
		wait   time.Duration
		wantOK bool
	}{
		{"delay-seconds", peHeader("Retry-After", "120"), 120 * time.Second, true},
		{"zero", peHeader("Retry-After", "0"), 0, true},
		{"surrounding space", peHeader("Retry-After", "  7 "), 7 * time.Second, true},
		{"one day is a day", peHeader("Retry-After", "86400"), 24 * time.Hour, true},

		{"IMF-fixdate future", peHeader("Retry-After", "Mon, 30 Nov 2026 12:01:30 GMT"), 90 * time.Second, true},
		{"RFC 850 future", peHeader("Retry-After", "Monday, 30-Nov-26 12:01:30 GMT"), 90 * time.Second, true},
		{"asctime future", peHeader("Retry-After", "Mon Nov 30 12:01:30 2026"), 90 * time.Second, true},
		{"IMF-fixdate past", peHeader("Retry-After", "Mon, 30 Nov 2026 11:00:00 GMT"), 0, true},
		{"RFC 850 past", peHeader("Retry-After", "Monday, 30-Nov-26 11:00:00 GMT"), 0, true},
		{"asctime past", peHeader("Retry-After", "Mon Nov 30 11:00:00 2026"), 0, true},
		{"RFC 9110 example, long past", peHeader("Retry-After", "Fri, 31 Dec 1999 23:59:59 GMT"), 0, true},

		{"epoch in the future is a timestamp", peHeader("Retry-After", strconv.FormatInt(epoch+30, 10)), 30 * time.Second, true},
		{"epoch in the past is now", peHeader("Retry-After", strconv.FormatInt(epoch-30, 10)), 0, true},
		{"epoch half a year ahead", peHeader("Retry-After", strconv.FormatInt(epoch+180*86400, 10)), 180 * 24 * time.Hour, true},
		{"ten digits far from now are seconds, capped", peHeader("Retry-After", "9999999999"), maxServerWait, true},

		{"Go duration", peHeader("Retry-After", "1.5s"), 1500 * time.Millisecond, true},
		{"484289h", peHeader("Retry-After", "484289h"), 484289 * time.Hour, true},
		{"duration overflowing int64 is capped", peHeader("Retry-After", "99999999999999999999h"), maxServerWait, true},
		{"more digits than int64", peHeader("Retry-After", "99999999999999999999999999999"), maxServerWait, true},
		{"int64 max seconds", peHeader("Retry-After", "9223372036854775807"), maxServerWait, true},
		{"a century and a bit", peHeader("Retry-After", "3200000000"), maxServerWait, true},

		{"negative", peHeader("Retry-After", "-5"), 0, false},
		{"negative duration", peHeader("Retry-After", "-5s"), 0, false},
		{"fractional", peHeader("Retry-After", "1.5"), 0, false},
		{"plus sign", peHeader("Retry-After", "+5"), 0, false},
		{"garbage", peHeader("Retry-After", "soon"), 0, false},
		{"hex", peHeader("Retry-After", "0x10"), 0, false},
		{"empty", peHeader("Retry-After", ""), 0, false},
		{"absent", http.Header{}, 0, false},
		{"nil header", nil, 0, false},
		{"date with garbage", peHeader("Retry-After", "Mon, 30 Nov 2026 12:01:30 GMT tomorrow"), 0, false},

		{"retry-after-ms", peHeader("Retry-After-Ms", "250"), 250 * time.Millisecond, true},
		{"retry-after-ms float", peHeader("Retry-After-Ms", "1.5"), 1500 * time.Microsecond, true},
		{"retry-after-ms exponent", peHeader("Retry-After-Ms", "1e3"), time.Second, true},
		{"retry-after-ms lowercase name", http.Header{"Retry-After-Ms": {"10"}}, 10 * time.Millisecond, true},
		{"retry-after-ms wins over Retry-After", peHeader("Retry-After-Ms", "250", "Retry-After", "30"), 250 * time.Millisecond, true},
		{"retry-after-ms zero wins", peHeader("Retry-After-Ms", "0", "Retry-After", "30"), 0, true},
		{"retry-after-ms NaN falls back", peHeader("Retry-After-Ms", "NaN", "Retry-After", "30"), 30 * time.Second, true},
		{"retry-after-ms Inf falls back", peHeader("Retry-After-Ms", "Inf", "Retry-After", "30"), 30 * time.Second, true},
		{"retry-after-ms +Infinity falls back", peHeader("Retry-After-Ms", "+Infinity", "Retry-After", "30"), 30 * time.Second, true},
		{"retry-after-ms negative falls back", peHeader("Retry-After-Ms", "-100", "Retry-After", "30"), 30 * time.Second, true},
		{"retry-after-ms garbage falls back", peHeader("Retry-After-Ms", "fast", "Retry-After", "30"), 30 * time.Second, true},
		{"retry-after-ms NaN alone", peHeader("Retry-After-Ms", "NaN"), 0, false},
		{"retry-after-ms Inf alone", peHeader("Retry-After-Ms", "Inf"), 0, false},
		{"retry-after-ms negative alone", peHeader("Retry-After-Ms", "-1"), 0, false},
		{"retry-after-ms hex alone", peHeader("Retry-After-Ms", "0x1p4"), 0, false},
		{"retry-after-ms hex falls back", peHeader("Retry-After-Ms", "0x1p4", "Retry-After", "2"), 2 * time.Second, true},
		{"retry-after-ms tiny", peHeader("Retry-After-Ms", "1e-400"), 0, true},
		{"retry-after-ms huge is capped", peHeader("Retry-After-Ms", "1e300"), maxServerWait, true},
		{"retry-after-ms beyond float64 is capped", peHeader("Retry-After-Ms", "1e400"), maxServerWait, true},
		{"retry-after-ms huge negative", peHeader("Retry-After-Ms", "-1e400"), 0, false},
		{"retry-after-ms max float", peHeader("Retry-After-Ms", strconv.FormatFloat(math.MaxFloat64, 'g', -1, 64)), maxServerWait, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wait, ok := ParseRetryAfter(tc.h, now)
			assert.Equal(t, tc.wantOK, ok)
			assert.Equal(t, tc.wait, wait)
			assert.GreaterOrEqual(t, wait, time.Duration(0))
			assert.LessOrEqual(t, wait, maxServerWait)
		})
	}
}

// An epoch timestamp in Retry-After must not become 56 years of waiting.
func TestParseRetryAfterEpochIsNotDecades(t *testing.T) {
	now := time.Now()
	wait, ok := ParseRetryAfter(peHeader("Retry-After", strconv.FormatInt(now.Unix()+60, 10)), now)
	require.True(t, ok)
	assert.InDelta(t, float64(60*time.Second), float64(wait), float64(time.Second))
}

// FuzzParseRetryAfter feeds both header values arbitrary text. Whatever a
// server sends, the parser must not panic and the wait must be usable: never
// negative, never past the cap, and zero when nothing was understood.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range [][2]string{
		{"", "120"},
		{"", "Mon, 30 Nov 2026 12:01:30 GMT"},
		{"", "Monday, 30-Nov-26 12:01:30 GMT"},
		{"", "Mon Nov 30 12:01:30 2026"},
		{"", "1796040030"},
		{"", "484289h"},
		{"", "99999999999999999999999999999"},
		{"", "-5"},
		{"", "1.5"},
		{"250", "30"},
		{"NaN", "30"},
		{"1e400", ""},
		{"-Inf", ""},
		{"0x1p-2", ""},
	} {
		f.Add(s[0], s[1])
	}
	now := testStart
	f.Fuzz(func(t *testing.T, ms, ra string) {
		h := http.Header{}
		if ms != "" {
			h.Set("Retry-After-Ms", ms)
		}
		h.Set("Retry-After", ra)
		wait, ok := ParseRetryAfter(h, now)
		if wait < 0 || wait > maxServerWait {
			t.Fatalf("ParseRetryAfter(%q, %q) = %v, out of [0, %v]", ms, ra, wait, maxServerWait)
		}
		if !ok && wait != 0 {
			t.Fatalf("ParseRetryAfter(%q, %q) = %v, false: a wait without ok", ms, ra, wait)
		}
		// Nothing the header says can make a wait that overflows a deadline.
		if d := now.Add(wait); d.Before(now) {
			t.Fatalf("now + %v is before now", wait)
		}
	})
}
