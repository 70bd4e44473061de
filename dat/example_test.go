package dat_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/softrnic/softrnic/dat"
)

// Error values carry a DAT_RETURN type and subtype; errors.Is matches a
// type (any subtype) or an exact type+subtype sentinel.
func Example_errors() {
	err := fmt.Errorf("post failed: %w", dat.ErrInvalidHandleEP)
	fmt.Println(errors.Is(err, dat.ErrInvalidHandle), errors.Is(err, dat.ErrInvalidHandleEP), errors.Is(err, dat.ErrInvalidHandleIA))
	major, minor, _ := dat.StrError(dat.CodeOf(err))
	fmt.Printf("%#x %s %s\n", dat.CodeOf(err), major, minor)
	// Output:
	// true true false
	// 0x8005000c DAT_INVALID_HANDLE DAT_INVALID_HANDLE_EP
}

// The static registry is a dat.conf file.
func ExampleParseConf() {
	conf := `# my dat.conf
ofa-v2-iwarp u2.0 nonthreadsafe default libdaplofa.so.2 dapl.2.0 "iwarp 127.0.0.1" ""
`
	entries, err := dat.ParseConf(strings.NewReader(conf))
	if err != nil {
		panic(err)
	}
	e := entries[0]
	fmt.Println(e.IAName, e.APIVersion(), e.Library, e.InstanceData)
	r := dat.NewRegistry()
	r.Load(entries)
	list, n, _ := r.ListProviders(8)
	fmt.Println(n, list[0].Name, list[0].VersionMajor, list[0].VersionMinor)
	dat.WriteConf(os.Stdout, entries)
	// Output:
	// ofa-v2-iwarp u2.0 libdaplofa.so.2 iwarp 127.0.0.1
	// 1 ofa-v2-iwarp 2 0
	// ofa-v2-iwarp u2.0 nonthreadsafe default libdaplofa.so.2 dapl.2.0 "iwarp 127.0.0.1" ""
}

// Software events, thresholds and timeouts on an EVD.
func ExampleEVD_Wait() {
	ia, _, err := dat.OpenIA("softrnic-iwarp", 8, nil)
	if err != nil {
		panic(err)
	}
	defer ia.Close(dat.CloseAbrupt)
	evd, _ := ia.CreateEVD(4, nil, dat.EVDSoftware)
	evd.PostSE("first")
	_, nmore, err := evd.Wait(context.Background(), 10*time.Millisecond, 2)
	fmt.Println(nmore, err)
	evd.PostSE("second")
	ev, nmore, err := evd.Wait(context.Background(), dat.TimeoutInfinite, 2)
	fmt.Println(ev.Number, ev.Software, nmore, err)
	// Output:
	// 1 dat: DAT_TIMEOUT_EXPIRED
	// DAT_SOFTWARE_EVENT first 1 <nil>
}

