//go:build !linux

package rocev2

import "time"

// connWake is the Linux eventfd of Conn.park (connwake_linux.go); elsewhere a
// connection waits on its channel.
type connWake struct{}

const haveConnWake = false

func newConnWake() *connWake       { return nil }
func (w *connWake) arm()           {}
func (w *connWake) signal()        {}
func (w *connWake) wait(time.Time) {}
func (w *connWake) close()         {}
