package dat

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"github.com/softrnic/softrnic/host"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

// IA is an open Interface Adapter instance (spec §6.2.1): the root of every
// other DAT object. Each IA owns one softrnic engine device and one
// transport (connection manager) chosen by its provider's instance data.
type IA struct {
	object
	reg  *Registry
	prov *Provider
	name string

	dev   *rnic.Device
	tr    *cm.Transport
	host  *host.Device // "rocev2 @<device>": attached to the daemon's device
	local net.IP
	// udpPort is the RoCEv2 UDP port of the instance data (0: default)
	udpPort int

	mu        sync.Mutex
	objs      map[Handle]struct{}
	closedCh  chan struct{}
	asyncEVD  *EVD
	ownAsync  bool
	eps       map[uint32]*EP // by QP number
	nullCQ    *rnic.CQ
	nullMu    sync.Mutex
	nullDrain cqDrain
	srqs      map[*rnic.SRQ]*SRQ
	psps      map[ConnQual]*PSP
	ctx       context.Context
	cancel    context.CancelFunc
	lmrMu     sync.RWMutex
	lmrs      map[uint32]*LMR // by lmr_context
	wg        sync.WaitGroup  // IA goroutines (event pump, connection handlers)
}

// HandleType implements Handle.
func (ia *IA) HandleType() HandleType { return HandleTypeIA }
func (ia *IA) base() *object {
	if ia == nil {
		return nil
	}
	return &ia.object
}

// OpenIA is dat_ia_open on DefaultRegistry.
func OpenIA(name string, asyncQLen int, asyncEVD *EVD) (*IA, *EVD, error) {
	return DefaultRegistry.OpenIA(name, asyncQLen, asyncEVD)
}

// OpenIAv is dat_ia_openv (spec §8.3.3): OpenIA for a provider of DAT API
// version major.minor (or a later minor) and, when threadSafe is set, a
// thread-safe library. A mismatch is DAT_PROVIDER_NOT_FOUND with subtype
// DAT_MAJOR_NOT_FOUND, DAT_MINOR_NOT_FOUND or DAT_THREAD_SAFETY_NOT_FOUND.
func (r *Registry) OpenIAv(name string, asyncQLen int, asyncEVD *EVD, major, minor uint32, threadSafe bool) (*IA, *EVD, error) {
	p := r.Lookup(name)
	switch {
	case p == nil:
		return nil, nil, ErrNameNotRegistered
	case p.Info.VersionMajor != major:
		return nil, nil, ErrMajorNotFound
	case p.Info.VersionMinor < minor:
		return nil, nil, ErrMinorNotFound
	case threadSafe && !p.Info.ThreadSafe:
		return nil, nil, ErrThreadSafetyNotFound
	}
	return r.OpenIA(name, asyncQLen, asyncEVD)
}

// OpenIAv is Registry.OpenIAv on DefaultRegistry.
func OpenIAv(name string, asyncQLen int, asyncEVD *EVD, major, minor uint32, threadSafe bool) (*IA, *EVD, error) {
	return DefaultRegistry.OpenIAv(name, asyncQLen, asyncEVD, major, minor, threadSafe)
}

// OpenIA is dat_ia_open (spec §6.2.1.1). With asyncEVD nil the provider
// creates the asynchronous EVD with asyncQLen entries and returns it;
// otherwise asyncEVD (an async EVD of the same provider) receives this IA's
// asynchronous events too.
func (r *Registry) OpenIA(name string, asyncQLen int, asyncEVD *EVD) (*IA, *EVD, error) {
	if asyncEVD == nil && (asyncQLen <= 0 || asyncQLen > maxEVDQLen) {
		return nil, nil, invalidArg(2)
	}
	if asyncEVD != nil && (!alive(asyncEVD) || asyncEVD.flags&EVDAsync == 0 || !alive(asyncEVD.ia) ||
		asyncEVD.ia.prov.Info.Name != name) {
		return nil, nil, ErrInvalidHandleEVDAsync
	}
	p, err := r.acquire(name)
	if err != nil {
		return nil, nil, err
	}
	kind, addr, _ := strings.Cut(strings.TrimSpace(p.InstanceData), " ")
	addr = strings.TrimSpace(addr)
	if devName, ok := strings.CutPrefix(addr, "@"); ok && kind == cm.RoCEv2 {
		return r.openAttached(p, name, devName, asyncQLen, asyncEVD)
	}
	if addr == "" {
		addr = "127.0.0.1"
	}
	// "<ip>" or "<ip>:<port>" (the port is the RoCEv2 UDP port)
	var port int
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		addr, port = ap.Addr().String(), int(ap.Port())
	}
	local := net.ParseIP(addr)
	if local == nil {
		r.release(p)
		return nil, nil, invalidArg(1)
	}
	ia := r.newIA(p, name, local, port)
	if kind != cm.IWARP && kind != cm.RoCEv2 {
		r.release(p)
		return nil, nil, ErrCommNotSupported
	}
	dev, err := rnic.Open(rnic.Config{Name: name, LocalAddr: addr})
	if err != nil {
		r.release(p)
		return nil, nil, withCause(ErrResourceDevice, err)
	}
	ia.dev = dev
	taddr := addr
	if port != 0 {
		taddr = net.JoinHostPort(addr, strconv.Itoa(port))
	}
	ia.tr, err = openTransport(dev, kind, taddr, p.IWARP, p.RoCE)
	if err != nil {
		dev.Close()
		r.release(p)
		return nil, nil, withCause(ErrResourceDevice, err)
	}
	return ia.start(asyncQLen, asyncEVD)
}

