package simkit

import (
	"context"
	"testing"
	"time"
)

func TestRound3(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                         "0s",
		1234 * time.Nanosecond:    "1µs",
		2345678 * time.Nanosecond: "2.35ms",
		153400 * time.Microsecond: "153ms",
		2314 * time.Millisecond:   "2.31s",
		12345 * time.Millisecond:  "12.3s",
	} {
		if got := Round3(d); got != want {
			t.Errorf("Round3(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestSleepStopsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("a cancelled context must end the wait, reporting it cut short")
	}
	if Sleep(ctx, 0) {
		t.Fatal("no wait on a done context reports it cut short too")
	}
	if !Sleep(context.Background(), time.Microsecond) {
		t.Fatal("a wait that passes reports it passed")
	}
}
