package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

// The goodput scenario of issue 3: a burst of 500 requests from 50 callers
// against a provider that allows 100 requests per second with a burst of 10.
const (
	goodputRate       = 100.0 // requests per second the provider's bucket refills
	goodputBurst      = 10    // the bucket's size
	goodputWorkers    = 50
	goodputPerWorker  = 10 // sequential requests per worker
	goodputRequests   = goodputWorkers * goodputPerWorker
	goodputReqTimeout = 60 * time.Second // per request, retries included, so nothing hangs
	goodputRunTimeout = 5 * time.Minute  // the whole scenario, whatever a contender does
)

// requestIDHeader carries the harness's own number for a logical request.
// Every retrying contender copies the caller's headers onto each attempt, so
// the provider (retrytest's Config.RequestIDHeader) can tell how many logical
// requests ever saw a 429, not only how many 429s it sent. A real API
// ignores it, and so does the bucket.
const requestIDHeader = "X-Bench-Request"

// benchFuse is the providers' MaxAttempts fuse: past this many arrivals every
// request gets 410 Gone, which no contender retries, so a runaway retry loop
// ends at once. It is far above what any sane client sends in the scenarios
// (at most 1500 requests times a few attempts).
const benchFuse = 100_000

// goodputFamilies are the rate-limit header families the goodput scenario
// runs with: the ways real APIs tell clients how much quota is left.
var goodputFamilies = []retrytest.Family{retrytest.OpenAI, retrytest.Anthropic, retrytest.IETF}

// goodputProvider is the provider of the goodput scenario: a token bucket of
// goodputRate requests per second with a burst of goodputBurst, on the real
// clock (the provider is the system under load), answering with family's
// quota headers on every response and, on exhaustion, 429 with a
// whole-second Retry-After and the family's error body.
func goodputProvider(family retrytest.Family) retrytest.Config {
	return retrytest.Config{
		Family:          family,
		RetryAfter:      retrytest.RetryAfterSeconds,
		RateLimit:       retrytest.RateLimit{Rate: goodputRate, Burst: goodputBurst},
		RequestIDHeader: requestIDHeader,
		MaxAttempts:     benchFuse,
	}
}

// requestsThatSaw is how many logical requests (by requestIDHeader) got
// status at least once, whatever their final answer.
func requestsThatSaw(st retrytest.Stats, status int) int {
	n := 0
	for _, r := range st.Requests {
		for _, s := range r.Statuses {
			if s == status {
				n++
				break
			}
		}
	}
	return n
}

// chatBody is a small chat-completion request, the kind of call the scenario
// stands for. Every contender sends it as a replayable body.
var chatBody = []byte(`{"model":"bench-model","max_tokens":16,"messages":[{"role":"user","content":"Say ok."}]}`)

// goodputContender builds one way of sending requests over base.
type goodputContender struct {
	name string
	wrap func(base http.RoundTripper) http.RoundTripper
}

// goodputContenders returns each library as its users get it out of the box:
// default settings, nothing tuned for this provider. Only go-retryablehttp's
// logger is silenced (it writes a line per attempt to stderr) and its inner
// client is pointed at the shared base transport kind. resty and rehttp have
// no retry defaults (resty retries nothing until told to, rehttp has no
// policy until given one): they get the usual setup, in peers_test.go.
func goodputContenders() []goodputContender {
	return []goodputContender{
		{"bare", func(base http.RoundTripper) http.RoundTripper { return base }},
		{"retryablehttp", func(base http.RoundTripper) http.RoundTripper {
			rc := retryablehttp.NewClient() // 4 retries, 1s..30s, Retry-After honoured on 429/503
			rc.Logger = nil
			rc.HTTPClient = &http.Client{Transport: base}
			return &retryablehttp.RoundTripper{Client: rc}
		}},
		{"failsafe", func(base http.RoundTripper) http.RoundTripper {
			// failsafehttp's HTTP retry policy with its defaults: 2 retries,
			// waiting Retry-After on 429/503 and not at all otherwise.
			return failsafehttp.NewRoundTripper(base, failsafehttp.NewRetryPolicyBuilder().Build())
		}},
		{"resty", newResty},   // resty v2: 5 retries of errors, 429 and 5xx; 100 ms..2 s jittered backoff
		{"rehttp", newRehttp}, // 5 retries of temporary errors, 429 and 5xx; 1 s full-jitter backoff
		{"retryhttp", func(base http.RoundTripper) http.RoundTripper { return retryhttp.New(base) }},
	}
}

