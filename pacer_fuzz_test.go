package retryhttp

import (
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"
)

// FuzzPacerProgress drives one upstream's admit state (slow start, holds,
// the pacer) through a sequence of events decoded from the input, in
// simulated time: time passes, requests book turns (schedule), wait for
// them (recheck; a request whose turn has come is dispatched), give up, and
// attempts are answered (observe) with responses whose rate-limit headers
// are drawn from every family the parser reads (random counts; resets as
// durations, RFC 3339, epoch, delta seconds, huge values; Date headers far
// off) and with random 429s and Retry-After values.
//
// After every step it holds the state to bounded trust:
//
//   - nothing is NaN, infinite or negative (interval, rate, proven,
//     ceiling, capacity, the pace clock);
//   - the interval is within the bound, and so are the hold and the
//     reprobe time (both at most the bound from now);
//   - progress: when nothing is in flight and the first request in the
//     queue, rechecked now, is told to wait, some queued request goes within
//     the bound plus three intervals (plus one for each slot left empty by
//     a request that gave up);
//   - the booked set holds exactly the slots the queued requests hold on
//     the pace clock, and every paced turn whose slot lies ahead is in it;
//   - order at a stall: a request that goes at a stall before its slot
//     goes ahead of no request whose slot is not yet due. (Order is not
//     checked otherwise: a turn booked before the pace began takes a slot
//     behind those booked on it, and requests already due go in the order
//     they look.)
//
// Run it with
//
//	go test -run '^$' -fuzz FuzzPacerProgress -fuzztime 20000x .
func FuzzPacerProgress(f *testing.F) {
	for _, seed := range pacerFuzzSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		runPacerFuzz(t, data)
	})
}

// Event codes of the fuzz input: each event is an op byte followed by the
// bytes it reads (see runPacerFuzz).
const (
	evAdvance  = iota // one byte: how long
	evSchedule        // a new request books a turn
	evRecheck         // one byte: which request rechecks its turn
	evGiveUp          // one byte: which request gives up
	evAnswer          // one byte: which attempt; then a response (see fuzzResponse)
	evFail            // one byte: which attempt ends in a transport error
	evFree            // a request on a free upstream: sent and answered at once; then a response
	evCount
)

// fuzzBytes reads the fuzz input; past its end it reads zeros.
type fuzzBytes struct {
	b []byte
	i int
}

func (r *fuzzBytes) more() bool { return r.i < len(r.b) }

func (r *fuzzBytes) byte() byte {
	if r.i >= len(r.b) {
		return 0
	}
	c := r.b[r.i]
	r.i++
	return c
}

func (r *fuzzBytes) pick(n int) int { return int(r.byte()) % n }

// fuzzRequest is one request waiting for its turn.
type fuzzRequest struct {
	id  int
	t   turn
	w   *waiter // queued behind the probe, until claimed
	p   pass
	due time.Time // when its ramp lets a waiter go
	// wake is when the request rechecks next, as its last recheck said
	// (the time it was told to wait until, or now if quick is closed).
	wake  time.Time
	quick <-chan struct{}
}

