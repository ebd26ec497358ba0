package retryhttp

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The goodput scenario of bench/ (500 requests from 50 callers against a
// token bucket of 100/s, burst 10), played in simulated time against the
// pacing stage itself: each caller books a turn, waits for it, sends, and the
// simulated server answers a millisecond later with its family's headers. It
// pins the pacing math exactly, without the noise of a real clock.

// simBucket is the server's token bucket, in simulated time.
type simBucket struct {
	rate, burst float64
	tokens      float64
	last        time.Time
	rejected    int
}

func (b *simBucket) take(now time.Time) (ok bool, remaining int, untilFull time.Duration) {
	b.tokens = math.Min(b.burst, b.tokens+b.rate*now.Sub(b.last).Seconds())
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		ok = true
	} else {
		b.rejected++
	}
	full := time.Duration(math.Ceil((b.burst - b.tokens) / b.rate * float64(time.Second)))
	return ok, int(math.Floor(b.tokens)), full
}

// simHeaders are the headers of one family for a bucket reading.
func simHeaders(family string, now time.Time, limit, remaining int, untilFull time.Duration) http.Header {
	h := http.Header{}
	switch family {
	case "openai":
		h.Set("X-Ratelimit-Limit-Requests", strconv.Itoa(limit))
		h.Set("X-Ratelimit-Remaining-Requests", strconv.Itoa(remaining))
		h.Set("X-Ratelimit-Reset-Requests", (untilFull + time.Millisecond - 1).Truncate(time.Millisecond).String())
	case "anthropic":
		reset := now.Add(untilFull)
		if t := reset.Truncate(time.Second); !t.Equal(reset) {
			reset = t.Add(time.Second)
		}
		h.Set("Anthropic-Ratelimit-Requests-Limit", strconv.Itoa(limit))
		h.Set("Anthropic-Ratelimit-Requests-Remaining", strconv.Itoa(remaining))
		h.Set("Anthropic-Ratelimit-Requests-Reset", reset.UTC().Format(time.RFC3339))
	case "ietf":
		h.Set("RateLimit", fmt.Sprintf(`"default";r=%d;t=%d`, remaining, int64(math.Ceil(untilFull.Seconds()))))
		h.Set("RateLimit-Policy", `"default";q=100;w=1`)
	}
	return h
}

type simCaller struct {
	left    int
	w       *waiter
	t       turn
	booked  bool
	p       pass
	replyAt time.Time
	header  http.Header
	status  int
}

// simulateGoodput runs the scenario and returns the simulated wall time and
// the 429s the server sent.
func simulateGoodput(t *testing.T, family string) (time.Duration, int) {
	const (
		callers, each = 50, 10
		tick          = time.Millisecond
		rtt           = time.Millisecond
	)
	u := &upstream{}
	srv := &simBucket{rate: 100, burst: 10, tokens: 10, last: testStart}
	cs := make([]simCaller, callers)
	for i := range cs {
		cs[i].left = each
	}
	now, done := testStart, 0
	for ; done < callers*each; now = now.Add(tick) {
		if now.Sub(testStart) > time.Minute {
			t.Fatalf("%s: %d of %d requests done after a simulated minute", family, done, callers*each)
		}
		for i := range cs {
			c := &cs[i]
			switch {
			case !c.replyAt.IsZero():
				if now.Before(c.replyAt) {
					continue
				}
				limits := ParseRateLimits(c.header, now)
				var hold time.Duration
				if c.status == http.StatusTooManyRequests {
					hold, _ = ParseRetryAfter(c.header, now)
				}
				c.p.observe(now, limits, hold, c.status == http.StatusTooManyRequests, true)
				c.replyAt = time.Time{}
				if c.status == http.StatusOK {
					c.left--
					done++
				}
			case c.left == 0:
			case c.w != nil:
				select {
				case <-c.w.released:
				default:
					if now.Before(c.w.at) {
						continue
					}
				}
				c.t, c.w, c.booked = u.claim(c.w), nil, true
				if c.t.at.IsZero() {
					c.t.at = now
				}
			case !c.booked:
				c.t, c.w, c.p = u.schedule(now, 0)
				c.booked = c.w == nil
			default:
				if at, _, _ := u.recheck(now, &c.t, 0); !at.IsZero() {
					continue
				}
				u.dispatch(&c.p)
				ok, remaining, full := srv.take(now)
				c.header = simHeaders(family, now, int(srv.burst), remaining, full)
				c.status = http.StatusOK
				if !ok {
					c.status = http.StatusTooManyRequests
					c.header.Set("Retry-After", "1")
				}
				c.replyAt, c.booked = now.Add(rtt), false
			}
		}
	}
	return now.Sub(testStart), srv.rejected
}

func TestPacingGoodputInSimulatedTime(t *testing.T) {
	ideal := 4900 * time.Millisecond // (500 - burst 10) / 100 per second
	for _, family := range []string{"openai", "anthropic", "ietf"} {
		t.Run(family, func(t *testing.T) {
			wall, rejected := simulateGoodput(t, family)
			t.Logf("%s: %v (%.3fx ideal), %d 429s", family, wall, float64(wall)/float64(ideal), rejected)
			assert.LessOrEqual(t, float64(wall), 1.10*float64(ideal), "wall time within 1.10x ideal")
			assert.LessOrEqual(t, rejected, 10, "at most 2% of 500 requests see a 429")
		})
	}
}
