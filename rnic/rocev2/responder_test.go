package rocev2

import (
	"testing"
	"time"

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

// TestDeferAckOnce: a batch run by a Wait defers its ACK (rxDrive.deferAck) only when no
// ACK is owed from the batch before: a stream whose every message completes a Wait still
// sends an ACK every other batch. Once the owed ACK has been sent, the next batch defers
// again.
func TestDeferAckOnce(t *testing.T) {
	e := &Endpoint{}
	c := &Conn{e: e}
	c.ackDeferMax = time.Hour // no tick during the test
	d := &rxDrive{e: e, waiting: true}
	d.sole.Store(c)
	r := &rxCtx{ctl: make([]ctlPkt, 4)}
	for round := range 3 {
		c.ackPending = true // the batch executed requests that ask for an ACK
		if !d.deferAck(c) {
			t.Fatalf("round %d: the first batch's ACK was not deferred", round)
		}
		c.ackPending = true // the next batch, with the first ACK still owed
		if d.deferAck(c) {
			t.Fatalf("round %d: an ACK deferred across two batches", round)
		}
		c.flushAck(r) // endBatch then sends the coalesced ACK
		if r.nctl != 1 || c.ackPending || c.ackOwed {
			t.Fatalf("round %d: %d control packets queued, ackPending %v, owed %v", round, r.nctl, c.ackPending, c.ackOwed)
		}
		r.nctl = 0
	}
	if n := e.AcksDeferred.Load(); n != 3 {
		t.Fatalf("AcksDeferred %d, want 3", n)
	}
	c.ackTimer.Stop()
}
