//go:build !linux

package pollwake

import "time"

// Supported reports whether New can return a Waker on this system.
const Supported = false

// Waker is the Linux eventfd wake-up; elsewhere New returns nil.
type Waker struct{}

func New() *Waker                     { return nil }
func (w *Waker) Arm()                 {}
func (w *Waker) Wait(time.Time) error { return nil }
func (w *Waker) Signal()              {}
func (w *Waker) Close()               {}