// A client and a server in one process, the dtest way: the server listens
// on a PSP, the client connects with private data, the server accepts,
// the client sends a message and writes into the server's memory through
// its rmr_context.
func Example_clientServer() {
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	open := func() (*dat.IA, *dat.PZ, *dat.EVD, *dat.EVD, *dat.EP) {
		ia, _, err := dat.OpenIA("softrnic-iwarp", 8, nil)
		must(err)
		pz, _ := ia.CreatePZ()
		dto, _ := ia.CreateEVD(16, nil, dat.EVDDTO|dat.EVDRMRBind)
		conn, _ := ia.CreateEVD(4, nil, dat.EVDConnection)
		ep, err := ia.CreateEP(pz, dto, dto, conn, nil)
		must(err)
		return ia, pz, dto, conn, ep
	}
	wait := func(evd *dat.EVD) dat.Event {
		ev, _, err := evd.Wait(context.Background(), 5*time.Second, 1)
		must(err)
		return ev
	}

	// server
	sia, spz, sdto, sconn, sep := open()
	defer sia.Close(dat.CloseAbrupt)
	crEVD, _ := sia.CreateEVD(4, nil, dat.EVDCR)
	psp, qual, err := sia.CreatePSPAny(crEVD, dat.PSPConsumer)
	must(err)
	defer psp.Free()
	sbuf := make([]byte, 256)
	slmr, _ := sia.CreateLMR(sbuf, spz, dat.MemPrivAll, dat.VATypeVA)
	must(sep.PostRecv([]dat.LMRTriplet{slmr.Triplet(0, 64)}, 1, dat.CompletionDefault))

	// client
	cia, cpz, cdto, cconn, cep := open()
	defer cia.Close(dat.CloseAbrupt)
	cbuf := make([]byte, 256)
	clmr, _ := cia.CreateLMR(cbuf, cpz, dat.MemPrivAll, dat.VATypeVA)
	must(cep.Connect(&net.IPAddr{IP: net.IPv4(127, 0, 0, 1)}, qual, 5*time.Second, []byte("hello"), dat.QoSBestEffort, dat.ConnectDefault))

	ev := wait(crEVD)
	fmt.Println(ev.Number, string(ev.CR.CR.PrivateData()))
	must(ev.CR.CR.Accept(sep, []byte("welcome")))
	fmt.Println(wait(sconn).Number)
	ev = wait(cconn)
	fmt.Println(ev.Number, string(ev.Conn.PrivateData))

	// (dtest would now exchange RMR triplets with Sends; the server LMR has
	// remote privileges, so its rmr_context serves directly)
	copy(cbuf, "ping")
	must(cep.PostSend([]dat.LMRTriplet{clmr.Triplet(0, 4)}, 2, dat.CompletionDefault))
	ev = wait(cdto)
	fmt.Println(ev.DTO.Op, ev.DTO.Cookie, ev.DTO.Status)
	ev = wait(sdto)
	fmt.Println(ev.DTO.Op, ev.DTO.Cookie, ev.DTO.Length, string(sbuf[:ev.DTO.Length]))

	copy(cbuf[100:], "written")
	must(cep.PostRDMAWrite([]dat.LMRTriplet{clmr.Triplet(100, 7)}, 3, slmr.RMRTriplet(128, 7), dat.CompletionDefault))
	ev = wait(cdto)
	fmt.Println(ev.DTO.Op, ev.DTO.Length, ev.DTO.Status)

	must(cep.Disconnect(dat.CloseGraceful))
	fmt.Println(wait(cconn).Number)
	fmt.Println(wait(sconn).Number)
	// Output:
	// DAT_CONNECTION_REQUEST_EVENT hello
	// DAT_CONNECTION_EVENT_ESTABLISHED
	// DAT_CONNECTION_EVENT_ESTABLISHED welcome
	// DAT_DTO_SEND 2 DAT_DTO_SUCCESS
	// DAT_DTO_RECEIVE 1 4 ping
	// DAT_DTO_RDMA_WRITE 7 DAT_DTO_SUCCESS
	// DAT_CONNECTION_EVENT_DISCONNECTED
	// DAT_CONNECTION_EVENT_DISCONNECTED
}

// A CNO funnels notifications from several EVDs to one waiter.
func ExampleCNO_Wait() {
	ia, _, _ := dat.OpenIA("softrnic-iwarp", 8, nil)
	defer ia.Close(dat.CloseAbrupt)
	cno, _ := ia.CreateCNO(nil)
	a, _ := ia.CreateEVD(4, cno, dat.EVDSoftware)
	b, _ := ia.CreateEVD(4, cno, dat.EVDSoftware)
	b.PostSE(42)
	evd, err := cno.Wait(context.Background(), time.Second)
	fmt.Println(evd == b, evd == a, err)
	ev, _ := evd.Dequeue()
	fmt.Println(ev.Software)
	// Output:
	// true false <nil>
	// 42
}
