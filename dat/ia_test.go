package dat

import (
	"errors"
	"net"
	"testing"
)

// §6.2.1 Interface Adapter.

func TestIAOpenErrors(t *testing.T) {
	r := NewRegistry()
	r.AddProvider(&Provider{Info: ProviderInfo{Name: "a", VersionMajor: 2}, InstanceData: "iwarp 127.0.0.1"})
	r.AddProvider(&Provider{Info: ProviderInfo{Name: "b", VersionMajor: 2}, InstanceData: "iwarp 127.0.0.1"})
	r.AddProvider(&Provider{Info: ProviderInfo{Name: "weird", VersionMajor: 2}, InstanceData: "carrier-pigeon"})
	r.AddProvider(&Provider{Info: ProviderInfo{Name: "badip", VersionMajor: 2}, InstanceData: "iwarp not-an-ip"})
	if _, _, err := r.OpenIA("nope", 4, nil); !errors.Is(err, ErrNameNotRegistered) {
		t.Fatal(err)
	}
	if _, _, err := r.OpenIA("a", 0, nil); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	if _, _, err := r.OpenIA("weird", 4, nil); !errors.Is(err, ErrCommNotSupported) {
		t.Fatal(err)
	}
	if _, _, err := r.OpenIA("badip", 4, nil); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	ia, async, err := r.OpenIA("a", 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := async.Query(EVDFieldAll); p.Flags != EVDAsync || p.QLen != 4 || p.CNO != nil {
		t.Fatalf("async EVD %+v", p)
	}
	// a second IA of the same provider may share the async EVD
	ia2, async2, err := r.OpenIA("a", 0, async)
	if err != nil || async2 != async {
		t.Fatal(err)
	}
	// an async EVD of another provider, or a non-async EVD, is refused
	if _, _, err := r.OpenIA("b", 0, async); !errors.Is(err, ErrInvalidHandleEVDAsync) {
		t.Fatal(err)
	}
	sw, _ := ia.CreateEVD(2, nil, EVDSoftware)
	if _, _, err := r.OpenIA("a", 0, sw); !errors.Is(err, ErrInvalidHandleEVDAsync) {
		t.Fatal(err)
	}
	if err := ia2.Close(CloseGraceful); err != nil {
		t.Fatal(err)
	}
	if _, err := async.Query(EVDFieldAll); err != nil {
		t.Fatal("closing the borrowing IA destroyed the async EVD")
	}
	if err := ia.Close(5); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	if err := ia.Close(CloseGraceful); !errors.Is(err, ErrInvalidStateIAInUse) {
		t.Fatal(err)
	}
	sw.Free()
	if err := ia.Close(CloseGraceful); err != nil {
		t.Fatal(err)
	}
	if _, err := async.Query(EVDFieldAll); !errors.Is(err, ErrInvalidHandle) {
		t.Fatal("provider-created async EVD survived IA close")
	}
	if _, _, err := ia.Query(IAFieldAll, 0); !errors.Is(err, ErrInvalidHandleIA) {
		t.Fatal(err)
	}
}

func TestIAQuery(t *testing.T) {
	ia, _ := testIA(t)
	a, p, err := ia.Query(IAFieldAll, 0)
	if err != nil {
		t.Fatal(err)
	}
	if a.AdapterName != "t" || a.MaxEPs <= 0 || a.MaxEVDQLen != maxEVDQLen || a.Address.(*net.IPAddr).IP.String() != "127.0.0.1" || !a.ZBSupported {
		t.Fatalf("%+v", a)
	}
	if p.DAPLVersionMajor != 2 || p.MaxPrivateDataSize < 64 || !p.SRQSupported || !p.ThreadSafe {
		t.Fatalf("%+v", p)
	}
	if _, _, err := ia.Query(1<<63, 0); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
}

// Abrupt close cascades through every object type.
func TestIACloseAbruptCascade(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	connectPair(t, srv, cli, nil)
	exchange(t, srv, cli)
	srq, _ := srv.ia.CreateSRQ(srv.pz, SRQAttr{MaxRecvDTOs: 2, MaxRecvIOV: 1})
	psp, _, _ := srv.ia.CreatePSPAny(srv.cr, PSPConsumer)
	cno, _ := srv.ia.CreateCNO(nil)
	objs := []Handle{srv.pz, srv.lmr, srv.rmr, srv.ep, srv.dto, srv.cr, srv.conn, srq, psp, cno}
	if err := srv.ia.Close(CloseAbrupt); err != nil {
		t.Fatal(err)
	}
	for _, h := range objs {
		if _, err := GetHandleType(h); !errors.Is(err, ErrInvalidHandle) {
			t.Errorf("%v survived IA close", h.HandleType())
		}
	}
	cli.waitConn(ConnectionEventDisconnected)
}

// §8.3.3 dat_ia_openv.
func TestOpenIAv(t *testing.T) {
	r := NewRegistry()
	r.AddProvider(&Provider{Info: ProviderInfo{Name: "v", VersionMajor: 2, VersionMinor: 0, ThreadSafe: false}, InstanceData: "iwarp 127.0.0.1"})
	for _, c := range []struct {
		name         string
		major, minor uint32
		ts           bool
		want         error
	}{
		{"nope", 2, 0, false, ErrNameNotRegistered},
		{"v", 1, 0, false, ErrMajorNotFound},
		{"v", 2, 1, false, ErrMinorNotFound},
		{"v", 2, 0, true, ErrThreadSafetyNotFound},
	} {
		if _, _, err := r.OpenIAv(c.name, 4, nil, c.major, c.minor, c.ts); !errors.Is(err, c.want) || !errors.Is(err, ErrProviderNotFound) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	ia, _, err := r.OpenIAv("v", 4, nil, 2, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	ia.Close(CloseGraceful)
}
