package retryhttp

import "time"

// windowEdge learns where a fixed window ends from what its answers show,
// for a window whose stated reset is only a whole second (GitHub's
// X-RateLimit-Reset in epoch seconds, cut down, rounded or up: up to a
// second early or late).
//
// The server counted each attempt between its send and its answer's
// arrival: a window ends after the latest send among its answers, at most
// a period after its first answer, and the window before it ended at or
// before the first answer of the next. The first answers of windows in a
// row tell the period (in whole seconds), and every end lies a whole
// number of periods from the one before, so the bounds gathered at each
// end, moved on by the periods passed, narrow one estimate: the current
// window ends in (lo, hi]. When that is wider than edgeFine, the pacer
// probes it one attempt at a time (see next and pacer.windowShortfall): a
// 429 raises lo, a first answer from the new window lowers hi. Observations
// beat statements: once
// the edge is known, the stated reset (and a 429's whole-second
// Retry-After) no longer decides when the next window's quota goes.
//
// Like the pacer it is part of, it takes the time and is guarded by the
// upstream's lock.
type windowEdge struct {
	period time.Duration // whole seconds; 0: not known yet
	lo, hi time.Time     // the current window ends in (lo, hi]; hi zero: nothing known

	least int64     // the least remaining the newest window's answers gave
	first time.Time // when its first answer came
	last  time.Time // the latest send among its answers

	probeAt time.Time // when the probe bisecting the edge went; zero: none out
	fresh   bool      // the last answer seen was the first of a newer window
	early   bool      // a probe was answered by the new window: bisect at the middle

	// trip is the shortest round trip of late (see rttFloor): an edge
	// known within edgeTrips of them is not worth a probe (see next).
	trip time.Duration

	// agreed counts the windows in a row whose bounds, once learned,
	// were not replaced: a send past the end known, answered by the old
	// window, or bounds that do not overlap (windows passed unseen)
	// start it again (see fold).
	agreed int
}

const (
	// edgeFine is how narrow the edge must be known for a window's quota
	// to go at its learned end without a probe first.
	edgeFine = 8 * time.Millisecond
	// edgeTrips is how many round trips wide an edge may be known and
	// still be gone to at its late bound, without a probe (see next).
	edgeTrips = 5
	// edgeSame is how far apart two resets as read may be and still name
	// the same window (the clock's estimate moves them a little).
	edgeSame = 500 * time.Millisecond
	// probeOut is how long a bisecting probe is waited for before another
	// may go (its answer may be lost).
	probeOut = 250 * time.Millisecond
	// probePoll is how often requests waiting on a probe's answer look
	// again.
	probePoll = time.Millisecond
	// cutDownWidest and cutDownAgreed are how narrow, and over how many
	// windows' ends in a row, an end must be known before a quota read
	// empty after its reset passed is held until it (upstream.cutDownEnd).
	cutDownWidest = 300 * time.Millisecond
	cutDownAgreed = 2
)

// see takes one answer: sent is when its attempt went (zero if unknown),
// now when it came, remaining and limit its count. A window is told from
// the next by its count, not by its reset: a reset cut down to the second
// is read as now once it has passed, and the first resets are read against
// a clock not learned yet. Within a window the count only falls (see
// newer). The pacer's learn reads fresh, so see comes first.
func (e *windowEdge) see(sent, now time.Time, remaining, limit int64) {
	if sent.After(now) {
		sent = time.Time{}
	}
	probed := false
	if !e.probeAt.IsZero() && !sent.IsZero() && !sent.Before(e.probeAt) {
		e.probeAt = time.Time{} // the probe (or one after it) answered
		probed = true
	}
	e.fresh = false
	switch {
	case e.first.IsZero():
		e.start(sent, now, remaining)
	case e.newer(now, remaining, limit):
		// A newer window: the current one ended after its last send,
		// and the windows between (if any) before this answer came.
		// The first answers of windows in a row are a period apart,
		// or a little more.
		// (Cut down, unless within a tenth of a second of a whole
		// one: the new window's first answer comes late when its
		// start was waited for by a late reset, and a little early
		// when the old window's first answer came a little late.)
		d := now.Sub(e.first)
		if r := d.Round(time.Second); d < r && r-d <= 100*time.Millisecond {
			d = r
		}
		d = d.Truncate(time.Second)
		if d >= time.Second && (e.period == 0 || d < e.period) {
			e.period = d
		}
		if e.period > 0 {
			n := max(d/e.period, 1) // windows passed
			if !e.last.IsZero() {
				// It ended before the windows between began, and
				// at most a period after its own first answer
				// (the period was not known while it lasted).
				b := now.Add(-(n - 1) * e.period)
				if c := e.first.Add(e.period); c.Before(b) {
					b = c
				}
				e.fold(e.last, b, true)
			}
			if !e.hi.IsZero() { // the bounds move on to the new window's end
				e.lo, e.hi = e.lo.Add(n*e.period), e.hi.Add(n*e.period)
			}
		}
		e.start(sent, now, remaining)
		e.fresh = true
		if probed {
			// A probe the new window answered: its end lies
			// well before the late bound (see next).
			e.early = true
		}
	default: // the same window
		e.least = min(e.least, remaining)
		if sent.After(e.last) {
			e.last = sent
			if e.period > 0 {
				e.fold(e.last, e.first.Add(e.period), false)
			}
		}
	}
}