// pacerFuzzSeeds are inputs that reach the interesting states: each family's
// sane and absurd readings, 429s with and without Retry-After, queues, holds
// cut to the bound and the probes after them. The first byte picks the bound
// (1 + b%8 half-seconds); an answer is followed by the seven bytes of its
// response (see fuzzResponse); an advance by one byte (see fuzzAdvance: 3 is
// a second, 6 ten seconds, 7 a minute).
func pacerFuzzSeeds() [][]byte {
	b := func(ev ...byte) []byte { return ev }
	const ok, tooMany = 0, 1
	return [][]byte{
		// A request goes and is answered with a sane OpenAI bucket (100,
		// 99 left, full in 600ms); a queue books and drains.
		b(1, evSchedule, evRecheck, 0, evAnswer, 0, ok, 1, 10, 9, 4, 0, 0,
			evSchedule, evSchedule, evSchedule, evRecheck, 0, evRecheck, 1, evAdvance, 3, evRecheck, 2,
			evAnswer, 0, ok, 1, 10, 8, 4, 0, 0),
		// OpenAI: 0 of 100 left, reset in 1000000h; then requests wait.
		b(3, evSchedule, evRecheck, 0, evAnswer, 0, ok, 1, 10, 0, 8, 0, 0,
			evSchedule, evRecheck, 0, evAdvance, 6, evSchedule, evRecheck, 0, evRecheck, 1, evAdvance, 6, evRecheck, 0),
		// GitHub: 0 of 5000 left, reset 99999999999, in a 429.
		b(3, evSchedule, evRecheck, 0, evAnswer, 0, tooMany, 3, 12, 0, 5, 0, 0,
			evSchedule, evRecheck, 0, evAdvance, 7, evSchedule, evRecheck, 0, evRecheck, 1),
		// IETF: 0 of 100 left in a window of 99999999999 s, in a 429.
		b(3, evSchedule, evRecheck, 0, evAnswer, 0, tooMany, 4, 10, 0, 64, 0, 0,
			evSchedule, evRecheck, 0, evAdvance, 6, evRecheck, 0),
		// A 429 with a Retry-After of 20 digits and no rate-limit headers,
		// then a healthy answer to the probe.
		b(3, evSchedule, evRecheck, 0, evAnswer, 0, tooMany, 0, 0, 0, 0, 0, 3,
			evSchedule, evAdvance, 6, evRecheck, 0, evAnswer, 0, ok, 0, 0, 0, 0, 0, 0),
		// Free upstream traffic, then a 429 with retry-after-ms 1e308.
		b(2, evFree, ok, 0, 0, 0, 0, 0, 0, evFree, ok, 0, 0, 0, 0, 0, 0,
			evSchedule, evRecheck, 0, evAnswer, 0, tooMany, 0, 0, 0, 0, 0, 5,
			evSchedule, evRecheck, 0, evAdvance, 7, evRecheck, 0),
		// A Date in year 9999 beside a sane Anthropic bucket (49 of 50
		// left); a transport error; a request that gives up.
		b(2, evSchedule, evRecheck, 0, evAnswer, 0, ok, 2, 8, 7, 2, 3, 0,
			evSchedule, evRecheck, 0, evFail, 0, evSchedule, evGiveUp, 0),
		// GitHub-style quotas of 3 and 5 with a 429 among the answers,
		// Dates far off, and requests that give up: after the reprobe's
		// answer says 3 of 5 remain, a new request, alone in the queue
		// with nothing in flight, is told to wait 2.2 s behind a bound
		// of 0.5 s, booked behind slots nobody holds (found by drawing
		// inputs toward such quotas, then cut down).
		b(0x0, 0x1, 0x2, 0x10, 0x4, 0x24, 0x0, 0x3, 0x3, 0x3, 0x0, 0x2, 0x72, 0x4, 0x9a, 0x1, 0x3, 0x3, 0x0, 0xa,
			0x1, 0x4, 0x1, 0x1, 0x4, 0x40, 0x1, 0x3, 0x4, 0x0, 0x21, 0x2, 0xf9, 0x4, 0x3c, 0x0, 0x3, 0x4, 0x0, 0x3a,
			0x0, 0x0, 0x1, 0x4, 0x3, 0x0, 0x3, 0x4, 0x4, 0x21, 0x0, 0x2, 0x4, 0x82, 0x0, 0x3, 0x3, 0x1, 0xa, 0x2,
			0x7, 0x4, 0x72, 0x21, 0x2, 0x4, 0x4, 0xd2, 0x1, 0x3, 0x3, 0x0, 0x1, 0x4, 0x27, 0x0, 0x3, 0x3, 0x4, 0x0,
			0x1, 0x7, 0x4, 0x0, 0xa, 0x3, 0x0, 0x2, 0x36, 0x2, 0xce, 0x0, 0x12, 0x1, 0x1, 0x4, 0x3f, 0x1, 0x3, 0x4,
			0x0, 0x18, 0x1, 0x6, 0x0, 0xa, 0x4, 0x1a, 0x0, 0x3, 0x4, 0x3, 0x0, 0x4, 0x1, 0x2, 0x37, 0x4, 0xfb, 0x0,
			0x3, 0x4, 0x3, 0x21, 0x3, 0x1, 0xa, 0x5c, 0x1, 0x3),
		// A quota of 5 found empty by a 429 (retry-after-ms 250) and a
		// success read out of order: the model's shortfall, one unit at
		// the proven 1 a second, is a wait of its own, counted from the
		// recheck. It too must end by the bound from the hold's end,
		// not a bound from whenever a request looked.
		b(0x2, 0x36, 0x1, 0x3, 0x7, 0x0, 0x9, 0x2, 0xa7, 0x1, 0x8, 0x2, 0xce, 0x4, 0xa5, 0x1, 0x3, 0x4, 0x0, 0x2,
			0x2, 0x6, 0x4, 0xa4, 0x0, 0x3, 0x4, 0x1, 0xa, 0x1, 0x4, 0x1, 0x0, 0x4, 0x7, 0x2, 0x0, 0x2, 0x2),
		// A queue paced at 750 ms with a bound of 1.5 s, idle: the first
		// in line's slot falls on the stall's time, a float's rounding
		// below the pace clock's reading, and the next, rechecking at
		// that instant, went at the stall ahead of it (found by drawing
		// inputs toward GitHub-style quotas, then cut down).
		b(0x2, 0x1, 0x1, 0x4, 0x83, 0x0, 0x5, 0x4, 0x4, 0xa, 0x5, 0x2, 0x71, 0xb0, 0x4, 0xab, 0x0, 0x3, 0x3, 0x2,
			0xf7, 0x2, 0x3c, 0x6, 0x0, 0x2, 0x0, 0x1, 0x0, 0x3, 0xcd, 0x0, 0x10, 0x6, 0x0, 0x3, 0x0, 0x4, 0x83, 0x0,
			0x3, 0x4, 0x0, 0x34, 0x0, 0x0, 0xd, 0x2, 0x6e, 0x1, 0x4, 0xde, 0x0, 0x3, 0x3, 0x0, 0x60, 0x3, 0x5, 0x0,
			0x1c, 0xe4, 0x4, 0x18, 0x0, 0x3, 0x3, 0x1, 0xdc, 0x3, 0x1, 0x0, 0xc, 0x3, 0x48, 0x6, 0x0, 0x3, 0x3, 0x2,
			0x0, 0x1, 0x0, 0x0, 0x1e, 0x3, 0xdc, 0x0, 0x11, 0x3, 0x59, 0x1, 0x1, 0x1, 0x4, 0xa1, 0x0, 0x3, 0x4, 0x3,
			0x36, 0x0, 0x4, 0xc9, 0x1, 0x2, 0x5, 0x2, 0xb6, 0xb8, 0x3, 0x1, 0x4, 0x4, 0x3, 0x1, 0x4, 0x0, 0x36, 0x3,
			0x5, 0x1, 0x1, 0x4, 0x94, 0x0, 0x3, 0x3, 0x3, 0xc, 0x1, 0x3, 0x1, 0x4, 0xd7, 0x0, 0x0, 0x3, 0x0, 0xb3,
			0x1, 0x5, 0x0, 0x14, 0x4, 0xee, 0x0, 0x3, 0x4, 0x3, 0xc0, 0x0, 0x3, 0x1),
	}
}

