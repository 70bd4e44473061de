//go:build !linux

package netdev

// Inspect returns ErrNotSupported: netdev inspection is Linux only.
func Inspect(name string) (*Info, error) { return nil, ErrNotSupported }

// Probe returns ErrNotSupported: netdev inspection is Linux only.
func Probe(name string) (XDPCaps, error) { return XDPCaps{}, ErrNotSupported }