// BenchmarkGoodput runs the goodput scenario once per iteration for every
// header family and contender. Run it with -benchtime 1x: one scenario is
// several seconds of wall time, and that wall time is the measurement.
//
// An op is one scenario of 500 requests. Metrics: x-ideal is wall time over
// the ideal (n − burst)/rate = 4.9 s; attempts/op are requests the provider
// received; 429/op are 429s it sent; saw429/op are logical requests that got
// at least one 429; failed/op are requests whose final outcome was an error
// or a status other than 200. ns/op is the scenario's wall time.
func BenchmarkGoodput(b *testing.B) {
	for _, fam := range goodputFamilies {
		b.Run("family="+string(fam), func(b *testing.B) {
			for _, c := range goodputContenders() {
				b.Run("impl="+c.name, func(b *testing.B) { runGoodput(b, fam, c.wrap) })
			}
		})
	}
}

// runGoodput runs b.N scenarios, each against a fresh provider (a full
// bucket) through a fresh contender over a fresh base transport, so no state
// carries from one run or contender to the next.
func runGoodput(b *testing.B, family retrytest.Family, wrap func(http.RoundTripper) http.RoundTripper) {
	cfg := goodputProvider(family)
	ideal := time.Duration(float64(goodputRequests-goodputBurst) / goodputRate * float64(time.Second))
	var wall time.Duration
	var attempts, rejected, saw429, failed, fused int
	reasons := map[string]int{}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		p := retrytest.NewServer(cfg)
		base := cleanhttp.DefaultPooledTransport()
		client := &http.Client{Transport: wrap(base)}
		b.StartTimer()
		r := runClosedLoop(client, p.URL+"/v1/chat/completions", goodputWorkers, goodputPerWorker, goodputReqTimeout, goodputRunTimeout)
		b.StopTimer()
		base.CloseIdleConnections()
		p.Close()
		st := p.Stats()
		wall += r.wall
		attempts += st.Attempts
		rejected += st.Statuses[http.StatusTooManyRequests]
		saw429 += requestsThatSaw(st, http.StatusTooManyRequests)
		fused += st.Statuses[http.StatusGone]
		failed += r.failed
		for k, v := range r.reasons {
			reasons[k] += v
		}
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(float64(wall)/float64(ideal)/n, "x-ideal")
	b.ReportMetric(float64(attempts)/n, "attempts/op")
	b.ReportMetric(float64(rejected)/n, "429/op")
	b.ReportMetric(float64(saw429)/n, "saw429/op")
	b.ReportMetric(float64(failed)/n, "failed/op")
	if fused > 0 {
		b.Logf("the provider's fuse blew: %d requests answered 410", fused)
	}
	if len(reasons) > 0 {
		b.Logf("failures over %d run(s): %s", b.N, summarize(reasons))
	}
}

// goodputRequest sends one logical request and reads its answer to the end,
// as a caller would. It returns "" on success (a final 200), else a short
// reason for the failure.
func goodputRequest(ctx context.Context, client *http.Client, url string, id int) string {
	ctx, cancel := context.WithTimeout(ctx, goodputReqTimeout)
	defer cancel()
	resp, err := client.Do(jsonPost(ctx, url, chatBody, id))
	if err != nil {
		// failsafe-go returns its last response inside ExceededError rather
		// than to the caller; close it, as a careful caller would, so its
		// connection does not leak into the next run.
		var ex retrypolicy.ExceededError
		if errors.As(err, &ex) {
			if r, ok := ex.LastResult.(*http.Response); ok && r != nil && r.Body != nil {
				r.Body.Close()
			}
		}
		return errorReason(err)
	}
	_, rerr := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "status " + strconv.Itoa(resp.StatusCode)
	}
	if rerr != nil {
		return "reading body: " + rerr.Error()
	}
	return ""
}

