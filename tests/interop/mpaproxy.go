package interop

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// InNetns runs fn on an OS thread switched into the guest's namespace, so sockets fn creates
// (net.Listen, net.Dial) live there. Sockets keep their namespace afterwards. The thread is
// switched back before it is released; if that fails it stays locked and Go ends it, so the
// namespace never leaks to other goroutines.
func (g *Guest) InNetns(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		ns, err := os.Open("/var/run/netns/" + g.Netns)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", g.Netns, err)
			return
		}
		err = fn()
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// MPA frame bits (RFC 5044 §7.1.1, RFC 6581).
const (
	MPABitM = 0x8000 // Markers
	MPABitC = 0x4000 // CRC
	MPABitR = 0x2000 // Reject
	MPABitS = 0x1000 // RFC 6581 enhanced
)

// MPAStream is what an MPAProxy saw in one direction.
type MPAStream struct {
	Frame   []byte // the MPA Request or Reply: 20-byte header + private data
	First   []byte // the first FPDU: length, ULPDU, pad and CRC field
	FPDUs   int    // FPDUs relayed after the frame
	GoodCRC int    // FPDUs whose CRC32c trailer matched (RFC 5044 §4.4, little-endian bytes)
	BadCRC  int    // FPDUs whose trailer did not match
	ZeroCRC int    // of BadCRC: trailer was all zero
}

// Bits returns the frame's bits field (M, C, R, S, Rev).
func (s MPAStream) Bits() uint16 {
	if len(s.Frame) < 20 {
		return 0
	}
	return binary.BigEndian.Uint16(s.Frame[16:])
}

// MPAProxy relays one TCP connection between an iWARP initiator and a responder inside the
// guest's namespace and checks the MPA stream: it keeps the Request and Reply frames and,
// when CRC was negotiated (C in either frame), checks the CRC32c of every FPDU in both
// directions with an implementation independent of softrnic's (hash/crc32, Castagnoli).
// Markers are not supported (neither siw nor softrnic's rping uses them).
type MPAProxy struct {
	ln     net.Listener
	target string
	done   chan struct{}

	mu       sync.Mutex
	up, down MPAStream // initiator → responder, responder → initiator
	err      error
}

// StartMPAProxy listens on listen (host:port inside the namespace) and relays the first
// connection to target.
func (g *Guest) StartMPAProxy(listen, target string) (*MPAProxy, error) {
	p := &MPAProxy{target: target, done: make(chan struct{})}
	err := g.InNetns(func() error {
		var err error
		p.ln, err = net.Listen("tcp4", listen)
		return err
	})
	if err != nil {
		return nil, err
	}
	go p.run(g)
	return p, nil
}

// Addr is the proxy's listening address.
func (p *MPAProxy) Addr() *net.TCPAddr { return p.ln.Addr().(*net.TCPAddr) }

func (p *MPAProxy) fail(err error) {
	p.mu.Lock()
	if p.err == nil && err != nil {
		p.err = err
	}
	p.mu.Unlock()
}

func (p *MPAProxy) run(g *Guest) {
	defer close(p.done)
	c, err := p.ln.Accept()
	p.ln.Close()
	if err != nil {
		p.fail(err)
		return
	}
	defer c.Close()
	var s net.Conn
	if err := g.InNetns(func() error {
		var err error
		s, err = net.DialTimeout("tcp4", p.target, 10*time.Second)
		return err
	}); err != nil {
		p.fail(err)
		return
	}
	defer s.Close()
	reqSeen := make(chan uint16, 1) // the Request's bits, once forwarded
	repSeen := make(chan uint16, 1) // the Reply's bits
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		p.relay(c, s, &p.up, reqSeen, repSeen)
	}()
	go func() {
		defer wg.Done()
		p.relay(s, c, &p.down, repSeen, reqSeen)
	}()
	wg.Wait()
}

// relay copies one direction: the MPA frame, then FPDUs, checking CRCs when negotiated.
func (p *MPAProxy) relay(src, dst net.Conn, st *MPAStream, mine chan<- uint16, theirs <-chan uint16) {
	defer func() {
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	hdr := make([]byte, 20)
	if _, err := io.ReadFull(src, hdr); err != nil {
		p.fail(fmt.Errorf("reading MPA frame: %w", err))
		close(mine)
		return
	}
	pdLen := int(binary.BigEndian.Uint16(hdr[18:]))
	frame := make([]byte, 20+pdLen)
	copy(frame, hdr)
	if _, err := io.ReadFull(src, frame[20:]); err != nil {
		p.fail(fmt.Errorf("reading MPA private data: %w", err))
		close(mine)
		return
	}
	p.mu.Lock()
	st.Frame = frame
	p.mu.Unlock()
	if _, err := dst.Write(frame); err != nil {
		p.fail(err)
		close(mine)
		return
	}
	bits := binary.BigEndian.Uint16(frame[16:])
	mine <- bits
	close(mine)
	other, ok := <-theirs
	if !ok {
		_, _ = io.Copy(dst, src)
		return
	}
	if (bits|other)&MPABitM != 0 {
		p.fail(errors.New("MPA Markers negotiated: the proxy cannot parse them"))
		_, _ = io.Copy(dst, src)
		return
	}
	crc := (bits|other)&MPABitC != 0
	table := crc32.MakeTable(crc32.Castagnoli)
	buf := make([]byte, 2+0xFFFF+3+4)
	for {
		if _, err := io.ReadFull(src, buf[:2]); err != nil {
			if err != io.EOF {
				p.fail(fmt.Errorf("reading FPDU length: %w", err))
			}
			return
		}
		ulpdu := int(binary.BigEndian.Uint16(buf))
		n := 2 + ulpdu
		n += (4 - n%4) % 4 // pad (RFC 5044 §4.2)
		total := n + 4     // the CRC field is always there; zero when CRC is off (RFC 5044 §4.1)
		if _, err := io.ReadFull(src, buf[2:total]); err != nil {
			// The peer may close mid-FPDU after a Terminate; not a CRC failure.
			return
		}
		p.mu.Lock()
		if st.FPDUs == 0 {
			st.First = append([]byte(nil), buf[:total]...)
		}
		st.FPDUs++
		if crc {
			want := crc32.Checksum(buf[:n], table)
			got := binary.LittleEndian.Uint32(buf[n:total])
			switch {
			case got == want:
				st.GoodCRC++
			default:
				st.BadCRC++
				if got == 0 {
					st.ZeroCRC++
				}
			}
		}
		p.mu.Unlock()
		if _, err := dst.Write(buf[:total]); err != nil {
			return
		}
	}
}

// Wait waits until both directions ended and returns what was seen.
func (p *MPAProxy) Wait(timeout time.Duration) (up, down MPAStream, err error) {
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.ln.Close()
		return p.snapshot(errors.New("mpa proxy: still relaying"))
	}
	return p.snapshot(nil)
}

func (p *MPAProxy) snapshot(err error) (MPAStream, MPAStream, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		err = p.err
	}
	return p.up, p.down, err
}

// Close stops listening (a relayed connection ends when its peers close it).
func (p *MPAProxy) Close() { p.ln.Close() }
