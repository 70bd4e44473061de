package rocev2

import (
	"net/netip"

	"github.com/softrnic/softrnic/roce"
)

// UDQP is a placeholder for the UD transport (see doc.go).
type UDQP struct{}

func (e *Endpoint) inputUD(p roce.Packet, from netip.AddrPort, qpn uint32) {
	e.mu.RLock()
	gsi := e.gsi
	e.mu.RUnlock()
	if qpn == 1 && gsi != nil {
		gsi(&p, from)
		return
	}
	e.RxDropped.Add(1)
}
