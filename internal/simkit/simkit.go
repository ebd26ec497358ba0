// Package simkit holds what the repository's simulators (cmd/retrysim and
// the outbox module's outboxsim) share: how they print durations and how
// they wait. It is internal: no user of the library imports it.
package simkit

import (
	"context"
	"time"
)

// Round3 rounds d to about three significant digits, as the simulators
// print durations: 2.31s, 153ms, 0s.
func Round3(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < 10*time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < 10*time.Second:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// Sleep waits d, or until ctx is done; it reports whether the whole wait
// passed. A fresh timer each time: with the go 1.22 semantics the root
// module builds under, a reused timer's stale tick could end a later wait
// early.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
