package retryhttp

import (
	"math"
	"time"
)

// The pacer spaces the attempts to one upstream at the rate it allows.
//
// It is a virtual-time token bucket (GCRA) whose rate comes from what the
// server says and what it does. It keeps its own clock, counted in slots
// (one per interval) rather than in time: a request waiting for its turn
// holds a slot number, so when the rate changes every queued request moves
// with it, and a queue booked at a cautious first guess speeds up as soon as
// the rate is known.
//
// Where the rate comes from is the pacer's mode (see paceMode):
//
//   - paceStated ("stated"): the headers state it finely: an IETF policy
//     (q per w), or a token bucket whose reset is a relative duration
//     (OpenAI).
//   - paceMeasured ("measured"): the headers only bound it: a quota whose
//     reset is a whole-second absolute time (Anthropic, GitHub's epoch), or
//     a fixed window, spread over the time it has left. The refill is
//     measured from the drain of the remaining count between readings, and
//     each attempt passes a last check against a model of the bucket
//     (shortfall). A pace that still empties the quota is cut.
//   - paceObserved ("observed"): the server sends no usable rate-limit
//     state, only 429s (or its bucket holds one or two, whose count always
//     reads empty). The rate is the one the server is seen to accept: it
//     starts from the successes of the last second, doubles while no 429
//     comes and requests are waiting (a 429 on that first climb takes it
//     back a step), then rises slowly; a 429 cuts it to what a run of
//     429s measured (see runRate), else by rateBackoff, never below 95%
//     of what was accepted over the last second, as TCP does on loss.
//     Attempts go an interval apart at least (see spacing).
//
// Every method takes the time now, so the whole pacer runs in simulated
// time in tests. It is not safe for concurrent use: the upstream's lock
// guards it.
//
// Bounded trust: the interval between two attempts is never longer than
// the pacer's bound (WithMaxRetryAfter), whatever a server said.
type pacer struct {
	mode paceMode
	// bound is the longest interval the pacer may impose; 0: no bound.
	bound time.Duration

	// The pace clock reads anchorV at anchorAt and advances one slot per
	// interval; interval 0 means not paced.
	interval time.Duration
	capacity float64
	anchorAt time.Time
	anchorV  float64
	tatV     float64       // the theoretical arrival time, in slots
	quicker  broadcast     // fired when the pace quickens
	counted  broadcast     // fired by each answer to a fixed window's attempts (see countedFor)
	quickOf  time.Duration // the interval quicker's first waiter came at (the slowest, for a pace from the headers: see quickerFor)
	// holdEnd is when the upstream's last hold ends (or was to end, if a
	// reading lifted it). A pace that slows before then changes at that
	// time, not now: a turn booked at the end of the hold waited for a
	// time, not for slots, and keeps that time (a slot now would move out
	// with the slower pace by as many intervals as the hold lasted: a 20 ms
	// hold became 1.6 s when the pace went from 3,800 to 49 a second).
	holdEnd time.Time
	clockID uint32      // counts the pace clocks started: a turn's slot is on one of them
	booked  bookedSlots // the slots booked ahead, for where the queue begins (see catchUp)
	// lostSends are the last attempts that got no answer (see lost).
	lostSends [16]uint64
	lostNext  uint64

	rate     float64    // the rate (per second) requests are paced at, before margins
	ceiling  float64    // below the rate that last drew a 429; 0: none yet
	proven   float64    // the highest lower bound on the rate readings gave since the last 429
	sent     uint64     // attempts sent so far; orders responses against sends
	synced   uint64     // the newest attempt whose answer's count set the pace clock (see syncRemaining); forgotten with the clock
	rejected uint64     // 429s seen so far: sends the server did not count
	mark     reading    // where the current drain measurement starts
	use      quotaUse   // how much of a coarse quota the pace leaves unused
	flat     bool       // a coarse quota drained with no refill (see spotLump)
	lumpy    bool       // a coarse quota refills in lumps: a fixed window
	flatFrom reading    // the first of the latest readings in a row that showed no refill (see spotLump)
	edge     windowEdge // where such a window ends, by its answers
	// answerSentAt is when the attempt the reading learn is given answers
	// was sent (zero: unknown): the server counted it no sooner.
	answerSentAt time.Time
	// cleared counts attempts windowShortfall let go that are not sent
	// yet (see sentOne); clearedAt is when it last let one go.
	cleared   int
	clearedAt time.Time
	// dryPollFrom is when shortfall began to hold a quota found empty to
	// one probe at a time, waiting for an answer (see dryPollTooLong).
	dryPollFrom time.Time
	dry         int           // refusals in a row that found it empty (see countDry)
	dryAt       time.Time     // the last of them
	dryFrom     time.Time     // the first of them
	dryFor      time.Duration // the longest it was seen to stay dry
	refused     bool          // the last answer was a 429
	// earlyResets is set once a whole-second reset is seen to come before
	// the bucket is full, or a measured pace draws a 429: the server cuts
	// its resets down (or to the nearest second), so they may be early.
	earlyResets bool
	// lateResets is set once a whole-second quota reads full more than
	// lateBy before the reset a reading before it stated (see
	// spotLateResets): its resets run on a clock ahead of the Date's (a
	// proxy's Date in front of a server whose clock is ahead, or no
	// Date), and bound no rate from above.
	lateResets bool
	latest     reading // the reading that covers the most attempts sent
	limit      int64   // the quota's size, as the latest reading gave it
	coarse     bool    // the quota is a coarse bucket (see coarseBucket)
	firm       bool    // the pace is what the server stated (see turn.firm)
	measured   bool    // a drain measurement has stated the rate

	accepts  acceptCounter // successes, for the observed mode
	grewAt   time.Time     // when the observed rate last rose
	lastNoes time.Time     // when the last 429 came
	cutSent  uint64        // the attempts sent when the rate was last cut
	since    time.Time     // when the observed mode began
	cuts     int           // cuts in the observed mode's first second
	served   uint64        // successes answered so far (see streak)
	streak   refusals      // the first 429 of the latest run of them
	runEst   float64       // the rate the latest run measured; 0: none
	inRun    bool          // the latest 429 extends a run (see runRate)
	wentAt   time.Time     // when the observed pace last let an attempt go (see spacing)
	since0   float64       // the rate the observed mode began at
	climb    climbSteps    // the first climb's steps, by the attempts sent on them
	// lifted is set when the ceiling was lifted since the last cut;
	// liftEvery is how long a ceiling waits before each lift (ceilingLift
	// at first, doubled by each 429 that follows a lift: see liftCeiling).
	lifted    bool
	liftEvery time.Duration
	// okSent and okAt are the latest-sent attempt served so far and when
	// it was sent (see servedSent); unitCap is the most the observed rate
	// may be, by the waits 429s named in milliseconds (see fineBound and
	// capUnits), for as long as the observed mode lasts, 0: none; unitOK
	// is the okSent its bounds were measured from.
	okSent  uint64
	okAt    time.Time
	unitCap float64
	unitOK  uint64
}

// refusals marks the first 429 of a run of them: when it came and the
// successes answered by then. Each 429 finds the server's bucket empty, so
// the successes between two of them, a run's first and its latest, are
// what it refilled in between (within one unit): the rate it accepts.
type refusals struct {
	at     time.Time
	served uint64
	rate   float64 // the pace's rate after the first 429 was taken in
}

// paceMode is where the pacer's rate comes from.
type paceMode int

const (
	// paceOff: requests are not paced.
	paceOff paceMode = iota
	// paceStated: the headers state the rate.
	paceStated
	// paceMeasured: the headers bound the rate; the drain measures it.
	paceMeasured
	// paceObserved: 429s and successes give the rate.
	paceObserved
)

func (m paceMode) String() string {
	switch m {
	case paceOff:
		return "off"
	case paceStated:
		return "stated"
	case paceMeasured:
		return "measured"
	case paceObserved:
		return "observed"
	}
	return "unknown"
}

