//go:build linux

package netstack

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/softrnic/softrnic/link/afxdp"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

const ethLen = 14

// linkEndpoint is the gVisor link endpoint over an AF_XDP port: a layer-3
// endpoint to gVisor (it gives and takes IP packets) that adds and strips
// the Ethernet header itself. It is also the port's afxdp.Receiver for the
// stack's TCP ports.
type linkEndpoint struct {
	port *afxdp.Port
	mac  [6]byte
	mtu  atomic.Uint32

	mu         sync.RWMutex
	dispatcher stack.NetworkDispatcher

	dmu    sync.Mutex // dframe: frames for peers being resolved
	dframe []byte

	noNeigh, tooLong, partial atomic.Uint64
}

var _ stack.LinkEndpoint = (*linkEndpoint)(nil)

func newLinkEndpoint(p *afxdp.Port) *linkEndpoint {
	e := &linkEndpoint{port: p, mac: p.MAC(), dframe: make([]byte, afxdp.FrameSize)}
	// the largest packet both ways: what the port sends in one frame and
	// receives (gVisor advertises its MSS from this MTU)
	e.mtu.Store(uint32(min(p.MaxFrame(), p.MaxRxFrame()) - ethLen))
	return e
}

// Frame implements afxdp.Receiver: the checksums are verified (a partial TCP
// checksum completed, see csum.go), the IP packet is copied into a gVisor buffer and
// delivered at once.
func (e *linkEndpoint) Frame(f afxdp.RxFrame) bool {
	e.mu.RLock()
	d := e.dispatcher
	e.mu.RUnlock()
	if d == nil {
		return false
	}
	proto := header.IPv4ProtocolNumber
	if f.Data[f.L3]>>4 == 6 {
		proto = header.IPv6ProtocolNumber
	}
	ip := f.Data[f.L3:]
	cs := verifyTCP(ip, f.L4-f.L3)
	if cs == csumPartial {
		e.partial.Add(1)
	}
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(ip)})
	pkt.RXChecksumValidated = cs != csumBad // else gVisor verifies (and counts) it
	d.DeliverNetworkPacket(proto, pkt)
	pkt.DecRef()
	return false
}

// EndBatch implements afxdp.Receiver.
func (e *linkEndpoint) EndBatch() {}

// WritePackets implements stack.LinkWriter: each packet is copied behind
// an Ethernet header into a UMEM frame, or queued in the port while its
// next hop is resolved. Packets that cannot go are dropped and counted
// (TCP retransmits them).
func (e *linkEndpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	all := pkts.AsSlice()
	var t *afxdp.Tx
	for _, pkt := range all {
		dst, ok := netip.AddrFromSlice(pkt.EgressRoute.RemoteAddress.AsSlice())
		if !ok {
			e.noNeigh.Add(1)
			continue
		}
		if ethLen+pkt.Size() > e.port.MaxFrame() {
			e.tooLong.Add(1)
			continue
		}
		mac, st := e.port.Neighbour(dst)
		switch st {
		case afxdp.NeighFailed:
			e.noNeigh.Add(1)
		case afxdp.NeighPending:
			e.dmu.Lock()
			n, l4 := e.build(e.dframe, mac, pkt)
			if l4 > 0 {
				completeChecksum(e.dframe[:n], l4)
			}
			e.port.Defer(dst, e.dframe[:n])
			e.dmu.Unlock()
		case afxdp.NeighOK:
			if t == nil {
				t = e.port.Tx()
			}
			if f := t.Next(); f != nil {
				if n, l4 := e.build(f, mac, pkt); l4 > 0 {
					t.QueueChecksum(n, l4, 16) // the TCP checksum field
				} else {
					t.Queue(n)
				}
			}
		}
	}
	if t != nil {
		t.Done()
	}
	return len(all), nil
}

// build writes the Ethernet header and pkt into f and returns the length and,
// for a TCP segment, the offset of its header, whose checksum it leaves
// partial: the endpoint offers gVisor transmit checksum offload, and the port
// completes the checksum (afxdp.Tx.QueueChecksum).
func (e *linkEndpoint) build(f []byte, mac [6]byte, pkt *stack.PacketBuffer) (n, l4 int) {
	copy(f[0:6], mac[:])
	copy(f[6:12], e.mac[:])
	et := uint16(header.IPv4ProtocolNumber)
	if pkt.NetworkProtocolNumber == header.IPv6ProtocolNumber {
		et = uint16(header.IPv6ProtocolNumber)
	}
	f[12], f[13] = byte(et>>8), byte(et)
	n = ethLen
	vl, off := pkt.AsViewList()
	for v := vl.Front(); v != nil; v = v.Next() {
		b := v.AsSlice()
		if off >= len(b) {
			off -= len(b)
			continue
		}
		n += copy(f[n:], b[off:])
		off = 0
	}
	if pkt.TransportProtocolNumber != header.TCPProtocolNumber {
		return n, 0
	}
	l4 = ethLen + len(pkt.NetworkHeader().Slice())
	if l4+header.TCPMinimumSize > n {
		return n, 0
	}
	ip := f[ethLen:n]
	binary.BigEndian.PutUint16(f[l4+16:], pseudoSum(ip, et == uint16(header.IPv6ProtocolNumber), n-l4))
	return n, l4
}

// completeChecksum fills in the TCP checksum of frame, whose field holds the
// pseudo-header sum.
func completeChecksum(frame []byte, l4 int) {
	binary.BigEndian.PutUint16(frame[l4+16:], ^checksum.Checksum(frame[l4:], 0))
}

func (e *linkEndpoint) MTU() uint32                      { return e.mtu.Load() }
func (e *linkEndpoint) SetMTU(mtu uint32)                { e.mtu.Store(mtu) }
func (e *linkEndpoint) MaxHeaderLength() uint16          { return 0 }
func (e *linkEndpoint) LinkAddress() tcpip.LinkAddress   { return "" }
func (e *linkEndpoint) SetLinkAddress(tcpip.LinkAddress) {}
func (e *linkEndpoint) Capabilities() stack.LinkEndpointCapabilities {
	return stack.CapabilityTXChecksumOffload // the port completes TCP checksums (build)
}
func (e *linkEndpoint) Wait()                                   {}
func (e *linkEndpoint) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }
func (e *linkEndpoint) AddHeader(*stack.PacketBuffer)           {}
func (e *linkEndpoint) ParseHeader(*stack.PacketBuffer) bool    { return true }
func (e *linkEndpoint) Close()                                  {}
func (e *linkEndpoint) SetOnCloseAction(func())                 {}

func (e *linkEndpoint) Attach(d stack.NetworkDispatcher) {
	e.mu.Lock()
	e.dispatcher = d
	e.mu.Unlock()
}

func (e *linkEndpoint) IsAttached() bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.dispatcher != nil
}
