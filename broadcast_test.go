package retryhttp

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestBroadcastWakesEveryWaiterOnceAndStartsOver(t *testing.T) {
	var b broadcast
	assert.False(t, b.waiting(), "nobody waits on a new broadcast")
	b.fire() // nobody waits: nothing to do
	first, second := b.wait(), b.wait()
	assert.True(t, b.waiting())
	assert.Equal(t, first, second, "waiters before a fire share its channel")
	assert.False(t, closed(first))

	b.fire()
	assert.True(t, closed(first), "a fire wakes every waiter")
	assert.True(t, closed(second))
	assert.False(t, b.waiting(), "and is forgotten")

	next := b.wait()
	assert.False(t, closed(next), "a waiter after a fire waits for the next one")
	b.fire()
	assert.True(t, closed(next))
}
