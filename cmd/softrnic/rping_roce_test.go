package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/roce"
)

// TestRpingRoCELoopback runs softrnic rping --roce in both roles over loopback UDP 4791:
// the IB CM exchange (REQ/REP/RTU, DREQ/DREP) and rping's Read/Write/Send protocol over
// RoCEv2 RC. The two ends bind distinct 127/8 addresses (each link owns UDP 4791 there).
func TestRpingRoCELoopback(t *testing.T) {
	for _, size := range []int{rpingMinSize, 4096, rpingMaxSize} {
		t.Run(fmt.Sprintf("S%d", size), func(t *testing.T) {
			const count = 20
			b := 1 + rand.IntN(200)
			srvAddr, cliAddr := fmt.Sprintf("127.71.%d.1", b), fmt.Sprintf("127.71.%d.2", b)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var so, co lockedBuf
			srv := rpingOpts{server: true, roce: true, addr: srvAddr, port: rpingPort, size: size, verbose: true,
				stdout: &so, stderr: &so}
			cli := rpingOpts{client: true, roce: true, addr: srvAddr, local: cliAddr, port: rpingPort, size: size,
				count: count, verbose: true, validate: true, stdout: &co, stderr: &co}
			ready := make(chan net.Addr, 1)
			srv.listening = func(a net.Addr) { ready <- a }
			done := make(chan error, 1)
			go func() { done <- rping(ctx, srv) }()
			select {
			case a := <-ready:
				if u, ok := a.(*net.UDPAddr); !ok || u.IP.String() != srvAddr || u.Port != rpingPort {
					t.Fatalf("listening on %v", a)
				}
			case err := <-done:
				t.Fatalf("server: %v", err)
			}
			cliErr := rping(ctx, cli)
			srvErr := <-done
			if cliErr != nil || srvErr != nil {
				t.Fatalf("client: %v\nserver: %v\n%s\n%s", cliErr, srvErr, co.String(), so.String())
			}
			cliOut, srvOut := co.String(), so.String()
			for i := 0; i < count; i++ {
				buf := make([]byte, size)
				fillSource(buf, i, byte('A'+i%58))
				line := string(buf[:size-1])
				if !strings.Contains(cliOut, "ping data: "+line+"\n") {
					t.Fatalf("client output lacks ping %d:\n%s", i, cliOut)
				}
				if !strings.Contains(srvOut, "server ping data: "+line+"\n") {
					t.Fatalf("server output lacks ping %d", i)
				}
			}
			if n := strings.Count(cliOut, "ping data: "); n != count {
				t.Fatalf("client printed %d pings, want %d", n, count)
			}
			if !strings.Contains(srvOut, "server DISCONNECT EVENT...") {
				t.Fatalf("server did not see the disconnect:\n%s", srvOut)
			}
		})
	}
}

// TestRpingRoCEArgs checks the RoCE option rules.
func TestRpingRoCEArgs(t *testing.T) {
	o, err := parseRpingArgs([]string{"-c", "-a", "192.168.78.2", "--roce", "--local", "192.168.78.1"})
	if err != nil || !o.roce || o.local != "192.168.78.1" {
		t.Fatalf("%+v %v", o, err)
	}
	for _, bad := range [][]string{
		{"-s", "--roce"}, {"-c", "-a", "x", "--roce", "--crc"}, {"-c", "-a", "x", "--roce", "--local", "nope"},
		{"-s", "-a", "1.2.3.4", "--roce", "--fault", "write-bad-stag"},
	} {
		if _, err := parseRpingArgs(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestPSNProbe: the probe of rnic/rocev2's Starting-PSN convention runs and says which one
// it found (either is handled; see rping_roce.go).
func TestPSNProbe(t *testing.T) {
	fix, err := rocev2ActiveSendsREQPSN()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rnic/rocev2 active side sends from the REQ's Starting PSN (needs the Linux shim): %v", fix)
}

// TestPSNShift: requests move by +d and responses by -d (mod 2^24), the other BTH bits stay,
// and the ICRC is recomputed.
func TestPSNShift(t *testing.T) {
	src, dst := netip.MustParseAddrPort("192.168.78.1:4791"), netip.MustParseAddrPort("192.168.78.2:4791")
	for _, c := range []struct {
		op       byte
		psn, d   uint32
		wantPSN  uint32
		unchange bool
	}{
		{0x04, 0x000010, 0x20, 0x000030, false}, // SEND_ONLY: +d
		{0x11, 0x000010, 0x20, 0xfffff0, false}, // ACK: -d, wrapping
		{0x0a, 0xfffff0, 0x20, 0x000010, false}, // WRITE_ONLY: +d, wrapping
		{0x64, 0x000010, 0x20, 0x000010, true},  // UD: untouched
		{0x04, 0x123456, 0, 0x123456, true},     // d = 0: untouched
	} {
		b := make([]byte, bthLen+16+roce.ICRCLen)
		b[0] = c.op
		binary.BigEndian.PutUint32(b[8:], 0x80000000|c.psn) // AckReq set
		ib := b[:len(b)-roce.ICRCLen]
		binary.LittleEndian.PutUint32(b[len(ib):], roce.ICRCv4(src.Addr().As4(), dst.Addr().As4(), 0, true, 4791, 4791, ib))
		orig := append([]byte(nil), b...)
		shift(b, c.d, src, dst)
		w := binary.BigEndian.Uint32(b[8:])
		if w&psnMask != c.wantPSN || w>>24 != 0x80 {
			t.Errorf("op %#x psn %#x d %#x: got word %#x, want psn %#x", c.op, c.psn, c.d, w, c.wantPSN)
		}
		if c.unchange != bytes.Equal(b, orig) {
			t.Errorf("op %#x d %#x: changed=%v", c.op, c.d, !bytes.Equal(b, orig))
		}
		if got, want := binary.LittleEndian.Uint32(b[len(ib):]), roce.ICRCv4(src.Addr().As4(), dst.Addr().As4(), 0, true, 4791, 4791, ib); got != want {
			t.Errorf("op %#x: ICRC %#x, want %#x", c.op, got, want)
		}
	}
}
