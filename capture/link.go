package capture

import (
	"net/netip"

	"github.com/softrnic/softrnic/rnic/rocev2"
)

// WrapLink returns a rocev2.Link that records every datagram l sends and
// receives (interface "roce", synthetic headers). The transport needs no
// change: hand the wrapper to rocev2.NewEndpoint instead of l.
func WrapLink(l rocev2.Link, w *Writer) rocev2.Link { return &link{Link: l, w: w} }

type link struct {
	rocev2.Link
	w *Writer
}

// Send implements rocev2.Link: what the link accepted is recorded.
func (l *link) Send(bufs [][]byte, dst netip.AddrPort) error {
	err := l.Link.Send(bufs, dst)
	if err == nil {
		src := l.LocalAddr()
		for _, b := range bufs {
			l.w.udp(IfaceRoCE, src, dst, b)
		}
	}
	return err
}

// Recv implements rocev2.Link.
func (l *link) Recv(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error) {
	n, err := l.Link.Recv(bufs, sizes, from)
	dst := l.LocalAddr()
	for i := range n {
		l.w.udp(IfaceRoCE, from[i], dst, bufs[i][:sizes[i]])
	}
	return n, err
}
