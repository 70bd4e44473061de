package interop

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
)

// raceConns is how many connections each TestSiwAcceptRace mode makes
// (SOFTRNIC_INTEROP_RACE_N overrides it).
func raceConns(t *testing.T) int {
	if s := os.Getenv("SOFTRNIC_INTEROP_RACE_N"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("SOFTRNIC_INTEROP_RACE_N=%q", s)
		}
		return n
	}
	return 100
}

// TestSiwAcceptRace connects softrnic (rnic/iwarp, in this process, no configured delay)
// to a persistent guest rping server on siw again and again, and requires every
// connection's first operation to complete: siw_accept writes the MPA Reply before it
// installs its receive handler, and an initiator's first FPDUs landing in between stay
// unread until newer bytes arrive (tests/interop/README.md finding 1); rnic/iwarp's
// nudges provide them. Each connection sends rping's first message (the advertisement of
// a 64-byte buffer) and waits for the server's reply, which comes after the server has
// RDMA-Read the buffer. Modes: the default configuration (peer-to-peer, Read RTR, CRC),
// the Write RTR, and the client-server model in MPA rev 2 (as softrnic rping) and rev 1.
// MPA rev 1 has no IRD/ORD exchange and Linux's iWARP CM then gives the passive QP an
// ORD of 0, so rping's server cannot RDMA-Read ("post send error"); rev 1 runs against
// librdmacm's rdma_server instead (a 16-byte Send each way, one connection per run).
func TestSiwAcceptRace(t *testing.T) {
	g := guest(t)
	n := raceConns(t)
	modes := []struct {
		name       string
		mpa        mpa.Config
		rdmaServer bool // rdma_server (restarted per connection) instead of rping -s -P
	}{
		{"default-p2p-read-rtr", iwarp.DefaultConfig().MPA, false},
		{"p2p-write-rtr", mpa.Config{Rev: 2, P2P: true, RTR: mpa.RTRWrite, MaxPrivateData: mpa.SiwMaxPrivateData}, false},
		{"client-server-rev2", mpa.Config{Rev: 2, MaxPrivateData: mpa.SiwMaxPrivateData}, false},
		{"client-server-rev1", mpa.Config{Rev: 1, MaxPrivateData: mpa.SiwMaxPrivateData}, true},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			record(t, PeerSiw, fmt.Sprintf("%d connections, first operation, no delay (%s)", n, m.name), "client")
			p := port()
			script := fmt.Sprintf("rping -s -P -a %s -p %d -S 64 > /tmp/race%d.out 2>&1", GuestSiwAddr, p, p)
			if m.rdmaServer {
				script = fmt.Sprintf("while :; do rdma_server -s %s -p %d >> /tmp/race%d.out 2>&1; done", GuestSiwAddr, p, p)
			}
			srv, err := g.Start(script, 30*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Kill()
			if err := g.WaitCMListen(p, 60*time.Second); err != nil {
				t.Fatal(err)
			}
			cfg := &iwarp.Config{MPA: m.mpa, Timeout: 20 * time.Second,
				// Connect from inside the guest link's namespace.
				Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
					var c net.Conn
					err := g.InNetns(func() error {
						var err error
						c, err = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(HostSiwAddr)}}).DialContext(ctx, network, addr)
						return err
					})
					return c, err
				}}
			d, err := rnic.Open(rnic.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			go func() {
				for range d.Events() {
				}
			}()
			pd, _ := d.AllocPD()
			cq, _ := d.CreateCQ(64)
			mr, _ := pd.RegMR(make([]byte, 128), rnic.AccessLocalWrite|rnic.AccessRemoteRead|rnic.AccessRemoteWrite)
			diag := func() string { // the guest's side of a failure
				r, _ := g.Run(fmt.Sprintf("dmesg | tail -20; echo '--- rping'; tail -20 /tmp/race%d.out", p), 10*time.Second)
				return r.Output
			}
			var lat []time.Duration
			var nudges, nudged uint64
			addr := net.JoinHostPort(GuestSiwAddr, strconv.Itoa(p))
			for i := 0; i < n; i++ {
				qp, err := d.CreateQP(pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq, Cap: rnic.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
				if err != nil {
					t.Fatal(err)
				}
				if err := qp.PostRecv(&rnic.RecvWR{WRID: 2, SGL: []rnic.SGE{mr.SGE(64, 64)}}); err != nil {
					t.Fatal(err)
				}
				if m.rdmaServer && i > 0 {
					if err := g.WaitCMListen(p, 60*time.Second); err != nil { // restarted
						t.Fatal(err)
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				conn, err := iwarp.Dial(ctx, qp, addr, cfg, iwarp.ConnParam{IRD: 1, ORD: 1})
				if err != nil {
					cancel()
					t.Fatalf("connection %d: %v", i+1, err)
				}
				t0 := time.Now()
				info := mr.RemoteBuffer(0, 64).Append(make([]byte, 0, 16))
				copy(mr.Buf()[100:], info) // the advertisement, sent from the region itself
				if err := qp.PostSend(&rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, SGL: []rnic.SGE{mr.SGE(100, 16)}}); err != nil {
					t.Fatal(err)
				}
				var wc [1]rnic.Completion
				for {
					k, err := cq.Wait(ctx, wc[:])
					if err != nil || k != 1 {
						cancel()
						t.Fatalf("connection %d of %d: no answer from the guest's rping (%v; nudges %d; QP %v %v)\n%s",
							i+1, n, err, conn.Nudges(), qp.State(), qp.Err(), diag())
					}
					if wc[0].Status != rnic.StatusSuccess {
						<-conn.Done()
						t.Fatalf("connection %d: %+v (QP %v, %v; nudges %d)\n%s", i+1, wc[0], qp.State(), conn.Err(), conn.Nudges(), diag())
					}
					if wc[0].WRID == 2 {
						break
					}
				}
				lat = append(lat, time.Since(t0))
				cancel()
				nudges += conn.Nudges()
				if conn.Nudges() > 0 {
					nudged++
				}
				qp.Disconnect()
				select {
				case <-conn.Done():
				case <-time.After(10 * time.Second):
					conn.Close()
				}
				_ = qp.Destroy()
			}
			s := slices.Clone(lat)
			slices.Sort(s)
			t.Logf("%d of %d connections answered; first exchange min %v, median %v, max %v; %d connections nudged, %d nudges in all",
				len(lat), n, s[0].Round(time.Microsecond), s[len(s)/2].Round(time.Microsecond), s[len(s)-1].Round(time.Microsecond), nudged, nudges)
		})
	}
}