// newer reports an answer from a newer window than the current one: its
// count is up by a quarter of the limit or more, and it came after the
// current window may have ended. (Attempts sent at once reach the server in
// any order: an answer counted early may come after one counted late, its
// count higher, in the same window.)
func (e *windowEdge) newer(now time.Time, remaining, limit int64) bool {
	if remaining < e.least+max(limit/4, 1) {
		return false
	}
	lo, _, ok := e.end()
	return !ok || now.After(lo)
}

func (e *windowEdge) start(sent, now time.Time, remaining int64) {
	e.least, e.first, e.last = remaining, now, sent
}

// fold narrows the bounds on the current window's end (the window of
// e.first) by another: it is in (a, b]. ended tells the bounds a window's
// end gave, which count towards agreed when they agree with the ones
// before; the first bounds, and any that replace them, start it again.
func (e *windowEdge) fold(a, b time.Time, ended bool) {
	if !b.After(a) || e.period > 0 && b.Sub(a) >= e.period {
		return // nothing to learn
	}
	if e.hi.IsZero() {
		e.lo, e.hi, e.agreed = a, b, 0
		return
	}
	lo, hi := later(e.lo, a), b
	if e.hi.Before(hi) {
		hi = e.hi
	}
	if !hi.After(lo) {
		// The bounds disagree (the server's windows moved, or its
		// clock did, or windows passed unseen): the newer one stands
		// alone.
		lo, hi = a, b
		e.agreed = 0
	} else if ended {
		e.agreed++
	}
	e.lo, e.hi = lo, hi
}

// end is where the current window (the newest answered) ends, as far as
// the answers tell: in (lo, hi]; ok is false while nothing is known. It
// ends after its last send, and at most a period after its first answer.
func (e *windowEdge) end() (lo, hi time.Time, ok bool) {
	if e.hi.IsZero() || e.period <= 0 || e.first.IsZero() {
		return time.Time{}, time.Time{}, false
	}
	lo, hi = later(e.lo, e.last), e.hi
	if limit := e.first.Add(e.period); hi.After(limit) {
		hi = limit
	}
	if !hi.After(lo) {
		hi = lo.Add(time.Nanosecond)
	}
	return lo, hi, true
}

// next is when the current window's quota may be tried next: its learned
// end (the late bound) when the edge is known within edgeFine, or within
// edgeTrips round trips, else a probe's time; ok is false while nothing is
// known. fine reports the former.
//
// A probe the old window refuses waits out its whole-second Retry-After (a
// floor), where going at the late bound costs the window's quota at most
// the width, and the burst at most that at its end. With 20 ms answers,
// bisecting an edge known within 100 ms cost a refused probe in the last
// window, and the burst a second, in about half the runs (1.26-1.33x the
// ideal, behind the plain loop's 1.07x); gone to at the late bound, none
// (1.02-1.09x). With 2 ms answers the edge is bisected to edgeFine as
// before: a fixed 100 ms left such bursts up to 85 ms behind the plain
// loop.
//
// The first probe goes edgeFine before the late bound: a window that
// began as its first answer came (the requests that opened it were the
// first of a burst, or retries a period after them, as a plain retry loop
// sends) ends just before that bound, and one refusal makes it known
// (bisecting from the middle cost a 429 per halving, all refused, and left
// the bound as wide). Once a probe is answered by the new window instead,
// the end lies well before the late bound: the probes bisect what is
// known, at the middle.
//
// stated is the window's end as its reset stated it (zero if it had passed
// when read): while bisecting, if it lies within what is known, below its
// last edgeFine, it is the probe's time instead of the middle. A window
// on whole seconds (stated exactly) is then known as soon as that probe
// is answered, and a reset cut down gives a lower bound at once.
func (e *windowEdge) next(stated time.Time) (at time.Time, fine, ok bool) {
	lo, hi, ok := e.end()
	if !ok {
		return time.Time{}, false, false
	}
	if hi.Sub(lo) <= max(edgeFine, edgeTrips*e.trip) {
		return hi, true, true
	}
	if !e.early {
		return hi.Add(-edgeFine), false, true
	}
	if stated.After(lo) && stated.Before(hi.Add(-edgeFine)) {
		return stated, false, true
	}
	return lo.Add(hi.Sub(lo) / 2), false, true
}

// probing reports a bisecting probe out at now.
func (e *windowEdge) probing(now time.Time) bool {
	return !e.probeAt.IsZero() && now.Sub(e.probeAt) < probeOut
}
