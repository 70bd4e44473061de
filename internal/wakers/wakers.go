// Package wakers holds the goroutines waiting for a receive that another goroutine runs
// (rnic.ReceiveDriver), for the transports that let a CQ's waiter run their receive:
// iwarp (one connection's receive) and rocev2 (an endpoint's, while one connection uses
// it).
package wakers

import "github.com/softrnic/softrnic/rnic"

// List is the callers waiting for the receive: each distinct rnic.Waker once. A QP has at
// most three (its send CQ's, its receive CQ's and QP.DriveReceive's), and a transport
// lets only one QP's callers wait for a receive, so three places suffice.
type List struct {
	w [3]rnic.Waker
	n int
}

// Add records w unless it is there; false when the list is full (a caller beyond the
// three), which the caller then wakes at once to ask again.
func (l *List) Add(w rnic.Waker) bool {
	for _, x := range l.w[:l.n] {
		if x == w {
			return true
		}
	}
	if l.n == len(l.w) {
		return false
	}
	l.w[l.n] = w
	l.n++
	return true
}

// Take empties the list, returning what it held.
func (l *List) Take() List {
	t := *l
	*l = List{}
	return t
}

// Wake wakes every Waker of the list.
func (l *List) Wake() {
	for _, w := range l.w[:l.n] {
		w.Wake()
	}
}
