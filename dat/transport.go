package dat

import (
	"errors"
	"fmt"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/iwarp"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

// The connection side of a provider (spec §6.4) is an rnic/cm Transport: listeners on
// connection qualifiers (TCP ports for iWARP, RDMA-CM ports for RoCEv2) and connection
// establishment for Endpoints. The provider's instance data names the network and the
// local address: "iwarp <ip>" or "rocev2 <ip>[:<udp port>]".

// openTransport attaches the IA's device to network at addr; iw and ro, if set, are the
// provider's iWARP and RoCEv2 configurations (Provider.IWARP, Provider.RoCE).
func openTransport(dev *rnic.Device, network, addr string, iw *iwarp.Config, ro *rocev2.Config) (*cm.Transport, error) {
	var o *cm.Options
	if network == cm.RoCEv2 && ro != nil {
		c := *ro
		o = &cm.Options{RoCE: &c}
	}
	if network == cm.IWARP {
		var cfg *iwarp.Config
		if iw != nil {
			c := *iw
			cfg = &c
		} else {
			cfg = iwarp.DefaultConfig()
			cfg.Extensions = true // RFC 7306 atomics and immediate data (dat↔dat)
		}
		o = &cm.Options{IWARP: cfg}
	}
	return cm.Open(dev, network, addr, o)
}

// connEvent maps a failed connect to the connection event it produces (spec §6.6.14)
// and the peer's private data of a rejection.
func connEvent(err error) (EventNumber, []byte) {
	var rej *cm.RejectError
	switch {
	case errors.As(err, &rej):
		return ConnectionEventPeerRejected, rej.PrivateData
	case errors.Is(err, cm.ErrUnreachable):
		return ConnectionEventUnreachable, nil
	case errors.Is(err, cm.ErrTimeout):
		return ConnectionEventTimedOut, nil
	}
	return ConnectionEventNonPeerRejected, nil // refused (no listener), or anything else
}

// withCause attaches the error that made a call fail to its DAT_RETURN: errors.Is and
// errors.As reach both (the DAT code for CodeOf, the cause for the caller).
func withCause(e Error, cause error) error {
	if cause == nil {
		return e
	}
	return fmt.Errorf("%w: %w", e, cause)
}