// newIA makes an IA of provider p named name on local (its RoCEv2 UDP port, 0: default).
func (r *Registry) newIA(p *Provider, name string, local net.IP, port int) *IA {
	ia := &IA{reg: r, prov: p, name: name, local: local, udpPort: port, objs: make(map[Handle]struct{}),
		closedCh: make(chan struct{}), eps: make(map[uint32]*EP), lmrs: make(map[uint32]*LMR),
		srqs: make(map[*rnic.SRQ]*SRQ), psps: make(map[ConnQual]*PSP)}
	ia.ctx, ia.cancel = context.WithCancel(context.Background())
	ia.ia = ia
	return ia
}

// openAttached opens an IA on device devName of the running softrnic daemon (dat.conf
// instance data "rocev2 @softrnic0", package host): the daemon's RoCEv2 address, shared
// with every process attached to it. No daemon: DAT_INSUFFICIENT_RESOURCES /
// DAT_RESOURCE_DEVICE wrapping host.ErrNoDaemon.
func (r *Registry) openAttached(p *Provider, name, devName string, asyncQLen int, asyncEVD *EVD) (*IA, *EVD, error) {
	var ro *rocev2.Config
	if p.RoCE != nil {
		c := *p.RoCE
		ro = &c
	}
	d, err := host.Open(devName, &host.Options{RoCE: ro})
	if err != nil {
		r.release(p)
		return nil, nil, withCause(ErrResourceDevice, err)
	}
	ap := d.Addr()
	ia := r.newIA(p, name, net.IP(ap.Addr().AsSlice()), int(ap.Port()))
	ia.host, ia.dev, ia.tr = d, d.RNIC(), d.Transport()
	return ia.start(asyncQLen, asyncEVD)
}

// start gives the IA its asynchronous EVD and starts its event pump.
func (ia *IA) start(asyncQLen int, asyncEVD *EVD) (*IA, *EVD, error) {
	if asyncEVD == nil {
		asyncEVD = newEVD(ia, asyncQLen, EVDAsync)
		asyncEVD.isAsync = true
		ia.ownAsync = true
	}
	ia.asyncEVD = asyncEVD
	ia.wg.Add(1)
	go ia.eventPump()
	return ia, asyncEVD, nil
}

// Close is dat_ia_close (spec §6.2.1.2). CloseGraceful fails with
// DAT_INVALID_STATE while Consumer-created objects exist; CloseAbrupt
// destroys them all (waiters are released: EVD waiters get DAT_ABORT, CNO
// waiters a nil EVD).
func (ia *IA) Close(flags CloseFlags) error {
	if !alive(ia) {
		return ErrInvalidHandleIA
	}
	if flags != CloseAbrupt && flags != CloseGraceful {
		return invalidArg(2)
	}
	ia.mu.Lock()
	if flags == CloseGraceful && len(ia.objs) > 0 {
		ia.mu.Unlock()
		return ErrInvalidStateIAInUse
	}
	ia.cancel()
	objs := make([]Handle, 0, len(ia.objs))
	for h := range ia.objs {
		objs = append(objs, h)
	}
	ia.objs = map[Handle]struct{}{}
	ia.mu.Unlock()
	// phased cascade: service points and requests, endpoints, memory,
	// queues, then event objects
	for _, phase := range [][]HandleType{
		{HandleTypePSP, HandleTypeRSP, HandleTypeCSP, HandleTypeCR},
		{HandleTypeEP},
		{HandleTypeRMR}, {HandleTypeLMR}, {HandleTypeSRQ}, {HandleTypePZ},
		{HandleTypeEVD}, {HandleTypeCNO},
	} {
		for _, h := range objs {
			for _, t := range phase {
				if h.HandleType() == t {
					destroyObject(h)
				}
			}
		}
	}
	ia.dead.Store(true)
	close(ia.closedCh)
	if ia.host != nil {
		_ = ia.host.Close() // its transport and device, and the attachment
	} else {
		if ia.tr != nil {
			_ = ia.tr.Close()
		}
		ia.dev.Close()
	}
	ia.wg.Wait()
	if ia.ownAsync {
		ia.asyncEVD.destroy()
	}
	ia.reg.release(ia.prov)
	return nil
}