// fuzzCounts are the limits and remaining counts responses state.
var fuzzCounts = []string{"0", "1", "2", "3", "5", "9", "10", "49", "50", "99", "100", "1000", "5000",
	"99999999999", "9223372036854775807", "99999999999999999999"}

// fuzzResponse decodes a response: status, family, limit, remaining, reset,
// Date, Retry-After (one byte each).
func fuzzResponse(r *fuzzBytes, now time.Time) (throttled bool, h http.Header) {
	throttled = r.byte()%2 == 1
	family := r.pick(7)
	limit := fuzzCounts[r.pick(len(fuzzCounts))]
	remaining := fuzzCounts[r.pick(len(fuzzCounts))]
	resetB := r.byte()
	dateB := r.pick(6)
	raB := r.pick(8)
	h = http.Header{}
	offsets := []time.Duration{-2 * time.Second, 0, 500 * time.Millisecond, time.Second, 2 * time.Second,
		10 * time.Second, time.Minute, time.Hour, 24 * time.Hour, 365 * 24 * time.Hour}
	off := offsets[int(resetB)%len(offsets)]
	switch family {
	case 1: // OpenAI: a relative duration
		resets := []string{"0s", "1ms", "10ms", "100ms", "600ms", "1s", "6s", "1m0s", "1000000h", "99999999999h", "1.5s", "20ms", "bogus"}
		h.Set("X-Ratelimit-Limit-Requests", limit)
		h.Set("X-Ratelimit-Remaining-Requests", remaining)
		h.Set("X-Ratelimit-Reset-Requests", resets[int(resetB)%len(resets)])
	case 2: // Anthropic: RFC 3339 on the server's clock
		reset := now.Add(off).UTC().Truncate(time.Second).Format(time.RFC3339)
		switch resetB % 16 {
		case 9, 15:
			reset = "9999-12-31T23:59:59Z"
		case 10:
			reset = "1970-01-01T00:00:00Z"
		case 11:
			reset = now.Add(off).UTC().Format(time.RFC3339Nano)
		}
		h.Set("Anthropic-Ratelimit-Requests-Limit", limit)
		h.Set("Anthropic-Ratelimit-Requests-Remaining", remaining)
		h.Set("Anthropic-Ratelimit-Requests-Reset", reset)
	case 3: // GitHub: an epoch, a delta, or an absurd number
		var reset string
		switch resetB % 8 {
		case 0, 1, 2:
			reset = fmt.Sprint(now.Add(off).Unix())
		case 3:
			reset = fmt.Sprint(int64(off / time.Second))
		case 4:
			reset = fmt.Sprint(now.Add(off).UnixMilli())
		case 5:
			reset = "99999999999"
		case 6:
			reset = "99999999999999999999"
		case 7:
			reset = "1.5"
		}
		h.Set("X-Ratelimit-Limit", limit)
		h.Set("X-Ratelimit-Remaining", remaining)
		h.Set("X-Ratelimit-Reset", reset)
	case 4: // IETF: a policy and an item
		ts := []string{"0", "1", "10", "60", "99999999999", "3600"}
		ws := []string{"1", "10", "60", "0.1", "99999999999", "86400"}
		h.Set("Ratelimit", fmt.Sprintf(`"default";r=%s;t=%s`, remaining, ts[int(resetB)%len(ts)]))
		h.Set("Ratelimit-Policy", fmt.Sprintf(`"default";q=%s;w=%s`, limit, ws[int(resetB>>4)%len(ws)]))
	case 5: // Discord: reset-after in delta seconds
		h.Set("X-Ratelimit-Limit", limit)
		h.Set("X-Ratelimit-Remaining", remaining)
		h.Set("X-Ratelimit-Reset-After", fmt.Sprintf("%.3f", off.Seconds()))
	case 6: // the older IETF draft
		h.Set("Ratelimit-Limit", limit)
		h.Set("Ratelimit-Remaining", remaining)
		h.Set("Ratelimit-Reset", fmt.Sprint(int64(max(off, 0)/time.Second)))
	}
	switch dateB {
	case 1:
		h.Set("Date", now.UTC().Format(http.TimeFormat))
	case 2:
		h.Set("Date", now.Add(5*time.Second).UTC().Format(http.TimeFormat))
	case 3:
		h.Set("Date", "Fri, 31 Dec 9999 23:59:59 GMT")
	case 4:
		h.Set("Date", "Thu, 01 Jan 1970 00:00:00 GMT")
	case 5:
		h.Set("Date", now.Add(-90*time.Minute).UTC().Format(http.TimeFormat))
	}
	if throttled {
		switch raB {
		case 1:
			h.Set("Retry-After", "1")
		case 2:
			h.Set("Retry-After", "30")
		case 3:
			h.Set("Retry-After", "99999999999999999999")
		case 4:
			h.Set("Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT")
		case 5:
			h.Set("Retry-After-Ms", "1e308")
		case 6:
			h.Set("Retry-After-Ms", "250")
		case 7:
			h.Set("Retry-After", now.Add(2*time.Second).UTC().Format(http.TimeFormat))
		}
	}
	return throttled, h
}

