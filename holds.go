package retryhttp

import (
	"math/rand/v2"
	"time"
)

// Holds: whatever the phase of slow start (slowstart.go), an exhausted quota
// (remaining 0) or a 429 / Retry-After holds every new request on the
// upstream until the server's time, so one 429 pauses the key instead of
// every request finding the limit by itself. Once the pacer knows a rate, a
// hold lasts at most one unit at that rate: what the server is seen to
// accept beats a coarse statement. So does what it accepted before its
// first 429, when that names a whole second at most and no rate-limit
// header came: the observed pace starts at that rate, and the hold lasts a
// unit of it (the refused request still waits its own Retry-After). That
// rate is known in the upstream's first second (seedAccepts), or once its
// answers are counted (a paced upstream's are): one unpaced for longer
// starts at one a second, a hold of the whole second.
//
// Bounded trust: no hold is longer than the bound (WithMaxRetryAfter).
// Servers' clocks are off and some send absurd values (a reset in the wrong
// unit, a Retry-After of days), so what a server says keeps the upstream
// untried for the bound at most: a hold cut to the bound ends in a new
// probe. The upstream goes cold again, one request goes, and its answer
// decides; a server that meant it says so again, and holds it again.

// holds is the hold state of one upstream. Time is passed in, so it runs
// in simulated time in tests. It is not safe for concurrent use:
// the upstream's lock guards it.
type holds struct {
	end       time.Time // new requests wait until then
	byQuota   bool      // the hold is a reading's (a quota used up), not a 429's
	reprobeAt time.Time // a hold was cut to the bound: probe again then
	reprobes  uint32    // how many times the upstream went cold again
}

// held reports whether a hold is in force at now.
func (h *holds) held(now time.Time) bool { return h.end.After(now) }

// free reports that the holds leave requests alone at now: none in force,
// and no new probe to come.
func (h *holds) free(now time.Time) bool { return !h.held(now) && h.reprobeAt.IsZero() }

// until holds new requests until at, trusting it up to bound from now (0:
// no bound): a hold cut to the bound ends in a new probe, at the bound. It
// reports whether the hold moved later; a hold never moves earlier (only
// lift ends one early).
func (h *holds) until(now, at time.Time, bound time.Duration) bool {
	if !at.After(h.end) || !at.After(now) {
		return false
	}
	if bound > 0 && at.Sub(now) > bound {
		at = now.Add(bound)
		h.reprobeAt = at
		if !at.After(h.end) {
			return false
		}
	}
	h.end = at
	return true
}

// lift ends a reading's hold, and the new probe it was to end in: a newer
// reading says quota remains, and the server's count beats its earlier
// statement. A 429's hold stays: a refusal is not taken back by a count.
func (h *holds) lift() {
	if h.byQuota {
		h.end, h.reprobeAt, h.byQuota = time.Time{}, time.Time{}, false
	}
}

// reprobeDue reports whether a hold cut to the bound has ended by now: the
// upstream is to go cold, and probe again (see reprobe).
func (h *holds) reprobeDue(now time.Time) bool {
	return !h.reprobeAt.IsZero() && !now.Before(h.reprobeAt)
}

// reprobe records that the upstream went cold for the new probe: turns
// given before it are void (see turn.reprobes).
func (h *holds) reprobe() {
	h.reprobeAt = time.Time{}
	h.reprobes++
}

// after is when a request that arrives at now may start, past the hold: now
// if none is in force; else at its end when the pace spreads the held
// requests (paced) or there is no jitter to spread them with; else at a
// random point in the jitter after it, so they do not go as a herd.
func (h *holds) after(now time.Time, jitter time.Duration, paced bool) time.Time {
	if !h.held(now) {
		return now
	}
	if paced || jitter <= 0 {
		return h.end
	}
	return h.end.Add(time.Duration(rand.Int64N(int64(jitter))))
}
