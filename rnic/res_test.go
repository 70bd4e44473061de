package rnic

import (
	"runtime"
	"testing"
	"time"
)

func TestResourceListing(t *testing.T) {
	d, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pd, _ := d.AllocPD()
	pd2, _ := d.AllocPD()
	cq, _ := d.CreateCQ(64)
	buf := make([]byte, 4096)
	mr, err := pd.RegMR(buf, AccessLocalWrite|AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	fr, _ := pd2.AllocMR(8192)
	if _, err := pd.AllocMW(1); err != nil {
		t.Fatal(err)
	}

	pds := d.PDs()
	if len(pds) != 2 || pds[0].Num != pd.Num() || pds[1].Num != pd2.Num() || pds[0].Users != 2 || pds[1].Users != 1 {
		t.Fatalf("PDs %+v (pd %d with an MR and an MW, pd2 %d with a fast-register MR)", pds, pd.Num(), pd2.Num())
	}
	cqs := d.CQs()
	if len(cqs) != 1 || cqs[0] != (CQInfo{Num: cq.Num(), Depth: 64}) {
		t.Fatalf("CQs %+v", cqs)
	}
	mrs := d.MRs()
	want := []MRInfo{
		{STag: mr.LKey(), PD: pd.Num(), Len: 4096, IOVA: mr.Addr(), Access: AccessLocalWrite | AccessRemoteRead, Valid: true},
		{STag: fr.LKey(), PD: pd2.Num(), FastReg: true},
	}
	if len(mrs) != 2 || mrs[0] != want[0] || mrs[1] != want[1] {
		t.Fatalf("MRs %+v, want %+v (windows are not listed)", mrs, want)
	}

	// Destroy, Dealloc and Dereg take them off the lists.
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := pd2.Dealloc(); err == nil {
		t.Fatal("Dealloc of a PD with a region succeeded")
	}
	if err := fr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := pd2.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if got := d.CQs(); len(got) != 0 {
		t.Fatalf("CQs after Destroy: %+v", got)
	}
	if got := d.MRs(); len(got) != 0 {
		t.Fatalf("MRs after Dereg: %+v", got)
	}
	if got := d.PDs(); len(got) != 1 || got[0].Num != pd.Num() {
		t.Fatalf("PDs after Dealloc: %+v", got)
	}
}

// A CQ or PD the program dropped is not kept alive by the listing and leaves it.
func TestResourceListingDropped(t *testing.T) {
	d, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	func() {
		for range 100 {
			if _, err := d.CreateCQ(1024); err != nil {
				t.Fatal(err)
			}
			if _, err := d.AllocPD(); err != nil {
				t.Fatal(err)
			}
		}
	}()
	if n := len(d.CQs()); n == 0 {
		t.Fatal("no CQ listed right after creating 100")
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(d.CQs())+len(d.PDs()) != 0 || tableLen(&d.cqs)+tableLen(&d.pds) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("dropped objects still listed: %d CQs, %d PDs, table %d+%d", len(d.CQs()), len(d.PDs()), tableLen(&d.cqs), tableLen(&d.pds))
		}
		runtime.GC()
		runtime.Gosched()
	}
}

func tableLen[T any](t *resTable[T]) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