// fuzzAdvance decodes how long time passes.
func fuzzAdvance(c byte, bound time.Duration) time.Duration {
	units := []time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, time.Second,
		bound / 2, bound, 10 * time.Second, time.Minute}
	return units[c&7] * time.Duration(1+(c>>3)&3)
}

func runPacerFuzz(t *testing.T, data []byte) {
	r := &fuzzBytes{b: data}
	bound := time.Duration(1+r.pick(8)) * 500 * time.Millisecond
	u := &upstream{start: slowStart{phase: open}}
	u.bound = bound
	now := testStart
	var queue []*fuzzRequest
	var inFlight []pass
	var busy time.Time // when an attempt was last sent or answered
	var log []string
	ids := 0
	fail := func(format string, args ...any) {
		t.Helper()
		tail := log
		if len(tail) > 30 {
			tail = tail[len(tail)-30:]
		}
		t.Fatalf("bound %v, at +%v: %s\nstate: %s\nlast events:\n\t%s", bound, now.Sub(testStart), fmt.Sprintf(format, args...),
			fuzzState(u, now), strings.Join(tail, "\n\t"))
	}
	schedule := func() *fuzzRequest {
		tn, w, p := u.schedule(now, 0)
		ids++
		q := &fuzzRequest{id: ids, t: tn, w: w, p: p, wake: now} // it rechecks at once, as awaitTurn does
		if w != nil {
			q.due = tn.at
		}
		return q
	}
	// recheck has the i-th queued request look at its turn, as awaitTurn
	// does whenever its wait ends: it goes, or is told how long to wait.
	var recheck func(i int)
	recheck = func(i int) {
		q := queue[i]
		if q.w != nil {
			select {
			case <-q.w.released:
			default:
				if now.Before(q.due) {
					log = append(log, fmt.Sprintf("recheck #%d: still behind the probe", q.id))
					return
				}
			}
			q.t = u.claim(q.w)
			if q.t.at.IsZero() {
				q.t.at = now
			}
			q.w = nil
		}
		busyAt, reading := u.busyAt, u.slotsAt(now) // before a stall moves the pace clock on
		at, quick, again := u.recheck(now, &q.t, 0)
		if !again && at.IsZero() && !u.busyAt.Equal(busyAt) { // it went by the stall rule
			if msg := stallJump(u, queue, i, reading); msg != "" {
				fail("%s", msg)
			}
		}
		if again {
			u.unbook(now, q.t) // as the transport does (see scheduleOnce)
			nq := schedule()
			nq.id = q.id
			*q = *nq
			log = append(log, fmt.Sprintf("recheck #%d: schedule again: turn +%v probe=%v queued=%v", q.id, q.t.at.Sub(now), q.p.probe, q.w != nil))
			if q.w == nil {
				recheck(i) // awaitTurn's first look
			}
			return
		}
		if !at.IsZero() {
			log = append(log, fmt.Sprintf("recheck #%d: wait until +%v (firm=%v)", q.id, at.Sub(now), q.t.firm))
			q.wake, q.quick = at, quick
			return
		}
		q.p.at = now // as admit does: the send's time numbers what its answer proves (see pacer.stepHeld)
		u.dispatch(&q.p)
		busy = now
		inFlight = append(inFlight, q.p)
		queue = append(queue[:i], queue[i+1:]...)
		log = append(log, fmt.Sprintf("recheck #%d: go (attempt %d, probe=%v)", q.id, q.p.sent, q.p.probe))
	}
	for step := 0; r.more() && step < 256; step++ {
		switch op := r.pick(evCount); op {
		case evAdvance:
			d := fuzzAdvance(r.byte(), bound)
			now = now.Add(d)
			log = append(log, fmt.Sprintf("advance %v", d))
		case evSchedule:
			q := schedule()
			queue = append(queue, q)
			log = append(log, fmt.Sprintf("schedule #%d: turn +%v paced=%v firm=%v probe=%v queued=%v", q.id, q.t.at.Sub(now), q.t.paced, q.t.firm, q.p.probe, q.w != nil))
			if q.w == nil {
				recheck(len(queue) - 1) // awaitTurn's first look
			}
		case evRecheck:
			if len(queue) == 0 {
				r.byte()
				continue
			}
			recheck(r.pick(len(queue)))
		case evGiveUp:
			if len(queue) == 0 {
				r.byte()
				continue
			}
			i := r.pick(len(queue))
			q := queue[i]
			if q.w != nil {
				q.t = u.claim(q.w) // the turn the probe's answer gave it, to give back (awaitProbe)
			}
			q.p.abandon(now)
			u.unbook(now, q.t) // as the transport does for a request that gives up
			queue = append(queue[:i], queue[i+1:]...)
			log = append(log, fmt.Sprintf("give up #%d", q.id))
		case evAnswer, evFail:
			if len(inFlight) == 0 {
				r.byte()
				if op == evAnswer {
					fuzzResponse(r, now)
				}
				continue
			}
			j := r.pick(len(inFlight))
			p := inFlight[j]
			inFlight = append(inFlight[:j], inFlight[j+1:]...)
			busy = now
			if op == evFail {
				p.observe(now, RateLimits{}, 0, false, false)
				log = append(log, fmt.Sprintf("attempt %d: transport error", p.sent))
				break
			}
			throttled, h := fuzzResponse(r, now)
			observeFuzz(p, now, throttled, h)
			log = append(log, fmt.Sprintf("attempt %d: %s", p.sent, fuzzDescribe(throttled, h)))
		case evFree:
			throttled, h := fuzzResponse(r, now)
			if !u.free.Load() {
				continue
			}
			observeFuzz(pass{u: u}, now, throttled, h)
			busy = now
			log = append(log, fmt.Sprintf("free attempt: %s", fuzzDescribe(throttled, h)))
		}
		if msg := checkPacerState(u, now); msg != "" {
			fail("%s", msg)
		}
		if msg := checkProgress(u, queue, busy, now); msg != "" {
			fail("%s", msg)
		}
		if msg := checkBooked(u, queue, now); msg != "" {
			fail("%s", msg)
		}
	}
}

