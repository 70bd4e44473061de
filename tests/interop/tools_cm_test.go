package interop

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The RDMA-CM examples of rdma-core 44 against their softrnic counterparts, in both roles,
// over siw (iWARP) and rxe (RoCEv2 with the IB CM): ucmatose (-c connections), rdma_server
// and rdma_client. Both sides must end with the tools' success lines.

type cmLink struct {
	name            string // "siw", "rxe"
	peer            string
	hostIP, guestIP string
	roce            []string // softrnic's network flag
}

var cmLinks = []cmLink{
	{"siw", PeerSiw, HostSiwAddr, GuestSiwAddr, nil},
	{"rxe", PeerRxe, HostRxeAddr, GuestRxeAddr, []string{"--roce"}},
}

const (
	cmatoseServerDone = "data transfers complete\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"
	cmatoseClientDone = "receiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
)

// TestToolsCmatose: ucmatose and softrnic cmatose.
func TestToolsCmatose(t *testing.T) {
	g := guest(t)
	const flags = "-c 4 -C 20 -S 1000"
	for _, l := range cmLinks {
		t.Run(l.name+"/guest-server", func(t *testing.T) {
			record(t, l.peer, "ucmatose "+flags+" (guest server)", "client")
			p := toolPort()
			args := append(append([]string{"cmatose"}, l.roce...), "-s", l.guestIP, "-p", strconv.Itoa(p), "--timeout", "90s")
			args = append(args, strings.Fields(flags)...)
			r := guestServer(t, g, fmt.Sprintf("ucmatose -b %s -p %d %s", l.guestIP, p, flags), ready{cmPort: p}, args, 120*time.Second)
			if r.guestCode != 0 || r.hostCd != 0 || !strings.HasSuffix(r.guest, cmatoseServerDone) || !strings.HasSuffix(r.host, cmatoseClientDone) {
				t.Fatalf("guest ucmatose exit %d:\n%s\nsoftrnic exit %d:\n%s", r.guestCode, r.guest, r.hostCd, r.host)
			}
		})
		t.Run(l.name+"/guest-client", func(t *testing.T) {
			p := toolPort()
			args := append(append([]string{"cmatose"}, l.roce...), "-b", l.hostIP, "-p", strconv.Itoa(p), "--timeout", "90s")
			args = append(args, strings.Fields(flags)...)
			if l.name == "siw" {
				// The server speaks first; an MPA responder may not before the initiator's
				// first FPDU, and siw's client sends none: softrnic refuses with the reason.
				record(t, l.peer, "ucmatose "+flags+" (guest client): refused by softrnic, an iWARP responder cannot send first (RFC 5044 §7.1.2)", "server")
				srv, err := g.StartHost(60*time.Second, softrnic(t), args...)
				if err != nil {
					t.Fatal(err)
				}
				defer srv.Kill()
				if !srv.WaitOutput("cmatose: starting server", 30*time.Second) {
					t.Fatalf("no server:\n%s", srv.Output())
				}
				cli, err := g.Start(fmt.Sprintf("ucmatose -s %s -p %d %s", l.hostIP, p, flags), 60*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				defer cli.Kill()
				r, _ := srv.Wait(50 * time.Second)
				if r.Code != 1 || !strings.Contains(r.Output, "an MPA responder may send nothing before the initiator's first FPDU") ||
					!strings.HasSuffix(r.Output, "test complete\nreturn status 1\n") {
					t.Fatalf("softrnic exit %d:\n%s", r.Code, r.Output)
				}
				return
			}
			record(t, l.peer, "ucmatose "+flags+" (guest client)", "server")
			r := hostServer(t, g, args, ready{marker: "cmatose: starting server"}, fmt.Sprintf("ucmatose -s %s -p %d %s", l.hostIP, p, flags), 120*time.Second)
			if r.guestCode != 0 || r.hostCd != 0 || !strings.HasSuffix(r.guest, cmatoseClientDone) || !strings.HasSuffix(r.host, cmatoseServerDone) {
				t.Fatalf("guest ucmatose exit %d:\n%s\nsoftrnic exit %d:\n%s", r.guestCode, r.guest, r.hostCd, r.host)
			}
		})
	}
}

// TestToolsRdmaServerClient: rdma_server / rdma_client and softrnic rdma-server /
// rdma-client.
func TestToolsRdmaServerClient(t *testing.T) {
	g := guest(t)
	for _, l := range cmLinks {
		t.Run(l.name+"/guest-server", func(t *testing.T) {
			record(t, l.peer, "rdma_server (guest server)", "client")
			p := toolPort()
			args := append(append([]string{"rdma-client"}, l.roce...), "-s", l.guestIP, "-p", strconv.Itoa(p), "--timeout", "60s")
			r := guestServer(t, g, fmt.Sprintf("rdma_server -s %s -p %d", l.guestIP, p), ready{cmPort: p}, args, 90*time.Second)
			if r.guestCode != 0 || r.hostCd != 0 || r.guest != "rdma_server: start\nrdma_server: end 0\n" || r.host != "rdma_client: start\nrdma_client: end 0\n" {
				t.Fatalf("guest rdma_server exit %d:\n%s\nsoftrnic exit %d:\n%s", r.guestCode, r.guest, r.hostCd, r.host)
			}
		})
		t.Run(l.name+"/guest-client", func(t *testing.T) {
			record(t, l.peer, "rdma_client (guest client)", "server")
			p := toolPort()
			args := append(append([]string{"rdma-server"}, l.roce...), "-s", l.hostIP, "-p", strconv.Itoa(p), "--timeout", "60s")
			r := hostServer(t, g, args, ready{marker: "rdma_server: start"}, fmt.Sprintf("rdma_client -s %s -p %d", l.hostIP, p), 90*time.Second)
			if r.guestCode != 0 || r.hostCd != 0 || r.guest != "rdma_client: start\nrdma_client: end 0\n" || r.host != "rdma_server: start\nrdma_server: end 0\n" {
				t.Fatalf("guest rdma_client exit %d:\n%s\nsoftrnic exit %d:\n%s", r.guestCode, r.guest, r.hostCd, r.host)
			}
		})
	}
}

// TestToolsUdaddy: udaddy on rxe0 (UD over rdma_cm: an IB CM SIDR_REQ/SIDR_REP, then
// SEND_WITH_IMM datagrams both ways) against softrnic udaddy in both roles. udaddy's port
// is always 7174.
func TestToolsUdaddy(t *testing.T) {
	g := guest(t)
	const flags = "-c 2 -C 20 -S 1000"
	const serverDone = "receiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
	const clientDone = "initiating data transfers\nreceiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"
	t.Run("guest-server", func(t *testing.T) {
		record(t, PeerRxe, "udaddy "+flags+" (guest server)", "client")
		args := append([]string{"udaddy", "-s", GuestRxeAddr, "--timeout", "60s"}, strings.Fields(flags)...)
		r := guestServer(t, g, "udaddy -b "+GuestRxeAddr+" "+flags, ready{cmPort: 7174}, args, 90*time.Second)
		if r.guestCode != 0 || r.hostCd != 0 || !strings.HasSuffix(r.guest, serverDone) || !strings.HasSuffix(r.host, clientDone) {
			t.Fatalf("guest udaddy exit %d:\n%s\nsoftrnic exit %d:\n%s", r.guestCode, r.guest, r.hostCd, r.host)
		}
	})
	t.Run("guest-client", func(t *testing.T) {
		record(t, PeerRxe, "udaddy "+flags+" (guest client)", "server")
		args := append([]string{"udaddy", "-b", HostRxeAddr, "--timeout", "60s"}, strings.Fields(flags)...)
		r := hostServer(t, g, args, ready{marker: "udaddy: starting server"}, "udaddy -s "+HostRxeAddr+" "+flags, 90*time.Second)
		if r.guestCode != 0 || r.hostCd != 0 || !strings.HasSuffix(r.guest, clientDone) || !strings.HasSuffix(r.host, serverDone) {
			t.Fatalf("guest udaddy exit %d:\n%s\nsoftrnic exit %d:\n%s", r.guestCode, r.guest, r.hostCd, r.host)
		}
	})
}
