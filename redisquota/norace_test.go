//go:build !race

package redisquota

// raceEnabled reports a test binary built with -race.
const raceEnabled = false