// observeFuzz answers an attempt as call.observe does.
func observeFuzz(p pass, now time.Time, throttled bool, h http.Header) {
	limits := ParseRateLimits(h, now)
	var hold time.Duration
	if throttled {
		hold, _ = ParseRetryAfter(h, now)
	}
	p.observe(now, limits, hold, throttled, true)
}

func fuzzDescribe(throttled bool, h http.Header) string {
	status := 200
	if throttled {
		status = 429
	}
	var kv []string
	for k, v := range h {
		kv = append(kv, k+": "+v[0])
	}
	sort.Strings(kv)
	return fmt.Sprintf("%d {%s}", status, strings.Join(kv, "; "))
}

func fuzzState(u *upstream, now time.Time) string {
	slots := 0.0
	if u.interval > 0 {
		slots = u.slotsAt(now)
	}
	rel := func(at time.Time) string {
		if at.IsZero() {
			return "none"
		}
		return "+" + at.Sub(now).String()
	}
	return fmt.Sprintf("phase %v, mode %v, interval %v, rate %g, proven %g, ceiling %g, capacity %g, tat %g slots (now %g), held until %s, reprobe at %s, sent %d, answered %d, coarse %v, firm %v",
		u.start.phase, u.mode, u.interval, u.rate, u.proven, u.ceiling, u.capacity, u.tatV, slots, rel(u.hold.end), rel(u.hold.reprobeAt), u.sent, u.replies, u.coarse, u.firm)
}