const (
	// paceMargin is the share of a stated rate used, so that timing noise
	// between here and the server does not turn into 429s.
	paceMargin = 0.95
	// headroom is how many units of the server's remaining quota are left
	// unused, so a response never reports exactly zero while paced.
	headroom = 1
	// rateCreep is how much the learned rate may rise per reading that does
	// not contradict it; rateRecover, when more than half the quota remains.
	rateCreep   = 1.02
	rateRecover = 1.1
	// rateBackoff is what a 429 leaves of the rate.
	rateBackoff = 0.7
	// drainSpan and drainCount are the least time and admissions a drain
	// measurement spans (see measure); drainSpanMax the most, so the
	// measure follows a rate that changes.
	drainSpan    = 100 * time.Millisecond
	drainCount   = 4
	drainSpanMax = time.Second
	// growEvery is how often the observed rate may rise; below the
	// ceiling a 429 left it doubles, above it it creeps by growCreep.
	growEvery = 100 * time.Millisecond
	// growAfterCut is the rise per growEvery after a cut, before a
	// second of observation has set a ceiling.
	growAfterCut = 1.25
	growCreep    = 1.002
	// observedFor is how long the observed mode outlives the last 429 (or
	// its start):
	// a server that has stopped refusing is not paced by old refusals.
	observedFor = 30 * time.Second
	// maxCeilingLift is the longest a ceiling waits between lifts (see
	// liftCeiling).
	maxCeilingLift = 32 * time.Second
	// ceilingLift is how long a stated or measured pace waits on the
	// ceiling a 429 left, with no 429 since, before it lifts it (see
	// liftCeiling).
	ceilingLift = time.Second
	// lumpSpread is the time over which a fixed window's pace spreads
	// its whole quota; lumpMinLimit the least quota told apart as a
	// window (a smaller one is paced as a bucket, whatever it is).
	lumpSpread   = 10 * time.Millisecond
	lumpMinLimit = 8
	// unusedSpan is the span over which useMore looks for quota left
	// unused.
	unusedSpan = time.Second
	// runMin, runCount and runMax bound the runs of 429s that measure
	// the rate (see runRate): at least runMin and runCount successes
	// long, at most runMax; runGap is the longest hold within one.
	// runShare is the share of the measured rate paced at.
	runMin   = 100 * time.Millisecond
	runCount = 4
	runMax   = 2 * time.Second
	runGap   = 250 * time.Millisecond
	runShare = 0.95
	// runBackoff is what a 429 within a run too short to measure leaves
	// of the observed rate.
	runBackoff = 0.85
	// maxCapacity is the largest burst the pace clock keeps (setCapacity).
	maxCapacity = 1 << 20
)

// String names the mode, for logs and Stats.
func (p *pacer) String() string { return p.mode.String() }

// paced reports whether attempts are spaced.
func (p *pacer) paced() bool { return p.interval > 0 }

// slotsAt reads the pace clock at t.
func (p *pacer) slotsAt(t time.Time) float64 {
	return p.anchorV + float64(t.Sub(p.anchorAt))/float64(p.interval)
}

// timeOf is when the pace clock reads v, at the current pace.
func (p *pacer) timeOf(v float64) time.Time {
	// Rounded up to the nanosecond, less float noise: a slot that falls on
	// now is now, not a nanosecond later.
	return p.anchorAt.Add(time.Duration(math.Ceil((v-p.anchorV)*float64(p.interval) - 1e-3)))
}

// binding reports whether requests are waiting on the pace at now.
func (p *pacer) binding(now time.Time) bool {
	return p.interval > 0 && p.tatV > p.slotsAt(now)
}

// book books the next paced slot at or after start and returns its turn;
// not paced, start itself.
func (p *pacer) book(start time.Time) turn {
	if p.interval <= 0 {
		return turn{at: start, firm: true}
	}
	v, moved := p.gcra(p.slotsAt(start))
	if moved {
		start = p.timeOf(v)
	}
	p.booked.add(p.clockID, v)
	return turn{at: start, v: v, paced: true, firm: p.firm, clockID: p.clockID, listed: true}
}

// nextSlot is when a turn booked at start would come, without booking it:
// start itself when the pace lets it go then, or when there is no pace.
func (p *pacer) nextSlot(start time.Time) time.Time {
	if p.interval <= 0 {
		return start
	}
	if earliest := p.earliestSlot(); earliest > p.slotsAt(start) {
		return p.timeOf(earliest)
	}
	return start
}

// earliestSlot is the first slot a new turn may take: the bucket's
// capacity behind the theoretical arrival time.
func (p *pacer) earliestSlot() float64 { return p.tatV - (p.capacity - 1) }

// gcra books the next paced slot at or after slot v; moved reports that it
// is later than v.
func (p *pacer) gcra(v float64) (slot float64, moved bool) {
	if earliest := p.earliestSlot(); earliest > v {
		v, moved = earliest, true
	}
	p.tatV = max(p.tatV, v) + 1
	return v, moved
}

// unlist drops t's slot from the booked set: it goes, books again or gives
// up.
func (p *pacer) unlist(t *turn) {
	if t.listed {
		p.booked.remove(t.clockID, t.v)
		t.listed = false
	}
}

// first reports whether t, a paced turn, holds the first slot of the queue:
// no other waiting request's turn comes before it. A slot already due
// counts: its request waits on something else (a hold, the model's
// shortfall), and a later slot going ahead of it at a stall would jump the
// queue (a float's rounding was enough to put a due slot a hair below now).
func (p *pacer) first(t turn) bool {
	front, ok := p.booked.front(p.clockID)
	return !ok || t.v <= front
}

// catchUp moves the pace clock on, at now, so that v, the first slot in
// line (see first), comes an interval from now, if it lies further out.
// The upstream calls it when its queue waits with nothing in flight and
// nothing sent for the bound (see upstream.stalledAt): what a server said
// (a count read while attempts were out, a reading older than others)
// booked the queue behind slots nobody holds, and the answer to the
// attempt that goes now, alone, decides. Every booked slot moves by the
// same number of slots, so the queue keeps its order and spacing and a new
// request still books behind it (pulling back only the clock's end, not the
// queue, let new requests take the queue's slots: 148 of 800 requests drew
// a 429 from a stated bucket whose queue was longer than the bound). The
// waiters are woken to read their new times.
func (p *pacer) catchUp(now time.Time, v float64) {
	if p.interval <= 0 {
		return
	}
	if gap := v - 1 - p.slotsAt(now); gap > 0 {
		p.anchorV += gap
		p.quicker.fire()
	}
	p.wentAt = now // the next goes an interval after it (see spacing)
}

// quickerFor returns the channel closed when the pace quickens, for a
// request waiting on a paced turn; nil for any other.
func (p *pacer) quickerFor(t turn) <-chan struct{} {
	if !t.paced {
		return nil
	}
	if !p.quicker.waiting() || p.mode != paceObserved && p.interval > p.quickOf {
		// A pace from the headers counts from the slowest pace any
		// waiter timed its wait by: a pace that slowed since the first
		// came (a waiter that slept out its old time and came back)
		// must not hide a quickening from it. With the first's (fast)
		// pace kept, a coarse quota's pace that went from 99 to 33 a
		// second and back to 103 woke nobody, and the queue went on at
		// 33 a second for half a window; a bucket of one stated to the
		// millisecond, cut by a 429 and lifted back, sent nothing for
		// a second while its queue slept through the lift. (The
		// observed mode keeps the first's: woken on each of its climb's
		// steps, a header-less 40 a second with 20 ms answers ended
		// 1.3-1.5x the ideal about once in a hundred runs, over its
		// 1.3x.)
		p.quickOf = p.interval
	}
	return p.quicker.wait()
}

// setPace sets the pace to one slot per interval from now on (0: off),
// within the bound. Booked slots keep their numbers, so they move with the
// pace; requests waiting on them are told when it quickens by a tenth or
// more.
func (p *pacer) setPace(now time.Time, interval time.Duration) {
	if p.bound > 0 && interval > p.bound {
		interval = p.bound
	}
	if interval == p.interval {
		return
	}
	at := now
	switch {
	case interval <= 0:
		p.anchorV, p.tatV, p.synced = 0, 0, 0 // synced: its count set a clock no longer kept
	case p.interval > 0:
		if interval > p.interval && p.holdEnd.After(now) {
			at = p.holdEnd // slower from the hold's end (see holdEnd)
		}
		p.anchorV = p.slotsAt(at)
	default:
		p.newClock(at)
		// What was sent before the pace began (slow start's burst) says
		// nothing of the pace: its answers do not cut it (see cut). A cut
		// from them would hold a first guess down for good.
		p.cutSent = max(p.cutSent, p.sent)
	}
	p.anchorAt, p.interval = at, interval
	if interval <= 0 || interval*10 <= p.quickOf*9 {
		p.quicker.fire()
	}
}

// newQueue starts a new pace clock at now, at the same pace, with nothing
// booked on it: the turns booked on the old one are void (the upstream went
// cold for a new probe, see upstream.reprobeIfDue), and their requests book
// again after the probe. Kept, the old clock's end would book them behind
// the slots they had held, which nobody holds now: with a bound of a
// second, 19 requests paced at 2 a second were booked 10 s out, and the
// queue waited for the stall rule.
func (p *pacer) newQueue(now time.Time) {
	if p.interval <= 0 {
		return
	}
	p.newClock(now)
	p.tatV = 1 // the probe goes first, on the new clock's first slot (later: see probeSent); the queue books behind it
}

