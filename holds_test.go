package retryhttp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestHoldOnlyMovesLater(t *testing.T) {
	var h holds
	now := testStart
	assert.False(t, h.held(now))
	assert.True(t, h.free(now))

	assert.True(t, h.until(now, now.Add(time.Second), 0))
	assert.True(t, h.held(now))
	assert.False(t, h.free(now))
	assert.Equal(t, now.Add(time.Second), h.end)

	assert.False(t, h.until(now, now.Add(500*time.Millisecond), 0), "a shorter hold leaves the longer one")
	assert.False(t, h.until(now, now.Add(-time.Second), 0), "a time already past holds nothing")
	assert.Equal(t, now.Add(time.Second), h.end)
	assert.True(t, h.until(now, now.Add(2*time.Second), 0))
	assert.Equal(t, now.Add(2*time.Second), h.end)

	assert.False(t, h.held(now.Add(2*time.Second)), "a hold ends at its time")
	assert.True(t, h.free(now.Add(2*time.Second)))
	assert.True(t, h.reprobeAt.IsZero(), "a hold within the bound ends in no new probe")
}

func TestAHoldCutToTheBoundEndsInANewProbe(t *testing.T) {
	const bound = time.Minute
	var h holds
	now := testStart
	assert.True(t, h.until(now, now.Add(24*time.Hour), bound), "a day, cut to the bound")
	assert.Equal(t, now.Add(bound), h.end)
	assert.Equal(t, now.Add(bound), h.reprobeAt, "and the server asked again then")
	assert.False(t, h.free(now.Add(bound)), "the new probe is still to come when the hold ends")

	later := now.Add(10 * time.Second)
	assert.False(t, h.until(later, later.Add(time.Second), bound), "a shorter hold leaves it")
	assert.False(t, h.reprobeDue(now.Add(bound-time.Nanosecond)))
	assert.True(t, h.reprobeDue(now.Add(bound)))
	h.reprobe()
	assert.False(t, h.reprobeDue(now.Add(bound)), "one new probe per cut hold")
	assert.Equal(t, uint32(1), h.reprobes, "turns given before it are void")
	assert.True(t, h.free(now.Add(bound)))
}

func TestACutHoldThatMovesNothingStillEndsInANewProbe(t *testing.T) {
	const bound = time.Minute
	var h holds
	now := testStart
	assert.True(t, h.until(now, now.Add(bound), bound), "exactly the bound: trusted")
	assert.True(t, h.reprobeAt.IsZero())
	assert.False(t, h.until(now, now.Add(time.Hour), bound), "an hour, cut to the hold in force: it moves nothing")
	assert.Equal(t, now.Add(bound), h.reprobeAt, "but the server said more than the bound: ask again then")
}

func TestLiftEndsAReadingsHoldButNotA429s(t *testing.T) {
	const bound = time.Minute
	now := testStart
	h := holds{byQuota: false}
	h.until(now, now.Add(time.Hour), bound)
	h.lift()
	assert.True(t, h.held(now), "a 429's hold stays")
	assert.False(t, h.reprobeAt.IsZero())

	h = holds{}
	h.until(now, now.Add(time.Hour), bound)
	h.byQuota = true
	h.lift()
	assert.False(t, h.held(now), "a newer reading lifts a quota's hold")
	assert.True(t, h.free(now), "and the new probe it was to end in")
	assert.False(t, h.byQuota)
}

func TestAfterAHoldRequestsAreSpreadUnlessPaced(t *testing.T) {
	const jitter = 100 * time.Millisecond
	var h holds
	now := testStart
	assert.Equal(t, now, h.after(now, jitter, false), "not held: at once")
	h.until(now, now.Add(time.Second), 0)
	end := now.Add(time.Second)
	assert.Equal(t, end, h.after(now, jitter, true), "paced: the pace spreads them")
	assert.Equal(t, end, h.after(now, 0, false), "no jitter to spread them with")
	seen := map[time.Time]bool{}
	for range 50 {
		at := h.after(now, jitter, false)
		assert.False(t, at.Before(end))
		assert.True(t, at.Before(end.Add(jitter)))
		seen[at] = true
	}
	assert.Greater(t, len(seen), 10, "spread with jitter, not a herd")
}
