package fakeclock

import (
	"testing"
	"time"
)

var start = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func TestAdvanceFiresDueTimersInOrder(t *testing.T) {
	c := New(start)
	late, _ := c.NewTimer(2 * time.Second)
	early, _ := c.NewTimer(time.Second)
	fired := make(chan time.Time, 1)
	c.AfterFunc(1500*time.Millisecond, func() { fired <- c.Now() })

	c.Advance(time.Second)
	select {
	case at := <-early:
		if !at.Equal(start.Add(time.Second)) {
			t.Fatalf("early timer fired at %v", at)
		}
	default:
		t.Fatal("the due timer did not fire")
	}
	select {
	case <-late:
		t.Fatal("a timer fired before its time")
	default:
	}
	c.Advance(time.Second)
	<-late
	if at := <-fired; !at.Equal(start.Add(2 * time.Second)) {
		t.Fatalf("AfterFunc saw %v", at)
	}
	if c.Pending() != 0 {
		t.Fatalf("%d timers still pending", c.Pending())
	}
}

func TestStopPreventsFiring(t *testing.T) {
	c := New(start)
	ch, stop := c.NewTimer(time.Second)
	if !stop() {
		t.Fatal("stop of a pending timer reported false")
	}
	if stop() {
		t.Fatal("a second stop reported true")
	}
	c.Advance(time.Hour)
	select {
	case <-ch:
		t.Fatal("a stopped timer fired")
	default:
	}
}

func TestAutoFiresAtOnceAndRecordsSleeps(t *testing.T) {
	c := NewAuto(start)
	for _, d := range []time.Duration{time.Second, 2 * time.Second} {
		ch, _ := c.NewTimer(d)
		<-ch
	}
	if got := c.Now(); !got.Equal(start.Add(3 * time.Second)) {
		t.Fatalf("now is %v", got)
	}
	if s := c.Sleeps(); len(s) != 2 || s[0] != time.Second || s[1] != 2*time.Second {
		t.Fatalf("sleeps %v", s)
	}
}

func TestWaitForTimers(t *testing.T) {
	c := New(start)
	go c.NewTimer(time.Second)
	if !c.WaitForTimers(1, 5*time.Second) {
		t.Fatal("the timer was not seen")
	}
	if c.WaitForTimers(2, 10*time.Millisecond) {
		t.Fatal("a timer that was never made was seen")
	}
}
