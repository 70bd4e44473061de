package rocev2

import (
	"net/netip"
	"sync"

	"github.com/softrnic/softrnic/roce"
)

// madAttr returns the CM attribute of a packet if it is a CM MAD to QP1.
func madAttr(b []byte) (roce.AttrID, bool) {
	p, err := roce.ParsePacket(b)
	if err != nil || p.Opcode() != roce.UDSendOnly || p.BTH.DestQP() != 1 {
		return 0, false
	}
	h, _, err := roce.ParseMAD(p.Payload)
	if err != nil || !h.IsCM() {
		return 0, false
	}
	return h.AttrID, true
}

// madFaultLink drops or duplicates chosen CM MADs a link sends: the first Drop[a]
// MADs of attribute a are lost, the first Dup[a] are delivered twice. Sent counts
// every MAD by attribute.
type madFaultLink struct {
	Link
	mu   sync.Mutex
	Drop map[roce.AttrID]int
	Dup  map[roce.AttrID]int
	Sent map[roce.AttrID]int
}

func newMADFaults(drop, dup map[roce.AttrID]int) func(Link) Link {
	return func(l Link) Link {
		return &madFaultLink{Link: l, Drop: drop, Dup: dup, Sent: map[roce.AttrID]int{}}
	}
}

func (l *madFaultLink) sent(a roce.AttrID) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.Sent[a]
}

func (l *madFaultLink) Send(bufs [][]byte, dst netip.AddrPort) error {
	for _, b := range bufs {
		copies := 1
		if a, ok := madAttr(b); ok {
			l.mu.Lock()
			l.Sent[a]++
			switch {
			case l.Drop[a] > 0:
				l.Drop[a]--
				copies = 0
			case l.Dup[a] > 0:
				l.Dup[a]--
				copies = 2
			}
			l.mu.Unlock()
		}
		for range copies {
			if err := l.Link.Send([][]byte{b}, dst); err != nil {
				return err
			}
		}
	}
	return nil
}
