package iwarp

import "time"

// spinState is a receive's busy-poll of its empty socket (rnic.Config.ReceiveSpin),
// part of readvState.
type spinState struct {
	spin time.Duration
	end  time.Time // the end of the current read's spin; zero before it spins
	c    *Conn     // its end stops a spin; its QP counts the spins
}

// start readies the spin for a new read.
func (s *spinState) start() { s.end = time.Time{} }

// spinning reports whether a read that found the socket empty reads it again: until spin
// has passed since the read first found it empty, and while the connection is not ending
// (a spinning read sees neither a closed socket nor a read deadline, which end a read
// waiting in the poller).
func (s *spinState) spinning() bool {
	if s.spin <= 0 {
		return false
	}
	if s.c.quitting() {
		return false
	}
	now := time.Now()
	if s.end.IsZero() {
		s.end = now.Add(s.spin)
	}
	if now.Before(s.end) {
		return true
	}
	s.count(false)
	return false
}

// got records that the read found data: a spin's hit when it had spun (end is set only
// by spinning).
func (s *spinState) got() {
	if !s.end.IsZero() {
		s.count(true)
	}
}

func (s *spinState) count(hit bool) {
	if qp := s.c.qp; qp != nil {
		qp.CountSpin(hit)
	}
}
