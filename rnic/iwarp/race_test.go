//go:build race

package iwarp

// raceEnabled: the race detector's instrumentation allocates on paths that otherwise do
// not, so allocation counts are checked only without it.
const raceEnabled = true
