//go:build go1.25

// The //go:debug asynctimerchan=0 that synctest needs is set once for the
// test binary in robustness_test.go (a second one is an error), under the
// same build constraint.

// Poisoning: a server states something absurd once (a wait of centuries, a
// quota that resets in year 9999, a clock eight thousand years off), then
// answers healthily. Bounded trust says the upstream serves again within
// WithMaxRetryAfter of the absurd answer, and that every request sent in the
// meantime either waits and succeeds or fails at once with ErrRateLimited.
// The whole transport runs in simulated time (testing/synctest): the default
// clock is time.Now, which the bubble makes virtual.

package retryhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// poisonBound is the WithMaxRetryAfter of the poisoning tests.
const poisonBound = 2 * time.Second

// poisonMargin is how late after the bound the upstream may serve again: the
// poll step, a round trip and change.
const poisonMargin = 150 * time.Millisecond

// poisonJitter is the retry jitter of the poisoning tests, which also
// spreads requests released together from a hold.
const poisonJitter = 100 * time.Millisecond

// poisonPoll is how often a new request is started while the test waits for
// the upstream to serve again.
const poisonPoll = 50 * time.Millisecond

// poisonCase is one absurd statement: the server answers it once, then
// answers 200 with healthy headers.
type poisonCase struct {
	name    string
	status  int
	absurd  func(now time.Time) http.Header
	healthy func(now time.Time) http.Header // nil: no headers at all
	// sane marks a statement that is absurd only in its Date: read on the
	// local clock, as it must be, it asks for a wait of within (0: none),
	// and the upstream must serve again by then, not merely by the bound.
	sane   bool
	within time.Duration
}

