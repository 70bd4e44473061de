// Package capture writes what a softrnic device sends and receives to a
// pcapng file that Wireshark's iWARP (MPA/DDP/RDMAP) and InfiniBand
// dissectors decode, on every transport, without slowing the datapath:
//
//   - RoCEv2 over a packet link: WrapLink wraps any rocev2.Link and
//     records each UDP payload behind synthetic Ethernet/IP/UDP headers
//     (pcapng interface "roce").
//   - iWARP over TCP (kernel or userspace): WrapConn wraps the net.Conn and
//     reconstructs the byte stream as TCP/IP segments with synthetic headers,
//     one MPA Request/Reply or FPDU per segment (interface
//     "iwarp-reconstructed", whose description says so): the kernel's real
//     segmentation is not visible to a socket user.
//   - AF_XDP: the Writer is an afxdp.Tap and records the frames a port sends
//     and receives as they are (interface "afxdp").
//
// iWARP has no port of its own, and Wireshark finds MPA by a heuristic, which it tries
// after the dissectors registered for the stream's ports: a connection on a port another
// protocol registered (EtherCAT's 34980, say, which an ephemeral port can be) decodes
// as that protocol. Open iWARP captures with "Try heuristic sub-dissectors first" on
// (tshark -o tcp.try_heuristic_first:TRUE), as this package's tests do.
//
// Recording never blocks: each record is copied into a buffer and queued
// for the Writer's goroutine; when the queue (Config.MaxQueued records or
// Config.MaxBytes bytes) is full the record is dropped and counted
// (Stats.Dropped).
package capture

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// pcapng interfaces: each source of records is one, so its name and
// description label how the frames were obtained.
const (
	IfaceRoCE  = 0
	IfaceIWARP = 1
	IfaceXDP   = 2
)

var interfaces = []pcapgo.NgInterface{
	{Name: "roce", Description: "softrnic: RoCEv2 UDP payloads from a packet link, synthetic Ethernet/IP/UDP headers (IP ID 0, DF, TTL 64, as the ICRC assumes)"},
	{Name: "iwarp-reconstructed", Description: "softrnic: iWARP TCP byte stream reconstructed with synthetic Ethernet/IP/TCP headers, one MPA frame or FPDU per segment (not the wire segmentation)"},
	{Name: "afxdp", Description: "softrnic: AF_XDP frames as sent and received"},
}

// ErrClosed is returned by Close after the first call.
var ErrClosed = errors.New("capture: closed")

// Config bounds a Writer's queue; the zero value gives 4096 records and
// 16 MiB.
type Config struct {
	MaxQueued int
	MaxBytes  int
}

// Stats are a Writer's counters.
type Stats struct {
	// Written records, and Dropped ones (queue full, too long, or after
	// Close); WriteErrors counts records the file refused (the first error
	// is returned by Close).
	Written, Dropped, WriteErrors uint64
}

type record struct {
	iface int
	ts    time.Time
	buf   *[]byte
	n     int
}

// Writer writes records to a pcapng stream from its own goroutine.
type Writer struct {
	ch       chan record
	quit     chan struct{}
	done     chan struct{}
	closed   atomic.Bool
	maxBytes int64
	queued   atomic.Int64 // bytes queued
	f        io.Closer    // Create's file, closed by Close
	bw       *bufio.Writer
	ng       *pcapgo.NgWriter
	err      error // first write error (writer goroutine, read after done)

	written, dropped, writeErrors atomic.Uint64
}

