package netdev

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Attributes of the netdev family's dev object (include/uapi/linux/netdev.h).
const (
	attrDevIfindex       = 1
	attrDevPad           = 2
	attrDevXDPFeatures   = 3
	attrDevXDPZCMaxSegs  = 4
	attrDevXDPRxMetadata = 5
	attrDevXSKFeatures   = 6
	genlHeaderLen        = 4 // struct genlmsghdr
	netdevCmdDevGet      = 1
	netdevFamilyName     = "netdev"
	netdevFamilyVersion  = 1
)

// ErrShortAttr is returned for a malformed netlink attribute.
var ErrShortAttr = errors.New("netdev: malformed netlink attribute")

// decodeDevGet decodes one NETDEV_CMD_DEV_GET answer: the generic netlink
// message after its nlmsghdr (genlmsghdr, then attributes). Unknown
// attributes are skipped, so answers from newer kernels decode too.
func decodeDevGet(msg []byte) (ifindex uint32, c XDPCaps, err error) {
	if len(msg) < genlHeaderLen {
		return 0, c, fmt.Errorf("%w: %d-byte message", ErrShortAttr, len(msg))
	}
	c.Source = "netdev-genl"
	b := msg[genlHeaderLen:]
	for len(b) > 0 {
		if len(b) < 4 {
			return 0, c, fmt.Errorf("%w: %d trailing bytes", ErrShortAttr, len(b))
		}
		n := int(binary.NativeEndian.Uint16(b))
		typ := binary.NativeEndian.Uint16(b[2:]) & 0x3FFF // NLA_TYPE_MASK
		if n < 4 || n > len(b) {
			return 0, c, fmt.Errorf("%w: length %d of %d", ErrShortAttr, n, len(b))
		}
		v := b[4:n]
		switch typ {
		case attrDevIfindex:
			if len(v) != 4 {
				return 0, c, fmt.Errorf("%w: ifindex of %d bytes", ErrShortAttr, len(v))
			}
			ifindex = binary.NativeEndian.Uint32(v)
		case attrDevXDPFeatures, attrDevXDPRxMetadata, attrDevXSKFeatures:
			if len(v) != 8 {
				return 0, c, fmt.Errorf("%w: attribute %d of %d bytes", ErrShortAttr, typ, len(v))
			}
			x := binary.NativeEndian.Uint64(v)
			switch typ {
			case attrDevXDPFeatures:
				c.Features = x
			case attrDevXDPRxMetadata:
				c.RxMetadata = x
			default:
				c.XSK, c.KernelSG = x, true // xsk-features: Linux 6.8
			}
		case attrDevXDPZCMaxSegs:
			if len(v) != 4 {
				return 0, c, fmt.Errorf("%w: zc-max-segs of %d bytes", ErrShortAttr, len(v))
			}
			c.ZCMaxSegs, c.KernelSG = binary.NativeEndian.Uint32(v), true // Linux 6.6
		}
		b = b[min(len(b), (n+3)&^3):]
	}
	return ifindex, c, nil
}

// xdpFeatureNames names the xdp-features bits as the kernel's netlink spec
// does.
var xdpFeatureNames = []string{"basic", "redirect", "ndo-xmit", "xsk-zerocopy", "hw-offload", "rx-sg", "ndo-xmit-sg"}

var xskFeatureNames = []string{"tx-timestamp", "tx-checksum", "tx-launch-time-fifo"}

var rxMetaNames = []string{"timestamp", "hash", "vlan-tag"}

// bitNames lists the names of the set bits of v ("-" when none).
func bitNames(v uint64, names []string) string {
	s := ""
	for i := 0; i < 64; i++ {
		if v&(1<<i) == 0 {
			continue
		}
		name := fmt.Sprintf("bit%d", i)
		if i < len(names) {
			name = names[i]
		}
		if s != "" {
			s += " "
		}
		s += name
	}
	if s == "" {
		return "-"
	}
	return s
}
