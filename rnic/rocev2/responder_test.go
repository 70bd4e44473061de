package rocev2

import (
	"testing"

	"github.com/softrnic/softrnic/roce"
)

// TestResponderResources: the responder keeps the last MaxDestRd READs and atomics
// (remember), allocating them a chunk at a time: none before the first, a chunk per 16
// while they fill, then the oldest overwritten; an entry found stays where it is (a queued
// re-execution points at it) until it is overwritten.
func TestResponderResources(t *testing.T) {
	const ird = 40 // two whole chunks and part of a third
	c := &Conn{cfg: qpParams{MaxDestRd: ird}}
	if len(c.res) != 0 || c.findRes(0, false) != nil {
		t.Fatal("resources before the first READ")
	}
	read := func(i int) rdRes { // READ i: response PSNs 10i..10i+9
		return rdRes{first: roce.PSN(10 * i), last: roce.PSN(10*i + 9), va: uint64(i)}
	}
	c.remember(read(0))
	first := c.findRes(5, false)
	if first == nil || first.va != 0 || len(c.res) != 1 {
		t.Fatalf("after one READ: %+v, %d chunks", first, len(c.res))
	}
	for i := 1; i < ird; i++ {
		c.remember(read(i))
		if want := i/resChunk + 1; len(c.res) != want {
			t.Fatalf("after %d READs: %d chunks, want %d", i+1, len(c.res), want)
		}
	}
	if c.findRes(5, false) != first {
		t.Fatal("the first READ's resource moved as chunks were added")
	}
	if c.findRes(5, true) != nil {
		t.Fatal("a READ's PSN found as an atomic's")
	}
	const more = 7
	for i := ird; i < ird+more; i++ {
		c.remember(read(i))
	}
	if len(c.res) != (ird+resChunk-1)/resChunk {
		t.Fatalf("%d chunks after the overwrites", len(c.res))
	}
	for i := 0; i < ird+more; i++ {
		x := c.findRes(roce.PSN(10*i+3), false)
		if kept := i >= more; kept != (x != nil) || kept && x.va != uint64(i) {
			t.Fatalf("READ %d: found %+v, want it kept: %v", i, x, kept)
		}
	}
	c.remember(rdRes{atomic: true, first: 9999, last: 9999, orig: 42})
	if a := c.findRes(9999, true); a == nil || a.orig != 42 || c.findRes(9999, false) != nil {
		t.Fatalf("atomic: %+v", a)
	}
}
