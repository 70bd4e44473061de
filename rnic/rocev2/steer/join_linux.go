//go:build linux

package steer

import (
	"fmt"
	"os"

	"github.com/softrnic/softrnic/rnic/rocev2"
)

// Join makes the process's rocev2.Link of the descriptors the daemon's
// Steerer.Add made for it, in Add's order: one UDP socket in the group
// (ModeBPF, a rocev2.UDPLink) or the relay socket and a UDP send socket
// (ModeRelay, a *RelayLink). With nil options the link sends with UDP GSO
// (rocev2.ListenUDP's automatic choice); UDP GRO is never enabled (see the
// package doc). The link works on duplicates: the caller closes files.
func Join(files []*os.File, o *rocev2.UDPOptions) (rocev2.Link, error) {
	opt := rocev2.UDPOptions{GSO: true}
	if o != nil {
		opt = *o
	}
	opt.GRO = false
	switch len(files) {
	case 1:
		return rocev2.NewUDPLinkFile(files[0], &opt)
	case 2:
		return NewRelayLink(files[0], files[1], &opt)
	}
	return nil, fmt.Errorf("steer: Join takes 1 or 2 descriptors, got %d", len(files))
}
