package retryhttp

import (
	"net/http"
	"time"
)

// serverClock learns how far an upstream's clock is from ours, from the
// Date headers of its responses, so that the absolute times it sends
// (resets, Retry-After dates) can be placed on our clock to better than
// the Date's whole second.
//
// A Date is the server's now cut down to the second, written just before
// the response left: date - arrival lies in (skew - 1s - trip, skew], where
// skew is the server's clock less ours and trip the time the response took
// to arrive. The largest such sample is therefore the best estimate of the
// skew, from below, and samples spread over a second close in on it. The
// estimate is the largest sample of the last two minutes (two one-minute
// windows), so a clock that is stepped is followed within two minutes.
//
// Until at least two samples with different fractions of a second have
// come, or when a Date disagrees with the estimate by more than two
// seconds (a clock step, another server behind the same name), the Date of
// the response itself is used, as ParseRateLimits does.
//
// Like the pacer, it takes the time now and is guarded by the upstream's
// lock.
type serverClock struct {
	cur, prev   skewSamples // the largest samples of this minute and the last
	distinctFrc bool        // two samples at different fractions of a second came
	firstFrac   time.Duration
	samples     int
}

type skewSamples struct {
	start time.Time
	max   time.Duration
	n     int
}

const (
	skewWindow   = time.Minute
	skewMismatch = 2 * time.Second
)

// serverNow returns the server's now at local time now, for a response with
// header h: by the learned skew when it is known and h's Date agrees with
// it, else by h's Date (see ServerNow). It records h's Date as a sample.
func (c *serverClock) serverNow(h http.Header, now time.Time) time.Time {
	date := ServerNow(h, now)
	if date.Equal(now) { // no usable Date
		return now
	}
	sample := date.Sub(now)
	c.add(now, sample)
	skew, ok := c.skew()
	if !ok || sample > skew+skewMismatch || sample < skew-skewMismatch {
		return date
	}
	return now.Add(skew)
}

func (c *serverClock) add(now time.Time, sample time.Duration) {
	if c.cur.n == 0 || now.Sub(c.cur.start) >= skewWindow {
		c.prev = c.cur
		if now.Sub(c.prev.start) >= 2*skewWindow {
			c.prev = skewSamples{}
		}
		c.cur = skewSamples{start: now, max: sample}
	}
	c.cur.max = max(c.cur.max, sample)
	c.cur.n++
	frac := time.Duration(now.Nanosecond()) // where in the server's second the sample fell, but for the skew
	if c.samples == 0 {
		c.firstFrac = frac
	} else if d := frac - c.firstFrac; d > 100*time.Millisecond || d < -100*time.Millisecond {
		c.distinctFrc = true
	}
	c.samples++
}

// skew is the estimate of the server's clock less ours, and whether there
// is one yet.
func (c *serverClock) skew() (time.Duration, bool) {
	if !c.distinctFrc {
		return 0, false
	}
	s := c.cur.max
	if c.prev.n > 0 {
		s = max(s, c.prev.max)
	}
	return s, true
}
