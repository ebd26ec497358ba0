package retryhttp

import "sort"

// bookedSlots is the set of slots that waiting requests hold on the current
// pace clock, so the pacer can tell where its queue begins: which request
// is first in line (see upstream.stalledAt) and how far ahead of now it is
// (see pacer.catchUp). Slots are numbers on the pace clock, not times: they
// move with the pace.
//
// A turn is in the set from its booking until it goes, books again or gives
// up (turn.listed); slots on an older clock are dropped when the first slot
// of a new one is booked.
//
// It is not safe for concurrent use: the upstream's lock guards it.
type bookedSlots struct {
	clock uint32    // the pace clock the slots are on (pacer.clockID)
	v     []float64 // sorted; several requests may hold one slot (a burst)
}

// add records slot v booked on clock.
func (b *bookedSlots) add(clock uint32, v float64) {
	if clock != b.clock {
		b.clock, b.v = clock, b.v[:0]
	}
	n := len(b.v)
	if n == 0 || b.v[n-1] <= v { // the usual case: a queue books in order
		b.v = append(b.v, v)
		return
	}
	i := sort.SearchFloat64s(b.v, v)
	b.v = append(b.v, 0)
	copy(b.v[i+1:], b.v[i:])
	b.v[i] = v
}

// remove drops one hold of slot v on clock, if there is one.
func (b *bookedSlots) remove(clock uint32, v float64) {
	if clock != b.clock {
		return
	}
	i := sort.SearchFloat64s(b.v, v)
	switch {
	case i == len(b.v) || b.v[i] != v:
	case i == 0:
		b.v = b.v[1:] // the usual case: the first in line goes
	default:
		b.v = append(b.v[:i], b.v[i+1:]...)
	}
}

// front is the least slot held on clock: the first in line, whether its
// time has come or not (a request whose slot is due may still wait, for a
// hold or the model's shortfall, and it is still ahead of every later
// slot); ok is false when no slot is held.
func (b *bookedSlots) front(clock uint32) (v float64, ok bool) {
	if clock != b.clock || len(b.v) == 0 {
		return 0, false
	}
	return b.v[0], true
}
