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
// an Ethernet header into UMEM frames — a GSO packet (up to GSOMaxSize bytes of
// TCP payload, see SupportedGSO) cut into segments of its MSS on the way, the
// software TSO of this link — or queued in the port while its next hop is
// resolved. Packets that cannot go are dropped and counted (TCP retransmits
// them).
func (e *linkEndpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	all := pkts.AsSlice()
	var t *afxdp.Tx
	for _, pkt := range all {
		dst, ok := netip.AddrFromSlice(pkt.EgressRoute.RemoteAddress.AsSlice())
		if !ok {
			e.noNeigh.Add(1)
			continue
		}
		g := cut(pkt)
		if ethLen+g.hdr+g.mss > e.port.MaxFrame() {
			e.tooLong.Add(1)
			continue
		}
		mac, st := e.port.Neighbour(dst)
		switch st {
		case afxdp.NeighFailed:
			e.noNeigh.Add(1)
		case afxdp.NeighPending:
			e.dmu.Lock()
			for i := range g.count {
				n, l4 := e.build(e.dframe, mac, pkt, g, i)
				if l4 > 0 {
					completeChecksum(e.dframe[:n], l4)
				}
				e.port.Defer(dst, e.dframe[:n])
			}
			e.dmu.Unlock()
		case afxdp.NeighOK:
			if t == nil {
				t = e.port.Tx()
			}
			for i := range g.count {
				f := t.NextLen(ethLen + g.hdr + min(g.mss, g.payload-i*g.mss))
				if f == nil {
					break // no frame free: dropped (counted by the port)
				}
				if n, l4 := e.build(f, mac, pkt, g, i); l4 > 0 {
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

// segments says how a packet is cut: hdr bytes of IP and TCP headers, then count
// segments of at most mss payload bytes (one segment of the whole packet unless it
// is a TCP GSO packet longer than its MSS).
type segments struct {
	hdr, mss, payload, count int
	tcp, gso                 bool
}

func cut(pkt *stack.PacketBuffer) segments {
	g := segments{tcp: pkt.TransportProtocolNumber == header.TCPProtocolNumber}
	if !g.tcp {
		g.mss, g.count = pkt.Size(), 1
		return g
	}
	g.hdr = len(pkt.NetworkHeader().Slice()) + len(pkt.TransportHeader().Slice())
	g.payload = pkt.Data().Size()
	g.mss, g.count = g.payload, 1
	o := pkt.GSOOptions
	if (o.Type == stack.GSOTCPv4 || o.Type == stack.GSOTCPv6) && o.MSS > 0 && g.payload > int(o.MSS) {
		g.gso, g.mss = true, int(o.MSS)
		g.count = (g.payload + g.mss - 1) / g.mss
	}
	return g
}

// build writes the Ethernet header and segment i of pkt into f and returns the
// length and, for TCP, the offset of its header, whose checksum it leaves partial:
// the endpoint offers gVisor transmit checksum offload, and the port completes the
// checksum (afxdp.Tx.QueueChecksum). A GSO packet's segments get their own IP
// length (and IPv4 ID and header checksum) and TCP sequence number; FIN and PSH go
// on the last segment only, CWR on the first (RFC 3168 §6.1.2's TSO rule).
func (e *linkEndpoint) build(f []byte, mac [6]byte, pkt *stack.PacketBuffer, g segments, i int) (n, l4 int) {
	copy(f[0:6], mac[:])
	copy(f[6:12], e.mac[:])
	et := uint16(header.IPv4ProtocolNumber)
	v6 := pkt.NetworkProtocolNumber == header.IPv6ProtocolNumber
	if v6 {
		et = uint16(header.IPv6ProtocolNumber)
	}
	f[12], f[13] = byte(et>>8), byte(et)
	if !g.tcp {
		return ethLen + copyFrom(f[ethLen:ethLen+g.mss], pkt, 0), 0
	}
	off := i * g.mss
	seg := min(g.mss, g.payload-off)
	n = ethLen + copyFrom(f[ethLen:ethLen+g.hdr], pkt, 0)
	n += copyFrom(f[n:n+seg], pkt, g.hdr+off)
	l3 := len(pkt.NetworkHeader().Slice())
	l4 = ethLen + l3
	if l4+header.TCPMinimumSize > n {
		return n, 0
	}
	ip := f[ethLen:n]
	if g.gso {
		if v6 {
			binary.BigEndian.PutUint16(ip[4:], uint16(n-l4))
		} else {
			binary.BigEndian.PutUint16(ip[2:], uint16(n-ethLen))
			binary.BigEndian.PutUint16(ip[4:], binary.BigEndian.Uint16(ip[4:])+uint16(i))
			ip[10], ip[11] = 0, 0
			binary.BigEndian.PutUint16(ip[10:], ^checksum.Checksum(ip[:l3], 0))
		}
		tcp := f[l4:n]
		binary.BigEndian.PutUint32(tcp[4:], binary.BigEndian.Uint32(tcp[4:])+uint32(off))
		if i != g.count-1 {
			tcp[13] &^= byte(header.TCPFlagFin | header.TCPFlagPsh)
		}
		if i != 0 {
			tcp[13] &^= byte(header.TCPFlagCwr)
		}
	}
	binary.BigEndian.PutUint16(f[l4+16:], pseudoSum(ip, v6, n-l4))
	return n, l4
}

// copyFrom copies len(dst) bytes of pkt (from its network header on) starting at
// pos into dst and returns the count.
func copyFrom(dst []byte, pkt *stack.PacketBuffer, pos int) int {
	vl, off := pkt.AsViewList()
	pos += off
	n := 0
	for v := vl.Front(); v != nil && n < len(dst); v = v.Next() {
		b := v.AsSlice()
		if pos >= len(b) {
			pos -= len(b)
			continue
		}
		n += copy(dst[n:], b[pos:])
		pos = 0
	}
	return n
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

// GSOMaxSize implements stack.GSOEndpoint: gVisor's TCP hands over packets of
// up to 64 KiB, which WritePackets cuts into segments.
func (e *linkEndpoint) GSOMaxSize() uint32 { return gsoMaxSize }

// SupportedGSO implements stack.GSOEndpoint: "host" GSO, the link segments (as a
// NIC's TSO would), so gVisor's TCP processes a 64 KiB packet where it would
// process 45 segments.
func (e *linkEndpoint) SupportedGSO() stack.SupportedGSO { return stack.HostGSOSupported }

// gsoMaxSize is the largest packet gVisor hands the link with GSO.
const gsoMaxSize = 1 << 16

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
