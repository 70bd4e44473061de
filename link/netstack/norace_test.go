//go:build !race

package netstack

// raceEnabled: the race detector's instrumentation allocates.
const raceEnabled = false
