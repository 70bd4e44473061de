//go:build race

package bench

// raceEnabled: the race detector's instrumentation allocates on paths that otherwise do
// not, so allocation counts are not checked under it.
const raceEnabled = true
