//go:build linux

package netdev

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Inspect reads what the netdev called name offers, in the calling
// thread's network namespace. What cannot be read is recorded in
// Info.Errors rather than failing the whole: only a missing netdev is an
// error.
func Inspect(name string) (*Info, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("netdev %q: %w", name, err)
	}
	a := l.Attrs()
	in := &Info{Name: a.Name, Index: a.Index, MTU: a.MTU, MAC: a.HardwareAddr.String(),
		Ether: a.EncapType == "ether" && len(a.HardwareAddr) == 6, OperUp: a.OperState == netlink.OperUp || a.Flags&unix.IFF_UP != 0 && a.OperState == netlink.OperUnknown,
		RxQueues: a.NumRxQueues, TxQueues: a.NumTxQueues, Combined: -1, RxChannels: -1, TxChannels: -1}
	in.Kernel, in.TxMetadata = kernelRelease()
	if a.Xdp != nil && a.Xdp.Attached {
		in.XDPProgID = a.Xdp.ProgId
		// XDP_ATTACHED_* (include/uapi/linux/if_link.h)
		in.XDPProgMode = map[uint32]string{1: "driver", 2: "generic", 3: "offload", 4: "multi"}[a.Xdp.AttachMode]
	}
	fail := func(what string, err error) { in.Errors = append(in.Errors, fmt.Sprintf("%s: %v", what, err)) }
	if et, err := ethtool.NewEthtool(); err != nil {
		fail("ethtool", err)
	} else {
		defer et.Close()
		if d, err := et.DriverName(name); err == nil {
			in.Driver = d
		} else if !errors.Is(err, unix.EOPNOTSUPP) {
			fail("ethtool driver", err)
		}
		if fs, err := et.FeaturesWithState(name); err != nil {
			fail("ethtool features", err)
		} else {
			in.Features = make(map[string]Feature, len(fs))
			for k, v := range fs {
				in.Features[k] = Feature{Available: v.Available, Requested: v.Requested, Active: v.Active, Fixed: v.NeverChanged}
			}
		}
		if ch, err := et.GetChannels(name); err == nil {
			in.Combined, in.RxChannels, in.TxChannels = int(ch.CombinedCount), int(ch.RxCount), int(ch.TxCount)
		} else if !errors.Is(err, unix.EOPNOTSUPP) {
			fail("ethtool channels", err)
		}
	}
	raw, err := QueryXDP(a.Index)
	switch {
	case errors.Is(err, ErrNoNetdevFamily):
		in.XDP.Source = "unknown"
		fail("xdp", err)
	case err != nil:
		in.XDP.Source = "unknown"
		fail("netdev genetlink", err)
	default:
		if _, in.XDP, err = decodeDevGet(raw); err != nil {
			in.XDP.Source = "unknown"
			fail("netdev genetlink", err)
		}
	}
	return in, nil
}

// ErrNoNetdevFamily is returned by QueryXDP on kernels without the netdev
// generic netlink family (before 6.3): use Probe.
var ErrNoNetdevFamily = errors.New("netdev: the kernel has no netdev generic netlink family (Linux < 6.3); XDP capabilities need a probe")

// QueryXDP asks the netdev generic netlink family about ifindex and returns
// the answer as received (genlmsghdr and attributes), for decodeDevGet and
// for recording.
func QueryXDP(ifindex int) ([]byte, error) {
	fam, err := netlink.GenlFamilyGet(netdevFamilyName)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, ErrNoNetdevFamily
		}
		return nil, fmt.Errorf("netdev family: %w", err)
	}
	req := nl.NewNetlinkRequest(int(fam.ID), 0)
	req.AddData(genlHeader{netdevCmdDevGet, netdevFamilyVersion})
	idx := make([]byte, 4)
	binary.NativeEndian.PutUint32(idx, uint32(ifindex))
	req.AddData(nl.NewRtAttr(attrDevIfindex, idx))
	msgs, err := req.Execute(unix.NETLINK_GENERIC, 0)
	if err != nil {
		return nil, fmt.Errorf("NETDEV_CMD_DEV_GET: %w", err)
	}
	if len(msgs) != 1 {
		return nil, fmt.Errorf("NETDEV_CMD_DEV_GET: %d answers", len(msgs))
	}
	return msgs[0], nil
}

// genlHeader is struct genlmsghdr with its reserved field zero (the
// netdev family validates strictly; nl.Genlmsg leaves it unset).
type genlHeader struct{ cmd, version uint8 }

func (h genlHeader) Len() int { return genlHeaderLen }

func (h genlHeader) Serialize() []byte { return []byte{h.cmd, h.version, 0, 0} }

// kernelRelease returns the running kernel's release and whether it is 6.11 or
// later (AF_XDP TX metadata with XDP_UMEM_TX_METADATA_LEN).
func kernelRelease() (string, bool) {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return "", false
	}
	rel := unix.ByteSliceToString(u.Release[:])
	return rel, releaseAtLeast(rel, 6, 11)
}
