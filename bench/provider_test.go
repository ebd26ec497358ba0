package bench

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-cleanhttp"
)

// manualClock is a clock that moves only when told, so the provider's header
// values can be checked exactly.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// t0 is deliberately not on a whole second, so rounding up is visible.
var t0 = time.Date(2025, 8, 21, 12, 40, 58, 300_000_000, time.UTC)

// answer is what the test keeps of one response.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func send(t *testing.T, c *http.Client, url string, id int) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(RequestIDHeader, strconv.Itoa(id))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, body}
}

// goDuration is the shape of a Go duration string as OpenAI sends it.
var goDuration = regexp.MustCompile(`^([0-9]+(\.[0-9]+)?(h|m|s|ms))+$`)

// wholeSecondRFC3339 is an RFC 3339 UTC timestamp without fractional seconds.
var wholeSecondRFC3339 = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`)

// rateLimitField matches the IETF RateLimit field the provider sends.
var rateLimitField = regexp.MustCompile(`^"default";r=([0-9]+);t=([0-9]+)$`)

// TestProviderEnforcesBucket checks the provider the goodput benchmark relies
// on: with a burst of 10 and a rate of 1/s, 15 requests at one instant get
// exactly 10 OKs and 5 429s, every response carries its family's headers with
// the intended values and formats, and the 429s carry a whole-second
// Retry-After and the provider's error body. After 1.5 s one more request is
// admitted, which shows the bucket refills at the rate.
func TestProviderEnforcesBucket(t *testing.T) {
	for _, fam := range []string{FamilyOpenAI, FamilyAnthropic, FamilyIETF} {
		t.Run(fam, func(t *testing.T) {
			clk := &manualClock{t: t0}
			p := NewProvider(ProviderConfig{Family: fam, Rate: 1, Burst: 10, Now: clk.Now})
			defer p.Close()
			tr := cleanhttp.DefaultPooledTransport()
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}

			for i := 0; i < 15; i++ {
				a := send(t, c, p.URL, i)
				ok := i < 10
				wantStatus, wantRemaining, wantFull := 200, 9-i, i+1 // full again after i+1 s at 1/s
				if !ok {
					wantStatus, wantRemaining, wantFull = 429, 0, 10
				}
				if a.status != wantStatus {
					t.Fatalf("request %d: status %d, want %d", i, a.status, wantStatus)
				}
				checkFamilyHeaders(t, fam, i, a.header, wantRemaining, time.Duration(wantFull)*time.Second)
				if ok {
					if a.header.Get("Retry-After") != "" {
						t.Errorf("request %d: Retry-After on a 200", i)
					}
					continue
				}
				// One token takes 1 s at 1/s.
				if got := a.header.Get("Retry-After"); got != "1" {
					t.Errorf("request %d: Retry-After %q, want \"1\"", i, got)
				}
				checkErrorBody(t, fam, a)
			}

			st := p.Stats()
			if st.Received != 15 || st.Rejected != 5 || st.Saw429 != 5 || st.Fused != 0 || len(st.Arrivals) != 15 {
				t.Fatalf("stats %+v, want 15 received, 5 rejected, 5 saw a 429, none fused, 15 arrivals", st)
			}

			// Half a token short: Retry-After rounds 0.5 s up to 1.
			clk.Advance(500 * time.Millisecond)
			if a := send(t, c, p.URL, 15); a.status != 429 || a.header.Get("Retry-After") != "1" {
				t.Fatalf("after 0.5 s: %d Retry-After %q, want 429 with \"1\"", a.status, a.header.Get("Retry-After"))
			}
			// 1.5 tokens now: one request is admitted, and 0.5 remains, reported as 0.
			clk.Advance(time.Second)
			a := send(t, c, p.URL, 16)
			if a.status != 200 {
				t.Fatalf("after 1.5 s: status %d, want 200", a.status)
			}
			checkFamilyHeaders(t, fam, 16, a.header, 0, 9500*time.Millisecond)
			if got := p.Stats().Arrivals[16]; got != 1500*time.Millisecond {
				t.Errorf("arrival of request 16 at %v, want 1.5s", got)
			}
		})
	}
}

// checkFamilyHeaders checks the quota headers of one response: limit 10,
// remaining as given, and the reset as the family states it for a bucket
// that is full again after untilFull from now (the test clock's time).
func checkFamilyHeaders(t *testing.T, fam string, i int, h http.Header, remaining int, untilFull time.Duration) {
	t.Helper()
	switch fam {
	case FamilyOpenAI:
		if got := h.Get("x-ratelimit-limit-requests"); got != "10" {
			t.Errorf("request %d: limit %q, want 10", i, got)
		}
		if got := h.Get("x-ratelimit-remaining-requests"); got != strconv.Itoa(remaining) {
			t.Errorf("request %d: remaining %q, want %d", i, got, remaining)
		}
		reset := h.Get("x-ratelimit-reset-requests")
		d, err := time.ParseDuration(reset)
		if err != nil || !goDuration.MatchString(reset) || d.String() != reset {
			t.Fatalf("request %d: reset %q is not a canonical Go duration (%v)", i, reset, err)
		}
		if d != untilFull {
			t.Errorf("request %d: reset %v, want %v", i, d, untilFull)
		}
	case FamilyAnthropic:
		if got := h.Get("anthropic-ratelimit-requests-limit"); got != "10" {
			t.Errorf("request %d: limit %q, want 10", i, got)
		}
		if got := h.Get("anthropic-ratelimit-requests-remaining"); got != strconv.Itoa(remaining) {
			t.Errorf("request %d: remaining %q, want %d", i, got, remaining)
		}
		reset := h.Get("anthropic-ratelimit-requests-reset")
		at, err := time.Parse(time.RFC3339, reset)
		if err != nil || !wholeSecondRFC3339.MatchString(reset) {
			t.Fatalf("request %d: reset %q is not a whole-second RFC 3339 UTC time (%v)", i, reset, err)
		}
		// The exact instant, rounded up to the next whole second.
		want := t0.Add(untilFull)
		if i >= 15 {
			want = t0.Add(1500 * time.Millisecond).Add(untilFull)
		}
		want = want.Truncate(time.Second).Add(time.Second) // t0 is at .3 s and untilFull whole or .5 s
		if !at.Equal(want) {
			t.Errorf("request %d: reset %v, want %v", i, at, want)
		}
	case FamilyIETF:
		m := rateLimitField.FindStringSubmatch(h.Get("RateLimit"))
		if m == nil {
			t.Fatalf("request %d: RateLimit %q does not parse", i, h.Get("RateLimit"))
		}
		if m[1] != strconv.Itoa(remaining) {
			t.Errorf("request %d: r=%s, want %d", i, m[1], remaining)
		}
		wantT := int64((untilFull + time.Second - 1) / time.Second)
		if m[2] != strconv.FormatInt(wantT, 10) {
			t.Errorf("request %d: t=%s, want %d", i, m[2], wantT)
		}
		if got := h.Get("RateLimit-Policy"); got != `"default";q=1;w=1` {
			t.Errorf("request %d: RateLimit-Policy %q", i, got)
		}
	}
}

// checkErrorBody checks that a 429 carries the family's JSON error.
func checkErrorBody(t *testing.T, fam string, a answer) {
	t.Helper()
	var v struct {
		Type  string `json:"type"`
		Error struct {
			Type string `json:"type"`
			Code string `json:"code"`
		} `json:"error"`
		Status int `json:"status"`
	}
	if err := json.Unmarshal(a.body, &v); err != nil {
		t.Fatalf("429 body %q is not JSON: %v", a.body, err)
	}
	ct := a.header.Get("Content-Type")
	switch fam {
	case FamilyOpenAI:
		if ct != "application/json" || v.Error.Type != "requests" || v.Error.Code != "rate_limit_exceeded" {
			t.Errorf("OpenAI 429 body %s (%s)", a.body, ct)
		}
	case FamilyAnthropic:
		if ct != "application/json" || v.Type != "error" || v.Error.Type != "rate_limit_error" {
			t.Errorf("Anthropic 429 body %s (%s)", a.body, ct)
		}
	case FamilyIETF:
		if ct != "application/problem+json" || v.Status != 429 {
			t.Errorf("problem 429 body %s (%s)", a.body, ct)
		}
	}
}

// TestProviderFuse checks that the provider bounds a run by itself: past
// MaxRequests every request gets 410, which no contender retries.
func TestProviderFuse(t *testing.T) {
	p := NewProvider(ProviderConfig{MaxRequests: 2})
	defer p.Close()
	tr := cleanhttp.DefaultPooledTransport()
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for i, want := range []int{200, 200, 410, 410} {
		if a := send(t, c, p.URL, i); a.status != want {
			t.Fatalf("request %d: status %d, want %d", i, a.status, want)
		}
	}
	if st := p.Stats(); st.Fused != 2 || st.Received != 4 {
		t.Fatalf("stats %+v, want 4 received, 2 fused", st)
	}
}