// probeSent books the slot a probe took, sent at at: a probe goes at its
// own time, not on the pace, and may go later than the reprobe that
// started the clock (it waited out a shorter hold taken meanwhile, a
// client-side limit, or a concurrency slot: see pass.leftAt). The queue
// behind it books an interval after it, not after the reprobe: a bucket
// of one refuses the pair.
func (p *pacer) probeSent(at time.Time) {
	if p.interval > 0 && !at.IsZero() {
		p.tatV = max(p.tatV, p.slotsAt(at)+1)
	}
}

// newClock starts a new pace clock at now with nothing booked on it: slots
// booked on an old one mean nothing on it.
func (p *pacer) newClock(now time.Time) {
	p.anchorAt, p.anchorV, p.tatV, p.synced = now, 0, 0, 0 // synced: its count set a clock no longer kept
	p.clockID++
}

// shortfall is how long until a coarse bucket surely holds a unit beyond
// the headroom for one more attempt, by the latest reading, the attempts
// sent since (less those the server refused) and the refill rate proven so
// far; 0 when it does now. It is the last check before a paced attempt
// goes: a pace that probes above the true rate drains the headroom, never
// the bucket. inFlight is how many attempts are out: with none, the
// shortfall is at most one unit at the proven rate, so a model that is
// wrong cannot keep the upstream idle (the answer corrects it).
func (p *pacer) shortfall(now time.Time, inFlight uint64) time.Duration {
	if p.mode == paceObserved || !p.coarse && p.capacity <= 1 {
		// No count to check against, or none finer than the pace: a
		// quota of one or two not read in whole seconds (OpenAI's
		// bucket of one, an IETF policy of q=1) holds nothing for a
		// pair, and each reading's hold comes only with its answer.
		return p.spacing(now)
	}
	l := p.latest
	if p.lumpy {
		return p.windowShortfall(now, inFlight)
	}
	if !p.coarse || p.proven <= 0 || l.at.IsZero() {
		return 0
	}
	refilled := p.proven * now.Sub(l.at).Seconds()
	if now.Sub(p.clearedAt) > lumpSpread {
		p.cleared = 0 // cleared, then given up before it was sent
	}
	if p.dry > 0 && inFlight+uint64(p.cleared) > 0 && !p.dryPollTooLong(now) {
		// Found empty by a refusal, it did not refill as the proven
		// rate said: what it holds is unknown until an answer comes,
		// so one probe goes at a time (with 20 ms answers, a rate
		// proven too high by a window's first quota let three go
		// before the first was refused, all refused).
		return probePoll
	}
	p.dryPollFrom = time.Time{}
	spent := max(float64(p.sent-l.sent)-float64(p.rejected-l.rejected), 0) + float64(p.cleared)
	have := min(float64(l.remaining)+refilled, float64(p.limit)) - spent
	short := float64(headroom+1) - have
	if short <= 0 {
		// Counted at once: a request checking between this one's check
		// and its send must not spend the same unit (two went at once,
		// and a 429's whole-second Retry-After held the upstream for up
		// to a second).
		p.clearOne(now)
		return 0
	}
	if inFlight == 0 {
		short = min(short, 1)
	}
	// Rounded up: a shortfall under a nanosecond is still one. A request
	// woken when the model said the unit would be in finds it short by
	// float noise (2 - 1e-12 units); truncated to 0, that let it go
	// uncounted (see cleared), and so every other request woken at the
	// same instant: several went at once, one drew a 429 and waited out its
	// whole-second Retry-After.
	d := math.Ceil(short / p.proven * float64(time.Second))
	if p.bound > 0 {
		d = min(d, float64(p.bound))
	}
	return time.Duration(min(d, float64(maxShortfall))) // converted, a larger float overflows
}

// maxShortfall caps a shortfall with no bound to bring it down (a bound of
// 0), so that the conversion to a Duration cannot overflow.
const maxShortfall = 24 * time.Hour

// dryPollTooLong reports whether the wait for an answer to the one probe
// of a quota found empty has lasted the bound: an attempt counted as out
// that never went, or an answer never told, would otherwise keep the
// upstream polling with nothing in flight for good (bounded trust).
func (p *pacer) dryPollTooLong(now time.Time) bool {
	if p.dryPollFrom.IsZero() {
		p.dryPollFrom = now
	}
	return now.Sub(p.dryPollFrom) >= max(p.bound, time.Second)
}

// spacing is shortfall in the observed mode, and for a quota of one or two
// not read in whole seconds: an attempt goes no sooner than an interval
// after the last one the pace let go. The pace clock lets a request whose
// slot has passed go at once (its waiter woke late, was held past it, or
// the pace quickened under it), and the next on its own slot just after: a
// server that refuses above its rate, a bucket of one first, refuses the
// pair's second. In the observed mode nothing but 429s tells the rate, so
// none is spent on that; a bucket of one refuses any pair.
func (p *pacer) spacing(now time.Time) time.Duration {
	if next := p.wentAt.Add(p.interval); p.interval > 0 && next.After(now) {
		return next.Sub(now)
	}
	p.wentAt = now
	return 0
}

// windowShortfall is shortfall for a fixed window: nothing comes back
// before its end, so once the attempts sent since the latest reading have
// used what it said remained, the next waits for the window's end (within
// the bound). Requests booked before the count ran out meet this check too.
// inFlight is how many attempts are out. The end is the one learned from the answers (see windowEdge) once there
// is one, else the stated reset. While the learned end is known only
// roughly, one probe goes at the middle of where it may be, the others wait
// for its answer. Past the end the window is counted full again, less what
// went since the reading; when that too is used, the next waits a
// lumpSpread for the new window's first answers, which bring its count and
// its end.
func (p *pacer) windowShortfall(now time.Time, inFlight uint64) time.Duration {
	l := p.latest
	if now.Sub(p.clearedAt) > lumpSpread {
		p.cleared = 0 // cleared, then given up before it was sent
	}
	// Attempts sent at once reach the server in any order: one answered
	// before others sent ahead of it does not cover them, so every
	// attempt still out counts as spent.
	since := max(float64(p.sent-l.sent)-float64(p.rejected-l.rejected), 0)
	spent := max(since, float64(inFlight)) + float64(p.cleared)
	end := l.reset
	at, fine, learned := p.edge.next(p.statedEnd())
	if learned {
		end = at
	}
	have := float64(l.remaining) - spent
	switch {
	case have > 0:
	case end.After(now) && float64(l.remaining)-since-float64(p.cleared) > 0:
		// Only attempts out, some perhaps counted already, hold it
		// back: their answers tell soon.
		return min(end.Sub(now), probePoll)
	case end.After(now):
		if p.bound > 0 {
			return min(end.Sub(now), p.bound)
		}
		return end.Sub(now)
	case learned && !fine:
		// Past the middle of where the window may end: one probe
		// tells which side it is on.
		if p.edge.probing(now) {
			return probePoll
		}
		p.edge.probeAt = now
	default:
		if have = float64(p.limit) - spent; have <= 0 {
			return lumpSpread
		}
	}
	p.clearOne(now)
	return 0
}

// countedFor returns the channel closed at the next answer to a fixed
// window's attempts, for a request that found the window used up while
// inFlight attempts were out; nil otherwise, since then only the window's
// end frees a unit. Attempts sent at once reach the server in any order, so
// a reading can count an attempt sent after the one it answers, which is
// then counted twice: the window's last unit looks spent while it is not,
// and the answers on their way tell. (Asleep to the window's end, a request
// left that unit unused, and a burst ended a whole window late.)
func (p *pacer) countedFor(inFlight uint64) <-chan struct{} {
	if !p.lumpy || inFlight == 0 {
		return nil
	}
	return p.counted.wait()
}

// clearOne counts an attempt let go at now that is not sent yet, so that
// others checking before it is sent do not spend the same unit (see
// cleared; sentOne takes it back).
func (p *pacer) clearOne(now time.Time) {
	p.cleared++
	p.clearedAt = now
}

// statedEnd is the current window's end as the latest reading stated it,
// if it had not passed when read; else zero.
func (p *pacer) statedEnd() time.Time {
	if l := p.latest; l.reset.After(l.at) {
		return l.reset
	}
	return time.Time{}
}

// sentOne counts an attempt sent, one that windowShortfall let go among
// them.
func (p *pacer) sentOne() {
	p.sent++
	if p.cleared > 0 {
		p.cleared--
	}
}

