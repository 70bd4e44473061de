//go:build !race

package mpa

// raceEnabled: under the race detector sync.Pool drops pooled items at random and the
// instrumentation allocates, so allocation counts are checked without -race only.
const raceEnabled = false
