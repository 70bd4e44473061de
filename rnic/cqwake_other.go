//go:build !linux

package rnic

// pollWaker is the Linux eventfd of CQ.Wait (cqwake_linux.go); elsewhere Wait blocks on
// the CQ's channel.
type pollWaker struct{}

func newPollWaker() *pollWaker   { return nil }
func (w *pollWaker) arm()        {}
func (w *pollWaker) wait() error { return nil }
func (w *pollWaker) signal()     {}
func (w *pollWaker) close()      {}
