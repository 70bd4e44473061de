package dat_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"github.com/softrnic/softrnic/dat"
)

// A uDAPL exchange in one process: a server IA listens on a PSP and accepts; a client IA
// connects and SENDs a message into the server's posted receive.
func Example() {
	ctx := context.Background()
	r := dat.NewRegistry()
	_ = r.AddProvider(&dat.Provider{Info: dat.ProviderInfo{Name: "softrnic-iwarp", VersionMajor: 2},
		InstanceData: "iwarp 127.0.0.1"})
	type side struct {
		ia        *dat.IA
		pz        *dat.PZ
		dto, conn *dat.EVD
		ep        *dat.EP
		buf       []byte
		lmr       *dat.LMR
	}
	open := func() *side {
		s := &side{buf: make([]byte, 64)}
		var err error
		if s.ia, _, err = r.OpenIA("softrnic-iwarp", 16, nil); err != nil {
			log.Fatal(err)
		}
		s.pz, _ = s.ia.CreatePZ()
		s.dto, _ = s.ia.CreateEVD(16, nil, dat.EVDDTO)
		s.conn, _ = s.ia.CreateEVD(4, nil, dat.EVDConnection)
		s.ep, _ = s.ia.CreateEP(s.pz, s.dto, s.dto, s.conn, nil)
		s.lmr, _ = s.ia.CreateLMR(s.buf, s.pz, dat.MemPrivAll, dat.VATypeVA)
		return s
	}
	srv, cli := open(), open()
	defer srv.ia.Close(dat.CloseAbrupt)
	defer cli.ia.Close(dat.CloseAbrupt)

	crEVD, _ := srv.ia.CreateEVD(4, nil, dat.EVDCR)
	psp, qual, err := srv.ia.CreatePSPAny(crEVD, dat.PSPConsumer)
	if err != nil {
		log.Fatal(err)
	}
	defer psp.Free()
	_ = srv.ep.PostRecv([]dat.LMRTriplet{srv.lmr.Triplet(0, 64)}, 1, dat.CompletionDefault)

	_ = cli.ep.Connect(&net.IPAddr{IP: net.IPv4(127, 0, 0, 1)}, qual, dat.TimeoutInfinite, []byte("hi"), dat.QoSBestEffort, dat.ConnectDefault)
	ev, _, _ := crEVD.Wait(ctx, dat.TimeoutInfinite, 1)
	_ = ev.CR.CR.Accept(srv.ep, nil)
	ev, _, _ = cli.conn.Wait(ctx, dat.TimeoutInfinite, 1)
	fmt.Println(ev.Number)

	n := copy(cli.buf, "hello over uDAPL")
	_ = cli.ep.PostSend([]dat.LMRTriplet{cli.lmr.Triplet(0, n)}, 2, dat.CompletionDefault)
	ev, _, _ = srv.dto.Wait(ctx, dat.TimeoutInfinite, 1)
	fmt.Println(ev.DTO.Op, ev.DTO.Status, string(srv.buf[:ev.DTO.Length]))
	// Output:
	// DAT_CONNECTION_EVENT_ESTABLISHED
	// DAT_DTO_RECEIVE DAT_DTO_SUCCESS hello over uDAPL
}