// checkPacerState returns what is wrong with the upstream's state at now,
// or "".
func checkPacerState(u *upstream, now time.Time) string {
	bad := func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) || x < 0 }
	for _, v := range []struct {
		name string
		x    float64
	}{{"rate", u.rate}, {"proven", u.proven}, {"ceiling", u.ceiling}, {"capacity", u.capacity},
		{"tat", u.tatV}, {"anchor", u.anchorV}} {
		if bad(v.x) {
			return fmt.Sprintf("%s is %g", v.name, v.x)
		}
	}
	if u.interval < 0 {
		return fmt.Sprintf("negative interval %v", u.interval)
	}
	if u.bound > 0 && u.interval > u.bound {
		return fmt.Sprintf("interval %v beyond the bound %v", u.interval, u.bound)
	}
	if d := u.hold.end.Sub(now); u.bound > 0 && d > u.bound {
		return fmt.Sprintf("held for %v, beyond the bound %v", d, u.bound)
	}
	if d := u.hold.reprobeAt.Sub(now); u.bound > 0 && !u.hold.reprobeAt.IsZero() && d > u.bound {
		return fmt.Sprintf("reprobe in %v, beyond the bound %v", d, u.bound)
	}
	return ""
}

// checkProgress returns what is wrong with the queue's progress at now, or
// "": with requests waiting on the pace and nothing in flight, the first of
// them to wake (by what its last recheck told it, or at once if the pace
// woke it) wakes within the bound and two intervals of the last attempt
// sent or answered (busy), or of the end of a hold. (One interval is
// stalledAt's; the other, a pace that quickened by less than a tenth since
// the request was told, which wakes nobody.) Requests behind slow start's
// probe have their own bound (the ramp's).
func checkProgress(u *upstream, queue []*fuzzRequest, busy, now time.Time) string {
	if len(queue) == 0 || u.sent != u.replies || u.interval <= 0 || busy.IsZero() {
		return ""
	}
	var soon time.Time
	for _, q := range queue {
		if q.w != nil {
			return ""
		}
		at := q.wake
		select {
		case <-q.quick: // nil: never
			at = now
		default:
		}
		if soon.IsZero() || at.Before(soon) {
			soon = at
		}
	}
	limit := later(busy, u.hold.end).Add(u.bound + 2*u.interval)
	if soon.After(later(limit, now).Add(u.interval)) { // an interval past now: told to wait a slot's rounding
		return fmt.Sprintf("nothing in flight since +%v, and the first of %d requests queued on the pace wakes at +%v, past the bound %v and two intervals of %v from then (or from the end of a hold, +%v)",
			busy.Sub(testStart), len(queue), soon.Sub(testStart), u.bound, u.interval, u.hold.end.Sub(testStart))
	}
	return ""
}

