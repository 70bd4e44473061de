package dat

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/softrnic/softrnic/rnic/iwarp"
)

// §8.2 registry APIs.

func TestListProviders(t *testing.T) {
	r := NewRegistry()
	for _, n := range []string{"b", "a", "c"} {
		if err := r.AddProvider(&Provider{Info: ProviderInfo{Name: n, VersionMajor: 2}, InstanceData: "iwarp 127.0.0.1"}); err != nil {
			t.Fatal(err)
		}
	}
	l, n, err := r.ListProviders(3)
	if err != nil || n != 3 || l[0].Name != "a" || l[2].Name != "c" {
		t.Fatalf("%v %d %v", l, n, err)
	}
	if _, n, err := r.ListProviders(2); !errors.Is(err, ErrInvalidParameter) || n != 3 {
		t.Fatalf("too small: n=%d err=%v", n, err)
	}
	if _, _, err := r.ListProviders(0); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("zero: %v", err)
	}
}

func TestAddRemoveProvider(t *testing.T) {
	r := NewRegistry()
	p := &Provider{Info: ProviderInfo{Name: "x", VersionMajor: 2}, InstanceData: "iwarp"}
	if err := r.AddProvider(nil); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	if err := r.AddProvider(&Provider{}); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	if err := r.AddProvider(p); err != nil {
		t.Fatal(err)
	}
	if err := r.AddProvider(&Provider{Info: ProviderInfo{Name: "x"}}); !errors.Is(err, ErrProviderAlreadyRegistered) {
		t.Fatal(err)
	}
	for i := 0; r.AddProvider(&Provider{Info: ProviderInfo{Name: fmt.Sprint("p", i)}}) == nil; i++ {
		if i > maxProviders {
			t.Fatal("no limit")
		}
	}
	if err := r.AddProvider(&Provider{Info: ProviderInfo{Name: "zz"}}); !errors.Is(err, ErrInsufficientResources) {
		t.Fatal(err)
	}
	ia, _, err := r.OpenIA("x", 8, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveProvider(p); !errors.Is(err, ErrProviderInUse) {
		t.Fatalf("in use: %v", err)
	}
	if err := ia.Close(CloseGraceful); err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveProvider(p); err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveProvider(p); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("twice: %v", err)
	}
	if _, _, err := r.OpenIA("x", 8, nil); !errors.Is(err, ErrNameNotRegistered) || !errors.Is(err, ErrProviderNotFound) {
		t.Fatalf("open removed: %v", err)
	}
}

func TestProvidersRelated(t *testing.T) {
	r := NewRegistry()
	a := &Provider{Info: ProviderInfo{Name: "a"}, InstanceData: "iwarp 10.0.0.1"}
	b := &Provider{Info: ProviderInfo{Name: "b"}, InstanceData: "iwarp 10.0.0.1"}
	c := &Provider{Info: ProviderInfo{Name: "c"}, InstanceData: "iwarp 10.0.0.2", Related: []string{"a"}}
	d := &Provider{Info: ProviderInfo{Name: "d"}, InstanceData: "iwarp 10.0.0.3"}
	for _, p := range []*Provider{a, b, c, d} {
		if err := r.AddProvider(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		x, y string
		want HARelationship
	}{{"a", "b", HATrue}, {"a", "d", HAFalse}, {"c", "a", HAConflicting}, {"a", "a", HATrue}} {
		got, err := r.ProvidersRelated(c.x, c.y)
		if err != nil || got != c.want {
			t.Errorf("%s~%s = %v %v, want %v", c.x, c.y, got, err, c.want)
		}
	}
	if _, err := r.ProvidersRelated("a", "nope"); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
}

func TestDefaultRegistry(t *testing.T) {
	l, _, err := ListProviders(NameMaxLength)
	if err != nil || len(l) < 1 {
		t.Fatalf("%v %v", l, err)
	}
	rel, err := ProvidersRelated("softrnic-iwarp", "ofa-v2-iwarp")
	if err != nil || rel != HATrue {
		t.Fatalf("%v %v", rel, err)
	}
}

// Provider.IWARP configures the iWARP transport of the provider's IAs: here
// a smaller private-data cap and no MPA CRC request, talking to an IA with
// the default configuration (CRC is used when either side asks, RFC 5044).
func TestProviderIWARPConfig(t *testing.T) {
	cfg := iwarp.DefaultConfig()
	cfg.MPA.CRC = false
	cfg.MPA.MaxPrivateData = 100
	r := NewRegistry()
	if err := r.AddProvider(&Provider{Info: ProviderInfo{Name: "c", VersionMajor: 2}, InstanceData: "iwarp 127.0.0.1", IWARP: cfg}); err != nil {
		t.Fatal(err)
	}
	ia, _, err := r.OpenIA("c", 16, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ia.Close(CloseAbrupt)
	if _, p, err := ia.Query(0, 0); err != nil || p.MaxPrivateDataSize != 96 {
		t.Fatalf("max private data %d, %v; want 96", p.MaxPrivateDataSize, err)
	}
	cfg.MPA.MaxPrivateData = 200 // the provider keeps its own copy per IA
	if _, p, _ := ia.Query(0, 0); p.MaxPrivateDataSize != 96 {
		t.Fatalf("config shared with the caller: %d", p.MaxPrivateDataSize)
	}
	pz, err := ia.CreatePZ()
	if err != nil {
		t.Fatal(err)
	}
	conn := mustEVD(t, ia, 8, nil, EVDConnection)
	ep, err := ia.CreateEP(pz, nil, nil, conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := newSide(t, "server")
	psp, qual, err := srv.ia.CreatePSPAny(srv.cr, PSPConsumer)
	if err != nil {
		t.Fatal(err)
	}
	defer psp.Free()
	if err := ep.Connect(loopback(), qual, waitT, []byte("hi"), QoSBestEffort, ConnectDefault); err != nil {
		t.Fatal(err)
	}
	if err := srv.wait(srv.cr).CR.CR.Accept(srv.ep, nil); err != nil {
		t.Fatal(err)
	}
	if ev, _, err := conn.Wait(context.Background(), waitT, 1); err != nil || ev.Number != ConnectionEventEstablished {
		t.Fatalf("%v %v", ev.Number, err)
	}
}