// New starts a Writer on w: it writes the pcapng section and interface
// blocks at once.
func New(w io.Writer, c *Config) (*Writer, error) {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	if cfg.MaxQueued <= 0 {
		cfg.MaxQueued = 4096
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 16 << 20
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	opts := pcapgo.DefaultNgWriterOptions
	opts.SectionInfo.Application = "softrnic"
	first := interfaces[0]
	first.LinkType = layers.LinkTypeEthernet
	ng, err := pcapgo.NewNgWriterInterface(bw, first, opts)
	if err != nil {
		return nil, fmt.Errorf("capture: pcapng header: %w", err)
	}
	for _, in := range interfaces[1:] {
		in.LinkType = layers.LinkTypeEthernet
		if _, err := ng.AddInterface(in); err != nil {
			return nil, fmt.Errorf("capture: pcapng interface: %w", err)
		}
	}
	if err := ng.Flush(); err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	wr := &Writer{ch: make(chan record, cfg.MaxQueued), quit: make(chan struct{}), done: make(chan struct{}),
		maxBytes: int64(cfg.MaxBytes), bw: bw, ng: ng}
	go wr.run()
	return wr, nil
}

// Create writes a capture to the file path (created or truncated).
func Create(path string, c *Config) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	w, err := New(f, c)
	if err != nil {
		f.Close()
		return nil, err
	}
	w.f = f
	return w, nil
}

// Stats returns the counters.
func (w *Writer) Stats() Stats {
	return Stats{Written: w.written.Load(), Dropped: w.dropped.Load(), WriteErrors: w.writeErrors.Load()}
}

// Close writes what is queued, flushes and closes the file Create opened.
// Records made after Close are dropped.
func (w *Writer) Close() error {
	if w.closed.Swap(true) {
		return ErrClosed
	}
	close(w.quit)
	<-w.done
	err := w.err
	if ferr := w.bw.Flush(); err == nil && ferr != nil {
		err = ferr
	}
	if w.f != nil {
		if cerr := w.f.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	return nil
}

func (w *Writer) run() {
	defer close(w.done)
	for {
		select {
		case r := <-w.ch:
			w.write(r)
		case <-w.quit:
			for {
				select {
				case r := <-w.ch:
					w.write(r)
				default:
					return
				}
			}
		}
	}
}

func (w *Writer) write(r record) {
	data := (*r.buf)[:r.n]
	ci := gopacket.CaptureInfo{Timestamp: r.ts, CaptureLength: r.n, Length: r.n, InterfaceIndex: r.iface}
	if err := w.ng.WritePacket(ci, data); err != nil {
		w.writeErrors.Add(1)
		if w.err == nil {
			w.err = err
		}
	} else {
		w.written.Add(1)
	}
	w.queued.Add(-int64(cap(*r.buf)))
	putBuf(r.buf)
	if len(w.ch) == 0 {
		_ = w.bw.Flush() // idle: make the file readable as it grows
	}
}

// maxRecord is the longest record: a 64 KiB IP packet behind Ethernet.
const maxRecord = 14 + 65535

var pools = [...]struct {
	size int
	p    sync.Pool
}{{size: 2048}, {size: 16384}, {size: maxRecord}}

func getBuf(n int) *[]byte {
	for i := range pools {
		if n <= pools[i].size {
			if b, ok := pools[i].p.Get().(*[]byte); ok {
				return b
			}
			b := make([]byte, pools[i].size)
			return &b
		}
	}
	return nil
}

func putBuf(b *[]byte) {
	for i := range pools {
		if cap(*b) == pools[i].size {
			pools[i].p.Put(b)
			return
		}
	}
}

// reserve returns a buffer of at least n bytes for a record, or nil (and
// counts a drop) when the record cannot be queued.
func (w *Writer) reserve(n int) *[]byte {
	if w.closed.Load() || n > maxRecord {
		w.dropped.Add(1)
		return nil
	}
	b := getBuf(n)
	if w.queued.Add(int64(cap(*b))) > w.maxBytes {
		w.queued.Add(-int64(cap(*b)))
		putBuf(b)
		w.dropped.Add(1)
		return nil
	}
	return b
}

// commit queues a record built in b, or drops it when the queue is full.
func (w *Writer) commit(iface int, b *[]byte, n int) {
	select {
	case w.ch <- record{iface: iface, ts: time.Now(), buf: b, n: n}:
	default:
		w.queued.Add(-int64(cap(*b)))
		putBuf(b)
		w.dropped.Add(1)
	}
}

// Frame records an Ethernet frame as it is, on the "afxdp" interface; it
// implements afxdp.Tap.
func (w *Writer) Frame(f []byte, outbound bool) {
	b := w.reserve(len(f))
	if b == nil {
		return
	}
	w.commit(IfaceXDP, b, copy(*b, f))
}
