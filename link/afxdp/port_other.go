//go:build !linux

package afxdp

import "net/netip"

// Port is the AF_XDP datapath on one netdev; it exists on Linux only.
type Port struct{}

// Tx is a transmit batch; it exists on Linux only.
type Tx struct{}

// Open returns ErrNotSupported: AF_XDP is Linux only.
func Open(o Options) (*Port, error) { return nil, ErrNotSupported }

func (p *Port) Steer(proto uint8, port uint16, r Receiver) error { return ErrNotSupported }
func (p *Port) Unsteer(proto uint8, port uint16)                 {}
func (p *Port) Release(f RxFrame)                                {}
func (p *Port) Neighbour(dst netip.Addr) ([6]byte, NeighState)   { return [6]byte{}, NeighFailed }
func (p *Port) Defer(dst netip.Addr, frame []byte) bool          { return false }
func (p *Port) Tx() *Tx                                          { return &Tx{} }
func (t *Tx) Next() []byte                                       { return nil }
func (t *Tx) NextLen(n int) []byte                               { return nil }
func (p *Port) FrameCap() int                                    { return 0 }
func (t *Tx) Queue(n int)                                        {}
func (t *Tx) QueueChecksum(n, start, offset int)                 {}
func (p *Port) TxChecksum() bool                                 { return false }
func (t *Tx) Done()                                              {}
func (p *Port) Addr() netip.Addr                                 { return netip.Addr{} }
func (p *Port) MAC() [6]byte                                     { return [6]byte{} }
func (p *Port) MTU() int                                         { return 0 }
func (p *Port) MaxFrame() int                                    { return 0 }
func (p *Port) MaxRxFrame() int                                  { return 0 }
func (p *Port) MultiBuffer() bool                                { return false }
func (p *Port) Mode() Mode                                       { return ModeAuto }
func (p *Port) ZeroCopy() bool                                   { return false }
func (p *Port) Queues() []int                                    { return nil }
func (p *Port) QueueRxPackets() []uint64                         { return nil }
func (p *Port) KeepLimit() int                                   { return 0 }
func (p *Port) Stats() Stats                                     { return Stats{} }
func (p *Port) Socket(domain, typ, proto int) (int, error)       { return -1, ErrNotSupported }
func (p *Port) Close() error                                     { return nil }
