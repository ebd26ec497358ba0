package retryhttp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestBookedSlotsKnowTheFirstInLine(t *testing.T) {
	var b bookedSlots
	for _, v := range []float64{3, 4, 5} {
		b.add(1, v)
	}
	b.add(1, 3.5) // a burst's slot, booked after later ones
	b.add(1, 4)   // two requests on one slot
	assert.Equal(t, []float64{3, 3.5, 4, 4, 5}, b.v)

	front, ok := b.front(1)
	assert.True(t, ok)
	assert.Equal(t, 3.0, front)

	b.remove(1, 4)
	assert.Equal(t, []float64{3, 3.5, 4, 5}, b.v, "one hold of a shared slot goes")
	b.remove(1, 3)
	assert.Equal(t, []float64{3.5, 4, 5}, b.v, "the first in line goes")
	b.remove(1, 4.5)
	b.remove(2, 5)
	assert.Equal(t, []float64{3.5, 4, 5}, b.v, "a slot not held, or on another clock, changes nothing")
	_, ok = b.front(2)
	assert.False(t, ok, "another clock's queue is not this one's")
	for _, v := range []float64{3.5, 4, 5} {
		b.remove(1, v)
	}
	_, ok = b.front(1)
	assert.False(t, ok, "no one in line")

	b.add(2, 7)
	assert.Equal(t, []float64{7}, b.v, "a new pace clock drops the old one's slots")
}

func TestAQueueWithRoomForABurstBooksInOrder(t *testing.T) {
	// What book records: a burst's slots share a number or come in any
	// order, and the first is still the least.
	p := &pacer{}
	now := testStart
	p.setPace(now, 100*time.Millisecond)
	p.setCapacity(now, 3)
	var turns []turn
	for i := 0; i < 5; i++ {
		turns = append(turns, p.book(now))
	}
	front, ok := p.booked.front(p.clockID)
	assert.True(t, ok)
	assert.Equal(t, turns[0].v, front)
	for _, tn := range turns {
		assert.True(t, tn.listed)
		tn := tn
		p.unlist(&tn)
		assert.False(t, tn.listed)
		p.unlist(&tn) // twice: one hold only
	}
	assert.Empty(t, p.booked.v, "every booking went, once")
}
