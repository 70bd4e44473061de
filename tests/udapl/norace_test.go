//go:build !race

package udapl

const raceEnabled = false