// checkBooked returns what is wrong with the pacer's booked set, or "": it
// must hold exactly the slots the queued requests hold on the current pace
// clock, and hold every paced slot still ahead of now (the queue's front is
// read from it: a slot missing is a request the stall rule cannot see).
func checkBooked(u *upstream, queue []*fuzzRequest, now time.Time) string {
	var held []float64
	for _, q := range queue {
		if q.w != nil {
			if tn := q.w.turn; tn.listed && tn.clockID == u.booked.clock {
				held = append(held, tn.v) // given by the probe's answer, not claimed yet
			}
			continue
		}
		if q.t.listed && q.t.clockID == u.booked.clock {
			held = append(held, q.t.v)
		}
		if q.t.paced && !q.t.listed && u.interval > 0 && q.t.clockID == u.clockID && q.t.v > u.slotsAt(now)+1e-9 {
			return fmt.Sprintf("request #%d holds slot %g, ahead of now (%g), but it is not in the booked set", q.id, q.t.v, u.slotsAt(now))
		}
	}
	sort.Float64s(held)
	if fmt.Sprint(held) != fmt.Sprint(u.booked.v) {
		return fmt.Sprintf("the booked set is %v; the queue holds %v", u.booked.v, held)
	}
	return ""
}

// stallJump returns what is wrong when the i-th queued request has just
// gone by the stall rule, alone, on the slot it holds: another request
// holds an earlier slot that was not yet due (reading is the pace clock
// before it went), and had to go first. "" if none does.
func stallJump(u *upstream, queue []*fuzzRequest, i int, reading float64) string {
	q := queue[i]
	if !q.t.paced || q.t.clockID != u.clockID {
		return "" // not on the pace: no place in line
	}
	for _, o := range queue {
		// A slot due by more than a float's rounding is a request the
		// harness has not rechecked yet; in a transport it would have
		// woken and gone by now.
		due := o.t.v < reading-1e-9
		if o != q && o.w == nil && o.t.listed && o.t.clockID == u.clockID && o.t.v < q.t.v && !due {
			return fmt.Sprintf("request #%d (slot %g) went at the stall ahead of #%d (slot %g); the pace clock read %g",
				q.id, q.t.v, o.id, o.t.v, reading)
		}
	}
	return ""
}