// paceOf is the interval between paced slots for a rate: a stated rate is
// kept paceMargin under; a measured or observed one is used as it is (the
// shortfall check and the 429s guard it).
//
// A rate too high to space anything (a million a second and more) is
// paced at a microsecond: the pace clock never divides by zero.
func (p *pacer) paceOf(rate float64) time.Duration {
	if !(rate > 0) { // NaN too
		return 0
	}
	if !p.coarse && p.mode != paceObserved {
		rate *= paceMargin
	}
	return max(time.Duration(float64(time.Second)/rate), time.Microsecond)
}

// answered counts one attempt's answer: a success (served, not refused)
// feeds the observed rate.
func (p *pacer) answered(now time.Time, throttled bool) {
	p.refused = throttled
	p.dryPollFrom = time.Time{}
	if throttled {
		p.rejected++
		p.lastNoes = now
		return
	}
	p.accepts.add(now)
	p.served++
	if p.mode == paceObserved && now.Sub(later(p.lastNoes, p.since)) > observedFor {
		p.forget(now) // the server stopped refusing long ago
		return
	}
	p.grow(now)
}

// servedSent records that the attempt sent as the sent-th, at at, was
// served: the latest such is where the server's bucket was last seen to
// take a unit (see fineBound).
func (p *pacer) servedSent(sent uint64, at time.Time) {
	if sent > p.okSent && !at.IsZero() {
		p.okSent, p.okAt = sent, at
	}
}

// fineBound is the most the server's rate can be by a 429 to the attempt
// sent as the sent-th, at at, that named hint, in milliseconds, as the time
// to its next unit. The wait alone bounds it to a unit per hint. With the
// latest served attempt sent before it, the bound is tighter: the server
// took a unit for that one, at most the attempts sent between took one each,
// and the next unit comes hint after this one reached it; a bucket holds at
// most one interval's worth of refill past its last unit taken when it is
// empty, so those units span (at - okAt) + hint, at least. (One-way times
// cancel out when both legs of the two attempts are alike.) A bucket of one
// at 5 a second, its probe served and the next attempt refused 20 ms later
// with retry-after-ms 180: at most 5 a second, where the wait alone says
// 5.6, and a pace a margin under 5.6 probed above the rate at every other
// attempt.
func (p *pacer) fineBound(hint time.Duration, sent uint64, at time.Time) float64 {
	bound := 1 / hint.Seconds()
	if sent == 0 || at.IsZero() || p.okAt.IsZero() || sent <= p.okSent || at.Before(p.okAt) {
		return bound
	}
	if between := min(sent-p.okSent, 1000); at.Sub(p.okAt) > time.Duration(between)*hint {
		// Only a refusal close behind the success, or behind attempts
		// that kept the bucket drained since, bounds the rate: over a
		// longer span it may have refilled beyond what they took (a
		// slow answer, an idle spell), and units it held then would
		// make the bound far too low, for good.
		return bound
	}
	span := at.Sub(p.okAt) + hint
	return min(bound, float64(sent-p.okSent)/span.Seconds())
}

// capUnits takes in a 429's bound on the rate, less the margin (see
// fineBound). Bounds measured from the same success keep the lowest: the
// refusals answered at once, the one sent right after the success bounds
// it closest (the others share the span with the attempts sent between),
// and they may be taken in in any order. One measured from a later success
// replaces them: a bound is only as exact as the two attempts' one-way
// times are alike, and the lowest of all would keep the one jitter made
// too low.
func (p *pacer) capUnits(c float64) {
	if p.unitCap > 0 && p.unitOK == p.okSent {
		c = min(c, p.unitCap)
	}
	p.unitCap, p.unitOK = c, p.okSent
}

// capRate keeps the observed rate, and the ceiling, at or under unitCap.
func (p *pacer) capRate() {
	if p.unitCap <= 0 || p.mode != paceObserved {
		return
	}
	p.rate = min(p.rate, p.unitCap)
	if p.ceiling > 0 {
		p.ceiling = min(p.ceiling, p.unitCap)
	}
}

// grow raises the observed rate while requests wait on it and no 429 has
// come for a growEvery: it doubles up to the ceiling the last 429 left (or
// without one, before the first cut, once each step has held: see
// stepHeld), then creeps by growCreep, so the pace finds more capacity
// when the server has it.
func (p *pacer) grow(now time.Time) {
	if p.mode != paceObserved || !p.binding(now) || now.Sub(p.grewAt) < growEvery || now.Sub(p.lastNoes) < growEvery {
		return
	}
	firstClimb := p.ceiling == 0 && p.cuts == 0
	if firstClimb && !p.stepHeld(now) {
		return
	}
	p.grewAt = now
	was := p.rate
	switch {
	case firstClimb:
		p.rate *= 2
	case p.ceiling == 0:
		p.rate *= growAfterCut
	case p.rate < p.ceiling:
		p.rate = min(p.rate*2, p.ceiling)
	default:
		p.rate *= growCreep
	}
	p.capRate()
	if firstClimb && p.rate > was {
		p.climb.add(p.sent, p.rate) // as capped, and only a step up (rateOf halves the oldest)
	}
	p.setPace(now, p.paceOf(p.rate))
}

// stepHeld reports whether the first climb's current step has held at
// now, so the climb may double: an attempt sent on it was served. A step
// that merely lasted a growEvery may not have been tried: doubled untried
// (its first attempt went an interval of the step before after the last),
// a bucket of one at 5 a second saw the climb at 16 when the 429 for 8
// came, and two more 429s before the cuts took the pace under 5. A step
// whose next attempt is more than a growEvery away cannot be tried in
// time, nor one on a pace that has sent nothing yet: it holds by time, as
// before, so a pace too slow to send anything (one a poisoned reading
// left) still climbs back.
func (p *pacer) stepHeld(now time.Time) bool {
	from := p.climb.newest()
	switch {
	case p.okSent > from:
		return true // tried and served
	case p.sent > from:
		return false // tried: its answer tells
	}
	return p.wentAt.IsZero() || p.wentAt.Add(p.interval).Sub(now) > growEvery
}

// lost records an attempt that got no answer (a transport error): the
// server may never have counted it, so readings do not wait for it.
func (p *pacer) lost(sent uint64) {
	p.lostSends[p.lostNext%uint64(len(p.lostSends))] = sent
	p.lostNext++
}

// lostAfter is how many of the attempts sent after sent got no answer, as
// far as the last few the pacer remembers tell.
func (p *pacer) lostAfter(sent uint64) int {
	n := 0
	for _, s := range p.lostSends {
		if s > sent && s <= p.sent {
			n++
		}
	}
	return n
}

// forget drops the pace: nothing learned is kept.
func (p *pacer) forget(now time.Time) {
	keep := pacer{sent: p.sent, rejected: p.rejected, accepts: p.accepts, bound: p.bound, clockID: p.clockID,
		lostSends: p.lostSends, lostNext: p.lostNext, holdEnd: p.holdEnd}
	p.quicker.fire()
	p.counted.fire()
	*p = keep
}

// throttled reacts to a 429 answering attempt sent, sent at at (zero if
// not numbered). stated reports that the response carried rate-limit state
// (learn has it); hint is the wait the server named, 0 if none; fine, that
// it named it in milliseconds. A pacer that was off starts observing at the
// rate accepted over the last second (or the one a sub-second hint
// implies); one that was on is cut.
//
// A wait named in milliseconds bounds the server's rate (see fineBound):
// the observed rate never goes past a margin under it (unitCap, see
// capUnits), neither by the first climb nor by the creep above the
// ceiling. At the bound, a pace creeping by growCreep drew a 429 every few
// seconds from a bucket of one.
func (p *pacer) throttled(now time.Time, stated bool, hint time.Duration, fine bool, sent uint64, at time.Time) {
	p.runEst, p.inRun = p.runRate(now)
	defer func() {
		if p.streak.at.Equal(now) {
			p.streak.rate = p.rate
		}
	}()
	fineCap := 0.0
	if fine && hint > 0 && hint < time.Second {
		fineCap = paceMargin * p.fineBound(hint, sent, at)
	}
	if p.rate > 0 {
		if fineCap > 0 && p.mode == paceObserved {
			p.capUnits(fineCap)
		}
		p.cut(now, sent)
		if p.mode == paceObserved && p.unitCap > 0 && p.rate > p.unitCap {
			p.capRate()
			p.setPace(now, p.paceOf(p.rate))
		}
		return
	}
	if stated {
		return // learn sets the pace from the reading
	}
	p.observe(now)
	if hint > 0 && hint < time.Second {
		// The time to the next unit: the bucket holds less than one,
		// so it refills slower than a unit per hint. Paced a margin
		// under that bound; named to the millisecond, it is the
		// ceiling too (a climb past it doubles into a 429 for sure),
		// and with the latest success it bounds the rate closer
		// (fineBound). A Retry-After in whole seconds, or a date, may
		// name less than a second that is no unit's time at all: no
		// ceiling.
		p.rate = max(p.rate, paceMargin/hint.Seconds())
		if fineCap > 0 {
			p.capUnits(fineCap)
			p.rate = min(p.rate, p.unitCap)
			p.ceiling = p.rate
		}
		p.since0 = p.rate
		p.setPace(now, p.paceOf(p.rate))
	}
	// The server's bucket is empty now: the pace's first slot is a unit
	// away, not now (with no hold, a Retry-After absent or already past,
	// a slot now is a 429 for sure).
	p.tatV = max(p.tatV, p.slotsAt(now)+1)
}