// jsonPost builds logical request id: a JSON POST of body to url, its
// number in requestIDHeader, which every contender copies onto each
// attempt.
func jsonPost(ctx context.Context, url string, body []byte, id int) *http.Request {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(requestIDHeader, strconv.Itoa(id))
	return req
}

// errorReason shortens an error to a stable label: the URL (with its random
// port) would make every message unique.
func errorReason(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline exceeded"
	case errors.Is(err, retrypolicy.ErrExceeded):
		return "failsafe: retries exceeded"
	}
	if re := (*retryhttp.Error)(nil); errors.As(err, &re) {
		reason := fmt.Sprintf("retryhttp.Error status %d after %d attempts", re.StatusCode, re.Attempts)
		if re.StopReason != "" {
			// Waits and counts in the reason differ from request to
			// request: keep its words, not its numbers.
			reason += " (" + withoutNumbers(re.StopReason) + ")"
		}
		return reason
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, "giving up after"); i >= 0 {
		return "retryablehttp: " + msg[i:]
	}
	return msg
}

// withoutNumbers replaces each run of digits, dots and units that follows a
// digit ("1.5s", "250ms") with "N", so reasons that differ only in their
// figures count together.
func withoutNumbers(s string) string {
	var b strings.Builder
	inNumber := false
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			if !inNumber {
				b.WriteByte('N')
			}
			inNumber = true
		case inNumber && (r == '.' || r == 'µ' || r == 'n' || r == 'm' || r == 's' || r == 'h'):
		default:
			inNumber = false
			b.WriteRune(r)
		}
	}
	return b.String()
}

// summarize lists reason counts, most frequent first.
func summarize(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var buf bytes.Buffer
	for i, k := range keys {
		if i > 0 {
			buf.WriteString("; ")
		}
		fmt.Fprintf(&buf, "%d× %s", m[k], k)
	}
	return buf.String()
}

// TestGoodputBookkeeping checks how the goodput metrics are read from the
// provider, with the bare transport and a frozen clock so the bucket never
// refills: 12 requests against a burst of 10 leave 2 with a 429, and a
// retry of one of them (same request number) adds a 429 to 429/op but not a
// request to saw429/op. goodputRequest reports a final 429 as a failure.
func TestGoodputBookkeeping(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cfg := goodputProvider(retrytest.OpenAI)
	cfg.Now = func() time.Time { return now }
	p := retrytest.NewServer(cfg)
	defer p.Close()
	tr := cleanhttp.DefaultPooledTransport()
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	url := p.URL + "/v1/chat/completions"

	var reasons []string
	for _, id := range []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 10} {
		reasons = append(reasons, goodputRequest(context.Background(), client, url, id))
	}
	for i, r := range reasons {
		want := ""
		if i >= goodputBurst {
			want = "status 429"
		}
		if r != want {
			t.Errorf("request %d: reason %q, want %q", i, r, want)
		}
	}
	st := p.Stats()
	if st.Attempts != 13 || st.Statuses[http.StatusTooManyRequests] != 3 || st.Statuses[http.StatusOK] != goodputBurst {
		t.Fatalf("stats %+v, want 13 attempts: 10 answered 200, 3 answered 429", st)
	}
	if got := requestsThatSaw(st, http.StatusTooManyRequests); got != 2 {
		t.Errorf("requests that saw a 429: %d, want 2 (request 10 twice, request 11 once)", got)
	}
	if got := requestsThatSaw(st, http.StatusGone); got != 0 {
		t.Errorf("requests that saw a 410: %d, want 0", got)
	}
}

// TestWithoutNumbers checks how stop reasons are grouped in the failure
// summaries.
func TestWithoutNumbers(t *testing.T) {
	for in, want := range map[string]string{
		"retries exhausted": "retries exhausted",
		"the next attempt (in 1.5s) would start after the request deadline": "the next attempt (in N) would start after the request deadline",
		"server asked to wait 1m30s, longer than the limit 1m0s":            "server asked to wait N, longer than the limit N",
		"wait 250ms": "wait N",
	} {
		if got := withoutNumbers(in); got != want {
			t.Errorf("withoutNumbers(%q) = %q, want %q", in, got, want)
		}
	}
}