const (
	year9999 = "Fri, 31 Dec 9999 23:59:59 GMT"
	year1970 = "Thu, 01 Jan 1970 00:00:00 GMT"
)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func with(h http.Header, kv ...string) http.Header {
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func saneOpenAI(time.Time) http.Header { return openAIHeaders(100, 99, "600ms") }

func saneGitHub(now time.Time) http.Header {
	return hdr("X-Ratelimit-Limit", "5000", "X-Ratelimit-Remaining", "4999",
		"X-Ratelimit-Reset", fmt.Sprint(now.Add(time.Hour).Unix()))
}

func saneAnthropic(now time.Time) http.Header {
	return anthropicHeaders(50, 49, now.Add(time.Second))
}

func saneIETF(time.Time) http.Header {
	return hdr("Ratelimit", `"default";r=99;t=1`, "Ratelimit-Policy", `"default";q=100;w=1`)
}

func poisonCases() []poisonCase {
	githubForever := func(time.Time) http.Header {
		return hdr("X-Ratelimit-Limit", "5000", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "99999999999")
	}
	return []poisonCase{
		{name: "Retry-After 20 digits", status: 429,
			absurd: func(time.Time) http.Header { return hdr("Retry-After", "99999999999999999999") }},
		{name: "retry-after-ms 1e308", status: 429,
			absurd: func(time.Time) http.Header { return hdr("Retry-After-Ms", "1e308") }},
		{name: "Retry-After date in 9999", status: 429,
			absurd: func(time.Time) http.Header { return hdr("Retry-After", year9999) }},
		{name: "Retry-After date in 9999 with the Date in 9999", status: 429,
			absurd: func(time.Time) http.Header {
				return hdr("Retry-After", year9999, "Date", "Fri, 31 Dec 9999 23:59:58 GMT")
			}},

		{name: "X-RateLimit remaining 0 reset 99999999999/200", status: 200, absurd: githubForever, healthy: saneGitHub},
		{name: "X-RateLimit remaining 0 reset 99999999999/429", status: 429, absurd: githubForever, healthy: saneGitHub},

		{name: "Date in 9999 with sane Anthropic headers", status: 200,
			absurd:  func(now time.Time) http.Header { return with(saneAnthropic(now), "Date", year9999) },
			healthy: saneAnthropic, sane: true},
		{name: "Date in 9999 with an exhausted Anthropic bucket", status: 429,
			absurd: func(now time.Time) http.Header {
				return with(anthropicHeaders(50, 0, now.Add(time.Second)), "Date", year9999, "Retry-After", "1")
			},
			healthy: saneAnthropic, sane: true, within: time.Second},
		{name: "Date in 9999 with a Retry-After date", status: 429,
			absurd: func(now time.Time) http.Header {
				return hdr("Date", year9999, "Retry-After", now.Add(time.Second).UTC().Format(http.TimeFormat))
			},
			sane: true, within: time.Second},
		{name: "Date in 1970 with an exhausted epoch reset", status: 200,
			absurd: func(now time.Time) http.Header {
				return hdr("Date", year1970, "X-Ratelimit-Limit", "60", "X-Ratelimit-Remaining", "0",
					"X-Ratelimit-Reset", fmt.Sprint(now.Add(time.Second).Unix()))
			},
			healthy: saneGitHub, sane: true, within: time.Second},
		{name: "Date in 1970 with a Retry-After date", status: 429,
			absurd: func(now time.Time) http.Header {
				return hdr("Date", year1970, "Retry-After", now.Add(time.Second).UTC().Format(http.TimeFormat))
			},
			sane: true, within: time.Second},
		{name: "Date in 1970 with sane OpenAI headers", status: 200,
			absurd:  func(now time.Time) http.Header { return with(saneOpenAI(now), "Date", year1970) },
			healthy: saneOpenAI, sane: true},
	}
}

// poisonServer answers the first request with the absurd statement and
// every later one with a healthy 200.
type poisonServer struct {
	c        poisonCase
	mu       sync.Mutex
	n        int
	absurdAt time.Time   // when the absurd answer left
	served   []time.Time // arrivals of the healthy answers
}

func (s *poisonServer) RoundTrip(req *http.Request) (*http.Response, error) {
	arrived := time.Now()
	time.Sleep(simRTT)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if s.n == 1 {
		s.absurdAt = now
		return &http.Response{StatusCode: s.c.status, Header: s.c.absurd(now), Body: http.NoBody, Request: req}, nil
	}
	s.served = append(s.served, arrived)
	h := http.Header{}
	if s.c.healthy != nil {
		h = s.c.healthy(now)
	}
	return &http.Response{StatusCode: http.StatusOK, Header: h, Body: http.NoBody, Request: req}, nil
}

// poisonOutcome is what one request saw.
type poisonOutcome struct {
	label      string
	start, end time.Time
	status     int
	err        error
}

// sendPoisoned sends one request with a deadline well past the bound, so
// that only the queue wait (WithMaxQueueWait, by default the bound) limits
// how long it may wait.
func sendPoisoned(rt http.RoundTripper, label string) poisonOutcome {
	o := poisonOutcome{label: label, start: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*poisonBound)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.poison.test/v1", nil)
	resp, err := rt.RoundTrip(req)
	o.end, o.err = time.Now(), err
	if resp != nil {
		o.status = resp.StatusCode
		resp.Body.Close()
	}
	return o
}

// violation holds an outcome to the contract: it waited (at most the
// queue wait and a round trip) and succeeded, or failed at once with an
// ErrRateLimited naming when to retry. It returns what is wrong, or "".
func (o poisonOutcome) violation(since time.Time) string {
	at := o.start.Sub(since)
	took := o.end.Sub(o.start)
	switch {
	case o.err == nil && o.status == http.StatusOK:
		if took > poisonBound+poisonMargin {
			return fmt.Sprintf("%s (sent %v after the absurd answer) succeeded only after %v, more than the bound", o.label, at, took)
		}
	case o.err == nil:
		return fmt.Sprintf("%s (sent %v after the absurd answer): status %d from a server that only answers 200 now", o.label, at, o.status)
	case !errors.Is(o.err, ErrRateLimited):
		return fmt.Sprintf("%s (sent %v after the absurd answer) failed after %v with %v, not ErrRateLimited", o.label, at, took, o.err)
	case took != 0:
		return fmt.Sprintf("%s (sent %v after the absurd answer) failed with ErrRateLimited only after waiting %v, not at once: %v", o.label, at, took, o.err)
	default:
		var e *Error
		if !errors.As(o.err, &e) || e.RetryAt.IsZero() {
			return fmt.Sprintf("%s (sent %v after the absurd answer): ErrRateLimited without RetryAt: %v", o.label, at, o.err)
		}
	}
	return ""
}

// TestPoisonedUpstreamServesAgainWithinTheBound runs each absurd statement
// against the whole transport: one request draws it; requests sent during
// the bound (and a poll every poisonPoll) must each wait and succeed or fail
// at once; the first healthy answer must arrive within the bound (plus
// poisonMargin) of the absurd one; and afterwards the upstream keeps
// serving: requests sent one after another all succeed.
func TestPoisonedUpstreamServesAgainWithinTheBound(t *testing.T) {
	for _, c := range poisonCases() {
		t.Run(c.name, func(t *testing.T) { runPoison(t, c) })
	}
}

// runPoison runs one poisoning case in a synctest bubble (see
// TestPoisonedUpstreamServesAgainWithinTheBound).
func runPoison(t *testing.T, c poisonCase) {
	synctest.Test(t, func(t *testing.T) {
		srv := &poisonServer{c: c}
		rt := New(srv, WithMaxRetryAfter(poisonBound), WithJitter(poisonJitter))
		first := sendPoisoned(rt, "the poisoned request")
		took := first.end.Sub(first.start)
		switch {
		case c.sane && c.within > 0 && c.status == http.StatusTooManyRequests:
			// Read on the local clock, the 429 asks for a short wait: the
			// request waits it out and is retried.
			if first.err != nil || first.status != http.StatusOK || took < c.within-50*time.Millisecond || took > c.within+poisonJitter+poisonMargin {
				t.Errorf("the request drawing a 429 that asks for %v on the local clock: status %d, err %v after %v; want a retry after %v",
					c.within, first.status, first.err, took, c.within)
			}
		case first.err == nil && first.status == c.status:
			if took > simRTT {
				t.Errorf("the request drawing the absurd answer took %v: it must not wait on it", took)
			}
		case first.err == nil && first.status == http.StatusOK && c.status == http.StatusTooManyRequests:
			// The wait named was sane: the request waited it out and
			// was retried.
			if took > poisonBound+poisonMargin {
				t.Errorf("the request drawing the 429 was retried only after %v, past the bound", took)
			}
		default:
			t.Fatalf("the request drawing the absurd answer: status %d, err %v; want status %d", first.status, first.err, c.status)
		}
		absurdAt := srv.absurdAt

		var mu sync.Mutex
		var outcomes []poisonOutcome
		var wg sync.WaitGroup
		launch := func(after time.Duration, label string) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Until(absurdAt.Add(after)))
				o := sendPoisoned(rt, label)
				mu.Lock()
				outcomes = append(outcomes, o)
				mu.Unlock()
			}()
		}
		// Requests during the bound, and a poll past it.
		for _, d := range []time.Duration{0, time.Millisecond, 10 * time.Millisecond, 500 * time.Millisecond,
			time.Second, 1500 * time.Millisecond, poisonBound - 10*time.Millisecond, poisonBound} {
			launch(d, fmt.Sprintf("a request at +%v", d))
		}
		for d := poisonPoll; d <= poisonBound+4*poisonPoll; d += poisonPoll {
			launch(d, fmt.Sprintf("a poll at +%v", d))
		}
		wg.Wait()
		sort.Slice(outcomes, func(i, j int) bool { return outcomes[i].start.Before(outcomes[j].start) })
		var bad []string
		for _, o := range outcomes {
			if v := o.violation(absurdAt); v != "" {
				bad = append(bad, v)
			}
		}
		if len(bad) > 0 {
			more := ""
			if len(bad) > 6 {
				more = fmt.Sprintf("\n\t... and %d more", len(bad)-6)
				bad = bad[:6]
			}
			t.Errorf("requests sent after the absurd answer neither waited and succeeded nor failed at once:\n\t%s%s", strings.Join(bad, "\n\t"), more)
		}

		srv.mu.Lock()
		served := append([]time.Time(nil), srv.served...)
		srv.mu.Unlock()
		if len(served) == 0 {
			var refused []string
			for _, o := range outcomes {
				if o.err != nil && o.start.Sub(absurdAt) >= poisonBound && len(refused) < 3 {
					refused = append(refused, fmt.Sprintf("%s: %v", o.label, o.err))
				}
			}
			t.Fatalf("no request reached the server in the %v after the absurd answer; past the bound, e.g.:\n\t%s",
				poisonBound+4*poisonPoll, strings.Join(refused, "\n\t"))
		}
		if back := served[0].Sub(absurdAt); back > poisonBound+poisonMargin {
			t.Errorf("the upstream served again only %v after the absurd answer, past the bound %v", back, poisonBound)
		} else if c.sane && back > c.within+poisonJitter+poisonMargin {
			t.Errorf("the upstream served again only %v after an answer whose Date alone was absurd, which asked for %v", back, c.within)
		}

		// The probe's healthy answer decides: the upstream keeps serving.
		var after []string
		for i := 0; i < 5; i++ {
			time.Sleep(100 * time.Millisecond)
			o := sendPoisoned(rt, fmt.Sprintf("request %d after recovery", i+1))
			if o.err != nil || o.status != http.StatusOK {
				after = append(after, fmt.Sprintf("%s (at +%v): status %d, waited %v, err %v",
					o.label, o.start.Sub(absurdAt), o.status, o.end.Sub(o.start), o.err))
			}
		}
		if len(after) > 0 {
			t.Errorf("the upstream does not keep serving after its healthy answers:\n\t%s", strings.Join(after, "\n\t"))
		}
	})
}