// observe starts the observed mode: at the pace's rate, or without one at
// the rate the server accepted over the last second (at least one a
// second, and just over one a bound); already observing, it does nothing.
func (p *pacer) observe(now time.Time) {
	if p.mode == paceObserved {
		return
	}
	p.cutSent = p.sent
	p.mode, p.grewAt, p.since = paceObserved, now, now
	p.climb = climbSteps{base: p.sent}
	if p.rate == 0 { // from a pace, its rate is where observing starts
		p.rate = max(p.accepts.perSecond(now), 1)
		if p.bound > 0 {
			// A pace of one a bound is taken for a poisoned one
			// (upstream.poisoned): forgotten, held and probed
			// again, for good. With a bound of a second, a bucket
			// of one at 5 a second went one a second.
			p.rate = max(p.rate, 1.1/p.bound.Seconds())
		}
	}
	p.since0 = p.rate
	p.setPace(now, p.paceOf(p.rate))
	p.setCapacity(now, 1)
}

// setCapacity sets how many slots may go at once. A smaller bucket than
// before: what the old one allowed in a burst is no debt of the new one's.
//
// It is capped at maxCapacity: a burst of more than a million is no limit
// worth keeping, and slot arithmetic on a count near 2^63 loses whole
// slots to rounding.
func (p *pacer) setCapacity(now time.Time, capacity float64) {
	capacity = min(capacity, maxCapacity)
	if capacity < p.capacity && p.interval > 0 {
		p.tatV = min(p.tatV, p.slotsAt(now)+capacity)
	}
	p.capacity = capacity
}

// cut lowers the rate after the server refused an attempt (sent), or said
// nothing remains while it was paced: by rateBackoff, not below 95% of
// what it accepted over the last second, and what readings seemed to prove
// with it. The rate is cut once per round trip, as TCP does once per
// window: an answer to an attempt sent before the last cut is old news.
func (p *pacer) cut(now time.Time, sent uint64) {
	if sent > 0 && sent <= p.cutSent {
		return
	}
	if sent == 0 && p.mode == paceObserved {
		// An answer to an attempt sent while the upstream was free
		// (unnumbered): before the observed pace, so it says nothing
		// of it. Counted as cuts, slow start's herd would slow the
		// first climb to the rate.
		return
	}
	p.cutSent = p.sent
	if p.lifted {
		// The lift drew this 429: the server takes less than it
		// states, or than the pace proved. The next lifts wait longer.
		p.liftEvery = min(2*p.liftWait(), maxCeilingLift)
	}
	p.lifted = false
	if p.mode == paceMeasured {
		p.earlyResets = true // the bounds were too hopeful
	}
	accepted := p.accepts.perSecond(now)
	switch {
	case p.mode == paceObserved && p.runEst > 0:
		// The run of 429s measured the rate: pace just under it.
		p.rate = max(p.rate*rateBackoff, runShare*p.runEst)
		p.ceiling = p.rate
		p.proven = min(p.proven, p.rate)
		p.grewAt = now
		p.setPace(now, p.paceOf(p.rate))
		return
	case p.mode == paceObserved && p.ceiling == 0 && p.cuts == 0 && p.rate >= 2*p.since0:
		// The first climb, doubling since the observed mode began,
		// overshot: the step before the one the refused attempt was
		// sent on held for a growEvery without a 429, so it is where
		// the pace goes back to. A cut by rateBackoff alone leaves it
		// above the server's rate, for another 429 or two (a bucket
		// of one refuses at once). Not the step before the current
		// one: the climb may have doubled again while the refused
		// attempt was out, and half the current rate is then the
		// rate that drew the 429 (a bucket of one at 5 a second, sent
		// 8 and the climb at 16 when the 429 came: back to 8, and two
		// more 429s before the pace was under 5). Never below where
		// the climb began (the rate is at least twice that here).
		p.rate = max(min(p.rate, p.climb.rateOf(sent, p.since0))/2, p.since0)
		p.ceiling = p.rate
		p.proven = min(p.proven, p.rate)
		p.grewAt = now
		p.setPace(now, p.paceOf(p.rate))
		return
	case p.mode == paceObserved && now.Sub(p.since) < time.Second:
		// Too soon to tell the server's rate from its successes (a
		// refusal now may be the drained burst's): the rate rises
		// more gently from here (see grow).
		p.cuts++
	case p.mode == paceObserved:
		// Sent above what the server takes for a second, the successes
		// of that second are its rate: come back up to them. A 429
		// soon after a cut, too soon to measure the rate, comes from
		// a rate cut once already: it is cut by less.
		backoff := rateBackoff
		if p.inRun {
			backoff = runBackoff
		}
		p.ceiling = max(accepted, p.rate*backoff)
		p.rate = max(p.rate*backoff, 0.95*accepted)
		p.proven = min(p.proven, p.rate)
		p.grewAt = now
		p.setPace(now, p.paceOf(p.rate))
		return
	default:
		p.ceiling = p.rate * 0.9
	}
	p.rate = max(p.rate*rateBackoff, 0.95*accepted)
	p.proven = min(p.proven, p.rate)
	p.grewAt = now
	p.setPace(now, p.paceOf(p.rate))
}

// unitAfter is how long the next unit of quota surely takes: at the
// proven rate, or in the observed mode at the rate the server accepts; 0
// when the pacer knows none.
func (p *pacer) unitAfter() time.Duration {
	if p.lumpy {
		return 0 // a window's units come back at its end, all at once
	}
	r := p.proven
	if p.mode == paceObserved {
		r = p.rate
	}
	if r <= 0 {
		return 0
	}
	unit := float64(time.Second) / r
	if p.dry > 0 {
		unit *= float64(uint64(1) << min(p.dry, 10))
	}
	return time.Duration(unit)
}