type destroyer interface{ destroy() }

func destroyObject(h Handle) {
	if d, ok := h.(destroyer); ok {
		d.destroy()
	}
}

func (ia *IA) register(h Handle) error {
	ia.mu.Lock()
	defer ia.mu.Unlock()
	if ia.dead.Load() {
		return ErrInvalidHandleIA
	}
	ia.objs[h] = struct{}{}
	return nil
}

func (ia *IA) unregister(h Handle) {
	ia.mu.Lock()
	delete(ia.objs, h)
	ia.mu.Unlock()
}

// asyncEvent posts an asynchronous event on the IA's async EVD.
func (ia *IA) asyncEvent(n EventNumber, h Handle, reason int) {
	if ia == nil || ia.asyncEVD == nil {
		return
	}
	_ = ia.asyncEVD.post(Event{Number: n, Async: AsyncError{Handle: h, Reason: reason}}, true)
}

// IAAttr is DAT_IA_ATTR (spec §6.2.1.3).
type IAAttr struct {
	AdapterName              string
	VendorName               string
	HardwareMajor            uint32
	HardwareMinor            uint32
	FirmwareMajor            uint32
	FirmwareMinor            uint32
	Address                  net.Addr
	MaxEPs                   int
	MaxDTOPerEP              int
	MaxRDMAReadPerEPIn       int
	MaxRDMAReadPerEPOut      int
	MaxEVDs                  int
	MaxEVDQLen               int
	MaxIOVSegmentsPerDTO     int
	MaxLMRs                  int
	MaxLMRBlockSize          uint64
	MaxLMRVirtualAddress     uint64
	MaxPZs                   int
	MaxMessageSize           uint64
	MaxRDMASize              uint64
	MaxRMRs                  int
	MaxRMRTargetAddress      uint64
	MaxSRQs                  int
	MaxEPPerSRQ              int
	MaxRecvPerSRQ            int
	MaxIOVSegmentsRDMARead   int
	MaxIOVSegmentsRDMAWrite  int
	MaxRDMAReadIn            int
	MaxRDMAReadOut           int
	MaxRDMAReadInGuaranteed  bool
	MaxRDMAReadOutGuaranteed bool
	ZBSupported              bool
	Extension                string // DAT_EXTENSION: "IB" (RoCEv2 IA), "iWARP" (iWARP IA) or "" (none)
	ExtensionVersion         int
}

// ProviderAttr is DAT_PROVIDER_ATTR (spec §6.2.1.4), the subset meaningful
// for this provider.
type ProviderAttr struct {
	ProviderName                  string
	ProviderVersionMajor          uint32
	ProviderVersionMinor          uint32
	DAPLVersionMajor              uint32
	DAPLVersionMinor              uint32
	LMRMemTypes                   []MemType
	QoS                           QoS
	CompletionFlags               CompletionFlags
	ThreadSafe                    bool
	MaxPrivateDataSize            int
	SupportsMultipath             bool
	EPCreator                     string // "DAT_PSP_CREATES_EP_IFASKED"
	OptimalBufferAlignment        int
	EVDStreamMergingAll           bool
	SRQSupported                  bool
	SRQWatermarksSupported        int // 0x001: SRQ low watermark
	SRQPZDifferenceSupport        bool
	SRQInfoSupported              int // 0x01 available, 0x10 outstanding
	EPRecvInfoSupported           int // 0x01 nbufs_allocated, 0x10 bufs_alloc_span
	LMRSyncRequired               bool
	DTOAsyncReturnGuarantee       bool
	RDMAWriteForRDMARead          bool
	RDMAReadLMRRMRContextExposure bool
	RMRScopes                     []RMRScope
	HASupported                   bool
}

// MaxPrivateData is the largest Consumer private data an iWARP IA exchanges
// on connection establishment: the Linux siw cap on MPA private data (256;
// RFC 5044 §7.1 allows 512), kept for interoperability, less the RFC 6581
// IRD/ORD word. A RoCEv2 IA carries less in a connect (the IB CM REQ after
// RDMA-CM's header); ProviderAttr reports the IA's value.
const MaxPrivateData = 252

