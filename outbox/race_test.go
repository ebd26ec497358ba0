//go:build race

package outbox

// raceEnabled reports a test binary built with -race.
const raceEnabled = true