// learn updates the pace from a response's rate-limit state. sent is the
// attempt the response answers.
func (p *pacer) learn(now time.Time, l RateLimits, sent uint64) {
	if p.mode == paceObserved {
		// The headers were found wanting; the refusals pace. What they
		// say remains still keeps the bucket from being overrun.
		p.syncRemaining(now, l.Requests, sent)
		return
	}
	q := l.Requests
	if tinyCoarseBucket(q) {
		// A bucket of one or two in whole-second resets: its count is
		// always at the headroom and its reset says nothing finer than
		// a second. Its 429s and successes pace it.
		p.observe(now)
		p.syncRemaining(now, q, sent)
		return
	}
	if p.mode == paceMeasured && q.HasRemaining && q.Remaining <= 0 && q.HasLimit && !tooSmallForHeadroom(q) {
		// Paced at a measured rate, and still the quota ran out past
		// the headroom: the rate was too high, whatever the readings
		// seemed to prove.
		p.cut(now, sent)
	}
	p.liftCeiling(now)
	coarse := coarseBucket(l)
	if coarse {
		p.spotLateResets(now, q, sent)
		p.coarse, p.limit = true, q.Limit
		p.countDry(now, q)
		p.spotLump(now, q, sent)
		sameWindow := p.lumpy && !p.edge.fresh && !p.latest.at.IsZero()
		if sent >= p.latest.sent {
			r := reading{at: now, remaining: q.Remaining, sent: sent, rejected: p.rejected, reset: q.Reset}
			if sameWindow {
				// A window's count only falls: an answer the server
				// counted before others (attempts sent at once arrive
				// in any order) does not bring units back.
				r.remaining = min(r.remaining, p.latest.remaining)
			}
			p.latest = r
		} else if sameWindow {
			p.latest.remaining = min(p.latest.remaining, q.Remaining)
			if p.refused {
				// A 429 to an attempt sent before the latest
				// reading's: that reading's count already left it
				// out, so it frees no unit (each such 429 let one
				// more go past a window's count).
				p.latest.rejected++
			}
		}
	}
	if q.Coarse && q.HasLimit && q.HasRemaining && q.Remaining < q.Limit-1 && !q.Reset.After(now) {
		p.earlyResets = true // not full, and its time to full has passed: the server cuts resets down
	}
	lo, hi := rateBounds(now, l, p.earlyResets)
	if counted := p.answerSentAt; !counted.IsZero() && counted.Before(now) {
		// The server counted the attempt between its send and now, and
		// placed its reset by a Date written when it answered, which
		// may be long after (a non-streaming generation): the reset
		// read from now understates the refill's time by as much, and
		// a lower bound taken from it overstated a bucket of 50 a
		// minute as 2.2 a second after a 30 s answer. From the send,
		// the time is never understated.
		lo, _ = rateBounds(counted, l, p.earlyResets)
	}
	if coarse && p.lateResets {
		hi = math.Inf(1) // its resets are too late to bound the rate
	}
	if hi > 0 || coarse {
		binding := p.binding(now)
		switch {
		case coarse && p.lumpy:
			// A fixed window: what remains may go at once, and the
			// hold at its end (exhaustedUntil) waits for the lump.
			// The pace only spreads the requests the count allows
			// (syncRemaining, windowShortfall) over a hundredth of a second.
			p.rate = float64(q.Limit) / lumpSpread.Seconds()
		case coarse && p.rate > 0:
			p.measure(now, q, sent, lo, hi, binding)
			p.useMore(now, q, binding)
			p.rate = max(p.rate, p.proven)
		default:
			p.rate = p.nextRate(lo, hi, q, float64(q.Limit-q.Remaining), q.Reset.Sub(now).Seconds(), binding)
		}
		p.firm = l.Window > 0 || (l.Replenishing && !coarse)
		p.mode = paceMeasured
		if p.firm {
			p.mode = paceStated
		}
		p.setPace(now, p.paceOf(p.rate))
		capacity := 1.0
		if q.HasLimit && q.Limit > headroom+1 {
			capacity = float64(q.Limit - headroom)
		}
		p.setCapacity(now, capacity)
	}
	p.syncRemaining(now, q, sent)
}

// spotLateResets sets lateResets when q, a coarse bucket read at now in
// answer to the sent-th attempt, is full (but for that attempt) while the
// latest reading, of an attempt sent before it, said it would not be
// before a reset more than lateBy away: its resets run late, and bound no
// rate from above. (Answers come back in any order: one to an earlier
// attempt, read full, says nothing of a later one's reset, nor does one to
// an attempt sent while the upstream was free, which has no number. A
// fixed window told by its lumps learns its end from its answers: see
// windowEdge.)
//
// Without this, a bucket of 4 at 40 a second whose resets ran 5 s ahead
// of its Date was paced at one request every 3 s: each reading said full,
// and each stated a reset 6 s away, which capped the pace there; 3 of 4
// requests failed, unable to wait their turn.
func (p *pacer) spotLateResets(now time.Time, q Quota, sent uint64) {
	l := p.latest
	if !p.lumpy && !l.at.IsZero() && !l.reset.IsZero() && sent > 0 && sent >= l.sent && q.Remaining >= q.Limit-1 && l.reset.Sub(now) > lateBy {
		p.lateResets = true
	}
}

// lateBy is how much later than a quota read full a reading's reset must
// have said it would be, for the resets to be late: a second of rounding
// up, a second more for the Date that placed it, cut down to the second
// (until the server's clock is learned, see serverClock), and a margin for
// the answers' trips. At 1.2 s, a server with an exact clock whose first
// answer came late in its second was flagged late.
const lateBy = 2*time.Second + 200*time.Millisecond

// liftCeiling raises the ceiling a 429 left on a stated or measured pace by
// rateRecover for every ceilingLift that passes with requests waiting on the
// pace and no 429: a refusal proves the rate was too high then, not for
// good. A burst that overran a quota once (slow start's herd, a window
// already used up), or one attempt that came early (an answer faster than
// the one before it, at a bucket of one), would otherwise cap the pace
// below the server's rate for the life of the transport, with quota left
// over at every reset. On a stated pace, a 429 that follows a lift doubles
// the wait before the next (up to maxCeilingLift; see liftWait): a server
// that takes less than it states (a reset computed short, a second limit
// the headers do not show) drew three 429s every five seconds from a pace
// lifted back each second, for good; now fewer and fewer. (The observed
// mode climbs by itself: see grow.)
func (p *pacer) liftCeiling(now time.Time) {
	if p.mode != paceStated && p.mode != paceMeasured || p.ceiling <= 0 || !p.binding(now) {
		return
	}
	if every := p.liftWait(); now.Sub(p.grewAt) < every || now.Sub(p.lastNoes) < every {
		return
	}
	p.lifted = true
	p.ceiling *= rateRecover
	p.grewAt = now
}

// liftWait is how long the ceiling waits before its next lift: on a
// measured pace always ceilingLift. A measured pace's rate is its own
// estimate, which a lift tests; backing off there kept a GitHub window of
// five a second, paced as a bucket, under its rate: 1.17-1.24x the ideal
// became 1.35-1.44x (three runs of the matrix). A stated rate is the
// server's word, and a lift that draws a 429 says it is wrong.
func (p *pacer) liftWait() time.Duration {
	if p.mode != paceStated {
		return ceilingLift
	}
	return max(p.liftEvery, ceilingLift)
}

// spotLump tells a fixed window behind bucket-like headers (GitHub's
// X-RateLimit-* over a window of a second, say) from a bucket: a quota that
// was seen to drain with no refill at all (flat), then came back from a
// quarter or less to half or more at once, far faster than any refill rate
// it showed, refills in lumps. From then on it is paced as a window (see
// learn and unitAfter). A bucket never shows both: below full it refills
// as it drains.
func (p *pacer) spotLump(now time.Time, q Quota, sent uint64) {
	l := p.latest
	if p.lumpy || l.at.IsZero() || sent <= l.sent || q.Limit < lumpMinLimit {
		return
	}
	if p.dry > 1 {
		// Refused again a unit after it was refused: no refill
		// came for as long as it stayed dry, so its rate is below
		// two units over that time.
		p.flat = true
		p.dryFor = max(p.dryFor, p.dryAt.Sub(p.dryFrom))
	}
	n := float64(sent-l.sent) - float64(p.rejected-l.rejected)
	taken := float64(q.Remaining-l.remaining) + n
	// Readings in a row, each fallen by what was sent since the one
	// before: no refill at all over a drain measure's span and count
	// is flat too. (The drain measure's mark may be an answer to a
	// burst, counted out of order: a window that its pace then drained
	// one attempt at a time to its end was not seen flat, nor its lump
	// at the next window; paced as a bucket for a window or two more,
	// the burst ended 1.25-1.5x the ideal.)
	if f := p.flatFrom; taken > 0 || q.Remaining >= q.Limit-1 || f.at.IsZero() {
		p.flatFrom = reading{at: now, sent: sent}
	} else if now.Sub(f.at) >= drainSpan && sent-f.sent >= drainCount {
		p.flat = true
	}
	if !p.flat {
		return
	}
	span := now.Sub(l.at).Seconds()
	slowest := max(p.proven, 1) // units a second the drain allowed, at most
	if d := p.dryFor.Seconds(); d > 0 {
		slowest = min(slowest, 2/d)
	}
	if l.remaining*4 <= q.Limit && 2*taken >= float64(q.Limit) && taken > 4*slowest*span+2 {
		p.lumpy = true
	}
}

// countDry counts the readings in a row, a unit or more apart, that found
// a coarse quota empty: each is a probe sent when a unit should have come
// back, and did not. unitAfter doubles with each, so a quota that does not
// refill as the proven rate says (a window, or a rate proven too high) is
// probed ever less often, up to its reset, instead of drawing a 429 a
// unit.
func (p *pacer) countDry(now time.Time, q Quota) {
	switch {
	case !q.HasRemaining:
	case q.Remaining > 0 || !p.refused:
		// A success that empties it took a unit that came back: a
		// bucket at its rate reads empty after every success.
		p.dry, p.dryAt, p.dryFrom = 0, time.Time{}, time.Time{}
	case p.dry == 0:
		p.dry, p.dryAt, p.dryFrom = 1, now, now
	case now.Sub(p.dryAt) >= p.unitAfter():
		p.dry++
		p.dryAt = now
	}
}