// IA attribute mask: any bit is accepted; IAFieldAll selects everything.
const IAFieldAll uint64 = 0xFFFFFFFFF

// Query is dat_ia_query (spec §6.2.1.5). The masks select fields; unknown
// bits are DAT_INVALID_PARAMETER.
func (ia *IA) Query(iaMask, providerMask uint64) (IAAttr, ProviderAttr, error) {
	if !alive(ia) {
		return IAAttr{}, ProviderAttr{}, ErrInvalidHandleIA
	}
	if iaMask&^IAFieldAll != 0 {
		return IAAttr{}, ProviderAttr{}, invalidArg(2)
	}
	c := ia.dev.Config()
	a := IAAttr{
		AdapterName: ia.name, VendorName: "softrnic", HardwareMajor: 1, FirmwareMajor: 1,
		Address: &net.IPAddr{IP: ia.local}, MaxEPs: c.MaxQP, MaxDTOPerEP: c.MaxQPWR,
		MaxRDMAReadPerEPIn: c.MaxIRD, MaxRDMAReadPerEPOut: c.MaxORD, MaxEVDs: 1 << 16,
		MaxEVDQLen: maxEVDQLen, MaxIOVSegmentsPerDTO: c.MaxSGE, MaxLMRs: c.MaxMR,
		MaxLMRBlockSize: 1 << 40, MaxLMRVirtualAddress: ^uint64(0), MaxPZs: 1 << 16,
		MaxMessageSize: 1 << 31, MaxRDMASize: 1 << 31, MaxRMRs: c.MaxMR,
		MaxRMRTargetAddress: ^uint64(0), MaxSRQs: 1 << 16, MaxEPPerSRQ: c.MaxQP,
		MaxRecvPerSRQ: c.MaxQPWR, MaxIOVSegmentsRDMARead: c.MaxSGE,
		MaxIOVSegmentsRDMAWrite: c.MaxSGE, MaxRDMAReadIn: c.MaxIRD * c.MaxQP,
		MaxRDMAReadOut: c.MaxORD * c.MaxQP, MaxRDMAReadInGuaranteed: true,
		MaxRDMAReadOutGuaranteed: true, ZBSupported: true, Extension: ia.extension(), ExtensionVersion: 1,
	}
	p := ProviderAttr{
		ProviderName: "softrnic", ProviderVersionMajor: 1, ProviderVersionMinor: 0,
		DAPLVersionMajor: VersionMajor, DAPLVersionMinor: VersionMinor,
		LMRMemTypes: []MemType{MemTypeVirtual, MemTypeLMR},
		QoS:         QoSBestEffort,
		CompletionFlags: CompletionSuppress | CompletionSolicitedWait | CompletionUnsignalled |
			CompletionBarrierFence | CompletionEVDThreshold,
		ThreadSafe: true, MaxPrivateDataSize: ia.tr.MaxPrivateData(cm.MsgConnect), EPCreator: "DAT_PSP_CREATES_EP_IFASKED",
		OptimalBufferAlignment: 64, EVDStreamMergingAll: true, SRQSupported: true,
		SRQWatermarksSupported: 0x001, SRQPZDifferenceSupport: false, SRQInfoSupported: 0x11,
		EPRecvInfoSupported: 0x11, DTOAsyncReturnGuarantee: true, RDMAWriteForRDMARead: false,
		RDMAReadLMRRMRContextExposure: true, RMRScopes: []RMRScope{RMRScopeEP, RMRScopePZ},
	}
	return a, p, nil
}

// Device returns the softrnic engine device behind the IA (for statistics).
func (ia *IA) Device() *rnic.Device { return ia.dev }

// AsyncEVD returns the IA's asynchronous EVD.
func (ia *IA) AsyncEVD() *EVD { return ia.asyncEVD }

// eventPump turns engine asynchronous events into DAT events until the
// device closes.
func (ia *IA) eventPump() {
	defer ia.wg.Done()
	for ev := range ia.dev.Events() {
		ia.handleDeviceEvent(ev)
	}
}

// extension is the DAT_EXTENSION the IA supports (spec §6.2.1.4, Appendix A): the IB
// extension on a RoCEv2 IA (its transport is the InfiniBand one: immediate data and
// atomics as IBTA defines them), the iWARP extension (RFC 7306) on an iWARP IA.
func (ia *IA) extension() string {
	if ia.tr != nil && ia.tr.Network() == cm.RoCEv2 {
		return "IB"
	}
	return "iWARP"
}
