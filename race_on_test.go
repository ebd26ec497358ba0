//go:build race

package retryhttp

// raceEnabled reports whether the test binary runs under the race
// detector, whose slower goroutines change the orders simulated-time tests
// see (see TestRobustnessMatrix).
const raceEnabled = true