// useMore raises a coarse quota's pace when a span of unusedSpan passes
// with requests waiting on the pace, no 429, and the quota never drawn
// below a quarter: the server had quota to spare all along, whatever the
// drain measured (a fixed window refills in one lump at its end, so within
// it the drain reads no refill at all). The pace rises by what was left
// over, at most twofold a span; a 429 cuts it back as usual.
func (p *pacer) useMore(now time.Time, q Quota, binding bool) {
	u := &p.use
	if u.since.IsZero() || !binding || p.rejected != u.rejected {
		*u = quotaUse{since: now, least: q.Remaining, rejected: p.rejected}
		return
	}
	u.least = min(u.least, q.Remaining)
	if now.Sub(u.since) < unusedSpan {
		return
	}
	if q.Limit >= 4*(headroom+1) && u.least*4 > q.Limit {
		factor := min(2, float64(q.Limit)/float64(q.Limit-u.least))
		p.rate *= factor
		if p.ceiling > 0 {
			p.ceiling = max(p.ceiling, p.rate)
		}
		p.prove(p.rate)
	}
	*u = quotaUse{since: now, least: q.Remaining, rejected: p.rejected}
}

// quotaUse is the least a coarse quota held over a span (see useMore).
type quotaUse struct {
	since    time.Time
	least    int64
	rejected uint64 // 429s seen when the span began
}

// syncRemaining keeps the pace clock in step with what the server says
// remains. Requests sent after this one had not reached the server when it
// answered: what it says remains is theirs too.
func (p *pacer) syncRemaining(now time.Time, q Quota, sent uint64) {
	if p.interval <= 0 || !q.HasRemaining {
		return
	}
	if p.lumpy && !p.latest.at.IsZero() && p.coarse {
		// A window's answers come back counted out of order: this one's
		// count may leave out attempts sent before it and take in some
		// sent after, which the count below would take as spent twice
		// (by up to the window's quota: the last units of a window went
		// up to 7 ms after it opened, behind a plain loop). The latest
		// reading has the least count of the window's answers, and
		// every answer of the window was counted at or before it.
		q.Remaining, sent = p.latest.remaining, p.latest.sent
	}
	unseen, newest := 0.0, sent == 0 || sent >= p.synced
	if sent > 0 { // 0: sent while the upstream was free, unnumbered
		// Those sent after the newest attempt whose answer's count was
		// taken in: answers come back in any order, and that count
		// already left out what was sent after it, no more. Counted
		// from this attempt, a stale reading of none left, read after
		// the answers to six attempts sent behind it, pushed the pace
		// clock six intervals ahead with nothing in flight.
		p.synced = max(p.synced, sent)
		unseen = float64(p.sent-p.synced) - float64(p.lostAfter(p.synced))
	}
	spare := int64(headroom)
	if tooSmallForHeadroom(q) || p.lumpy || endsWithin(now, q, p.interval) {
		// A window's count is exact and nothing refills it before
		// its end: every unit may go, none beyond. A unit kept back
		// as its reset comes is lost, if it is a window's.
		spare = 0
	}
	available := float64(q.Remaining-spare) - unseen
	target := p.slotsAt(now) + (p.capacity - 1) + (1 - available)
	if newest && unseen == 0 && !p.binding(now) {
		// It answers the newest attempt and nobody waits on a booked
		// slot: what the server counts is the truth, in either way (a
		// theoretical arrival time before now is a full bucket).
		p.tatV = max(target, p.slotsAt(now))
		return
	}
	if p.mode == paceObserved {
		// The headers were found wanting: a count keeps the bucket
		// from being overrun by the next unit, no further. Its
		// forecast for the attempts still out (each one refused, by
		// its word) pushed the pace clock as many intervals ahead, and
		// when those were served instead, the upstream sat idle that
		// long with nothing in flight; their answers pace it.
		target = min(target, p.slotsAt(now)+p.capacity)
	}
	p.tatV = max(p.tatV, target)
}

// endsWithin reports that q's reset, in whole seconds, comes within d of
// now: the headroom kept back is of no use by then. Behind such a reset a
// fixed window cannot be told from a bucket until its lumps show, and a
// window's unit left over is lost at its end (a window of 100 left one
// over in its first second, and a burst of five windows' quota ended a
// window late); a bucket is full again. A fine reset is a bucket's time
// to full, no end of anything: its headroom stays.
func endsWithin(now time.Time, q Quota, d time.Duration) bool {
	left := q.Reset.Sub(now)
	return q.Coarse && !q.Reset.IsZero() && left > 0 && left < d
}

// tooSmallForHeadroom reports a quota of one or two: keeping a unit back
// would leave it none (or one) to use, so its count reads empty after
// every success.
func tooSmallForHeadroom(q Quota) bool { return q.HasLimit && q.Limit <= headroom+1 }

// tinyCoarseBucket reports such a quota with a whole-second reset: neither
// its count nor its reset can tell its rate, so its 429s and successes pace
// it (the observed mode), and its empty count holds nobody.
func tinyCoarseBucket(q Quota) bool { return q.Coarse && tooSmallForHeadroom(q) }

// coarseBucket reports a quota whose reset, an absolute time in whole
// seconds, is too coarse to state the refill rate: a bucket that refills in
// 100 ms says "full by the next second". It holds for any family
// (Anthropic's RFC 3339 resets, GitHub-style epochs), a fixed window
// included: behind the same headers a window cannot be told from a bucket,
// and either is measured by its drain.
func coarseBucket(l RateLimits) bool {
	q := l.Requests
	return l.Window == 0 && q.HasLimit && q.HasRemaining &&
		q.Limit > headroom+1 && !q.Reset.IsZero() && q.Coarse
}

// prove raises the proven rate to lo, but never past the ceiling a 429
// left: a measure that says more than the server took is noise (answers
// out of order, a reading delayed on its way), and a 429 is not.
func (p *pacer) prove(lo float64) {
	p.proven = max(p.proven, lo)
	if p.ceiling > 0 {
		p.proven = min(p.proven, p.ceiling)
	}
}

// reading is one response's word on a coarse bucket, the start of a drain
// measurement.
type reading struct {
	at        time.Time
	remaining int64
	sent      uint64 // the attempt the reading answers
	rejected  uint64 // 429s seen by then
	full      bool   // the bucket was (nearly) full: refill may be lost to the cap
	reset     time.Time
}

// measure learns a coarse bucket's refill rate from two readings: what
// remains now, less what remained at the mark, plus what the server took in
// between (admissions, less those it refused), over the time between.
// Remaining is rounded down, so the measure is within one unit; it is exact
// only while the bucket stayed below full, since a full bucket throws refill
// away. Hence:
//
//   - both readings below full: the measure states the rate;
//   - otherwise it is only a lower bound. While the pace holds requests back
//     and the bucket stays full, the rate is probed upward: before the first
//     measure by as much as half the quota could absorb over the span (a
//     bucket of 10 read every 100 ms allows +50/s a step), after it by
//     rateCreep, so the pace settles just under the truth.
func (p *pacer) measure(now time.Time, q Quota, sent uint64, lo, hi float64, binding bool) {
	r := reading{at: now, remaining: q.Remaining, sent: sent, rejected: p.rejected, full: q.Remaining >= q.Limit-1}
	p.prove(lo)
	m := p.mark
	span := now.Sub(m.at)
	n := float64(sent-m.sent) - float64(r.rejected-m.rejected)
	switch {
	case m.at.IsZero() || sent <= m.sent:
		p.mark = r
		return
	case span > drainSpanMax:
		// Readings too far apart to measure (the pace sends less than
		// one a second): a bucket that stayed full can take more.
		if m.full && r.full && binding {
			p.rate *= 2
		}
		p.mark = r
		return
	case span < drainSpan:
		if m.full && !r.full {
			p.mark = r // measure from the first reading below full
		}
		return
	}
	taken := float64(r.remaining-m.remaining) + n // refill over the span, ±1
	if !m.full && !r.full && n >= drainCount && taken <= 1 {
		p.flat = true // no refill at all while it drained: perhaps a window
	}
	p.prove((taken - 1) / span.Seconds())
	switch {
	case !m.full && !r.full && n >= drainCount:
		p.rate = taken / span.Seconds()
		p.measured = true
		return // keep the mark: a longer span measures finer
	case !m.full && !r.full:
		return // too few attempts yet to tell the rate
	case r.full && binding:
		// A measure can come out low (a reading delayed on its way
		// here stretches its span), and a full bucket says so: probe
		// up again. The shortfall check keeps the probing from
		// emptying the bucket. The full bucket is an observation, and
		// beats the bound its reset states: a reset on a clock ahead
		// of ours (by more than the second hi allows) held a bucket
		// of 4 at 40 a second, read full at every answer, to one or
		// two requests a second.
		p.rate *= 2
		hi = math.Inf(1)
	}
	if p.ceiling > 0 {
		p.rate = min(p.rate, p.ceiling)
	}
	p.mark = r
	if hi > 0 && !math.IsInf(hi, 1) {
		p.rate = min(p.rate, hi)
	}
	p.rate = max(p.rate, p.proven)
}

// nextRate folds one reading's bounds on the refill rate into the learned
// rate. The highest lower bound read since the last 429 is kept (proven);
// while the pace is what holds requests back, the rate rises from there (by
// rateCreep a reading, faster when more than half the quota remains, so an
// estimate that started low recovers), and it never leaves the bounds: hi,
// and the ceiling a 429 set.
func (p *pacer) nextRate(lo, hi float64, q Quota, missing, left float64, binding bool) float64 {
	p.proven = max(p.proven, lo)
	rate := p.rate
	switch {
	case rate == 0 && !math.IsInf(hi, 1):
		rate = hi
	case rate == 0 && q.Coarse:
		// A guess: a whole-second reset read against a Date cut down
		// is up to two seconds late.
		rate = max(missing/max(left-1, 0.25), 1)
	case rate == 0 && left > 0:
		rate = max(missing/left, 1) // a guess, below the truth: the reset may be late
	case rate == 0:
		rate = max(missing, 1)
	case !binding:
		// The pace holds nobody back: a higher rate would prove nothing.
	case q.HasLimit && q.HasRemaining && q.Remaining*2 > q.Limit:
		rate *= rateRecover
	default:
		rate *= rateCreep
	}
	if p.ceiling > 0 {
		hi = min(hi, p.ceiling)
	}
	return max(min(rate, hi), p.proven)
}

// rateBounds returns what the headers prove about the request rate (per
// second) the upstream allows, as bounds lo <= rate <= hi; hi is +Inf when
// nothing caps it and 0 when the headers imply no rate at all.
//
//   - A policy quota over its window (IETF) states the rate.
//   - A token bucket (OpenAI, Anthropic: Reset is when it is full again)
//     misses between Limit-Remaining-1 and Limit-Remaining units (Remaining
//     is rounded down), refilled in the time to Reset. A coarse reset
//     (whole seconds) may be a second late: hi assumes so (unbounded when
//     that leaves no time at all). It is early too when the server cuts it
//     down or to the nearest second (early, learned from readings: see
//     pacer.earlyResets); then lo assumes it a second early, else it takes
//     the reset as the latest the refill can take.
//   - A fixed window is spread over the time left (see windowBounds).
func rateBounds(now time.Time, l RateLimits, early bool) (lo, hi float64) {
	q := l.Requests
	if l.Window > 0 && q.HasLimit && q.Limit > 0 {
		r := float64(q.Limit) / l.Window.Seconds()
		return r, r
	}
	left := q.Reset.Sub(now).Seconds()
	if !q.HasRemaining || !q.HasLimit || q.Reset.IsZero() {
		return 0, 0
	}
	if !l.Replenishing {
		return windowBounds(q, left)
	}
	if q.Limit <= q.Remaining {
		return 0, 0
	}
	missing := float64(q.Limit - q.Remaining)
	if q.Coarse {
		hi = math.Inf(1)
		if left > 1 {
			hi = missing / (left - 1)
		}
		if early || left <= 0 {
			return max(missing-1, 0) / (max(left, 0) + 1), hi
		}
		return max(missing-1, 0) / left, hi // never early: the refill takes at most left
	}
	if left <= 0 {
		return 0, 0
	}
	return max(missing-1, 0) / left, missing / left
}

// windowBounds spreads what remains of a fixed window over the time left
// in it: the pace that uses the window up just as it ends. The bucket's
// capacity (the limit) still lets a window's worth go at once, so this
// slows nobody while much remains. A coarse reset may be a second early or
// late.
func windowBounds(q Quota, left float64) (lo, hi float64) {
	if q.Remaining <= 0 || left <= 0 && !q.Coarse {
		return 0, 0
	}
	r := float64(q.Remaining)
	if !q.Coarse {
		return r / left, r / left
	}
	lo = r / (max(left, 0) + 1)
	hi = math.Inf(1)
	if left > 1 {
		hi = r / (left - 1)
	}
	return lo, hi
}

// runRate is the rate the server accepted over the run of 429s that the
// one at now extends: the successes since the run's first, over the time
// between; 0 when the run is too short to tell, or when a hold broke it
// (the bucket may have filled and thrown refill away): a new run starts
// here.
//
// inRun reports that the 429 at now extends a run, measured or not.
func (p *pacer) runRate(now time.Time) (rate float64, inRun bool) {
	s := p.streak
	span := now.Sub(s.at)
	if s.at.IsZero() || span > runMax || p.holdEnd.Sub(s.at) > runGap {
		p.streak = refusals{at: now, served: p.served}
		return 0, false
	}
	n := p.served - s.served
	if span < runMin || n < runCount {
		return 0, true
	}
	rate = float64(n) / span.Seconds()
	if rate > s.rate {
		// Paced below what the server accepted since the run began
		// (climbing from a first guess), the bucket was not kept
		// empty: it refilled, perhaps to full, and threw refill away.
		p.streak = refusals{at: now, served: p.served}
		return 0, false
	}
	return rate, true
}

// acceptCounter counts successes over the last second, in buckets of a
// tenth, so the observed mode can tell the rate the server accepted. It
// keeps eleven: the newest fills, and the oldest counts by the share of it
// still within the second (ten alone span 0.9 to 1 s, and read a pace of
// 4.4 a second as 3 after a 429, cutting it to 0.7x where 95% of what was
// accepted is the floor).
type acceptCounter struct {
	at     time.Time // the start of the newest bucket
	counts [11]int
	head   int
}

const acceptBucket = 100 * time.Millisecond

func (a *acceptCounter) roll(now time.Time) {
	if a.at.IsZero() {
		a.at = now
		return
	}
	for n := 0; now.Sub(a.at) >= acceptBucket && n < len(a.counts); n++ {
		a.head = (a.head + 1) % len(a.counts)
		a.counts[a.head] = 0
		a.at = a.at.Add(acceptBucket)
	}
	if now.Sub(a.at) >= acceptBucket { // idle for over a second
		a.at = now
	}
}

func (a *acceptCounter) add(now time.Time) {
	a.roll(now)
	a.counts[a.head]++
}

// perSecond is the successes of the last second: the ten newest buckets
// (the newest still filling) and the share of the oldest that falls
// within the second.
func (a *acceptCounter) perSecond(now time.Time) float64 {
	a.roll(now)
	n := 0
	for _, c := range a.counts {
		n += c
	}
	// now may come before the newest bucket began: answers take the lock
	// in any order after reading the clock.
	into := min(max(float64(now.Sub(a.at))/float64(acceptBucket), 0), 1)
	return float64(n) - float64(a.counts[(a.head+1)%len(a.counts)])*into
}

// climbSteps remembers the last steps of the observed mode's first climb:
// from which attempt on each rate paced the attempts sent, so a 429 is
// traced to the rate its attempt was sent at, not the rate in force when
// it came back.
type climbSteps struct {
	base  uint64       // the attempts sent when the climb began
	steps [8]climbStep // a ring, the newest at n-1
	n     int
}

// climbStep is a rate of the first climb and the attempts sent when it
// began: those numbered after from went on it (or a later step).
type climbStep struct {
	from uint64
	rate float64
}

// add records that the climb went to rate when sent attempts had been sent.
func (c *climbSteps) add(sent uint64, rate float64) {
	c.steps[c.n%len(c.steps)] = climbStep{from: sent, rate: rate}
	c.n++
}

// newest is the attempts sent when the climb's current step began.
func (c *climbSteps) newest() uint64 {
	if c.n == 0 {
		return c.base
	}
	return c.steps[(c.n-1)%len(c.steps)].from
}

// rateOf is the rate the sent-th attempt went on: that of the newest step
// begun before it was sent; start if it went before every step, or, when
// older steps were forgotten, half the oldest remembered (the most it went
// at, as each step doubles).
func (c *climbSteps) rateOf(sent uint64, start float64) float64 {
	oldest := max(c.n-len(c.steps), 0)
	for k := c.n - 1; k >= oldest; k-- {
		if s := c.steps[k%len(c.steps)]; s.from < sent {
			return s.rate
		}
	}
	if oldest > 0 {
		return max(c.steps[oldest%len(c.steps)].rate/2, start)
	}
	return start
}
