package ddp

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The first FPDU of rping over siw (interop-vm.md) and RFC 5044 Figure 5 carry
// the same DDP header after the MPA length: untagged, L, Send, QN 0, MSN 1, MO 0.
func TestUntaggedFigure(t *testing.T) {
	for _, s := range []string{
		"0022 4143 00000000 00000000 00000001 00000000", // siw rping SEND (interop-vm.md)
		"002a 4143 00000000 00000000 00000001 00000000", // RFC 5044 §4.4 Figure 5
	} {
		fpdu := unhex(t, s)
		b := fpdu[2:]
		n, err := Check(b)
		if err != nil || n != UntaggedLen {
			t.Fatalf("Check = %d, %v", n, err)
		}
		h := Untagged(b)
		if !h.IsValid() || h.Tagged() || !h.Last() || h.Version() != 1 || h.ULPControl() != 0x43 ||
			h.RsvdULP() != 0x43 || h.ULPField() != 0 || h.QN() != QNSend || h.MSN() != 1 || h.MO() != 0 ||
			h.Control() != 0x41 {
			t.Fatalf("fields: % x", b)
		}
		out := make(Untagged, UntaggedLen)
		out.Init(true, 0x43, 0, QNSend, 1, 0)
		if !bytes.Equal(out, b) {
			t.Fatalf("Init = % x, want % x", []byte(out), b)
		}
	}
}

// Control words from siw (siw-interop-facts.md §1): T/L and the DDP version.
func TestControlWords(t *testing.T) {
	for _, c := range []struct {
		word         uint16
		tagged, last bool
	}{
		{0xC140, true, true}, {0x4141, false, true}, {0xC142, true, true},
		{0x4143, false, true}, {0x4147, false, true}, {0x8140, true, false}, {0x0143, false, false},
	} {
		ctrl := byte(c.word >> 8)
		if IsTaggedHeader([]byte{ctrl}) != c.tagged {
			t.Errorf("%#04x tagged", c.word)
		}
		if got := ctrlByte(c.tagged, c.last); got != ctrl {
			t.Errorf("ctrlByte(%v,%v) = %#02x want %#02x", c.tagged, c.last, got, ctrl)
		}
		if want := map[bool]int{true: TaggedLen, false: UntaggedLen}[c.tagged]; HeaderLen(ctrl) != want {
			t.Errorf("%#04x HeaderLen", c.word)
		}
	}
}

func TestTaggedRoundTrip(t *testing.T) {
	b := make(Tagged, TaggedLen)
	b.Init(false, 0x40, 0x01020304, 0x1122334455667788)
	want := unhex(t, "8140 01020304 1122334455667788")
	if !bytes.Equal(b, want) {
		t.Fatalf("Init = % x", []byte(b))
	}
	if !b.Tagged() || b.Last() || b.Version() != 1 || b.STag() != 0x01020304 || b.TO() != 0x1122334455667788 || b.ULPControl() != 0x40 || b.RsvdULP() != 0x40 {
		t.Fatal("accessors")
	}
	b.SetLast(true)
	b.SetSTag(7)
	b.SetTO(9)
	b.SetULPControl(0x42)
	if !b.Last() || b.STag() != 7 || b.TO() != 9 || b.Control() != 0xC1 || b.ULPControl() != 0x42 {
		t.Fatal("setters")
	}
	b.SetLast(false)
	if b.Last() {
		t.Fatal("SetLast(false)")
	}
	if n, err := Check(b); n != TaggedLen || err != nil {
		t.Fatal(n, err)
	}
}

func TestUntaggedSetters(t *testing.T) {
	h := make(Untagged, UntaggedLen)
	h.Init(false, 0x44, 0xdeadbeef, 2, 0xffffffff, 1482)
	h.SetQN(1)
	h.SetMSN(5)
	h.SetMO(6)
	h.SetULPField(8)
	h.SetULPControl(0x46)
	h.SetLast(true)
	want := unhex(t, "4146 00000008 00000001 00000005 00000006")
	if !bytes.Equal(h, want) {
		t.Fatalf("got % x", []byte(h))
	}
}

func TestCheckErrors(t *testing.T) {
	tag := unhex(t, "c140 00000001 0000000000000000")
	untag := unhex(t, "4143 00000000 00000000 00000001 00000000")
	for _, frame := range [][]byte{tag, untag} {
		for i := range len(frame) {
			if _, err := Check(frame[:i]); !errors.Is(err, ErrShort) {
				t.Fatalf("prefix %d of % x: %v", i, frame, err)
			}
		}
	}
	for dv := byte(0); dv < 4; dv++ {
		for _, frame := range [][]byte{tag, untag} {
			b := bytes.Clone(frame)
			b[0] = b[0]&^CtrlVersionMask | dv
			_, err := Check(b)
			if dv == 1 {
				if err != nil {
					t.Fatal(err)
				}
				continue
			}
			if !errors.Is(err, ErrVersion) {
				t.Fatalf("dv %d: %v", dv, err)
			}
			want := ErrUntaggedVersion
			if IsTaggedHeader(b) {
				want = ErrTaggedVersion
			}
			if !errors.Is(err, want) {
				t.Fatalf("dv %d: %v, want %v", dv, err, want)
			}
		}
	}
	// Reserved bits are not checked on receive (RFC 5041 §4.1).
	b := bytes.Clone(untag)
	b[0] |= CtrlRsvdMask
	if _, err := Check(b); err != nil {
		t.Fatal(err)
	}
}

func TestErrors(t *testing.T) {
	all := []*Error{ErrLocalCatastrophic, ErrInvalidSTag, ErrBaseBounds, ErrSTagNotAssociated, ErrTOWrap,
		ErrTaggedVersion, ErrInvalidQN, ErrMSNNoBuffer, ErrMSNRange, ErrInvalidMO, ErrMessageTooLong, ErrUntaggedVersion}
	seen := map[string]bool{}
	for _, e := range all {
		if e.Layer() != 1 || e.CodeName() == "" || seen[e.String()] {
			t.Errorf("%v: empty or duplicate name", e)
		}
		seen[e.String()] = true
		if !errors.Is(&Error{e.Type, e.Code}, e) {
			t.Errorf("%v: errors.Is by value", e)
		}
		for _, o := range all {
			if o != e && errors.Is(e, o) {
				t.Errorf("%v matches %v", e, o)
			}
		}
	}
	if got := ErrInvalidQN.Error(); got != "DDP untagged buffer error: invalid QN (1/2/0x01)" {
		t.Errorf("String = %q", got)
	}
	if got := (&Error{TypeUntagged, 0x77}).String(); !strings.Contains(got, "unassigned") || !strings.Contains(got, "0x77") {
		t.Errorf("String = %q", got)
	}
	if ErrorType(9).String() == "" || TypeLLP.String() == "" {
		t.Error("type names")
	}
}

func TestMSN(t *testing.T) {
	var m MSN = 0xffffffff
	if m.Next() != 0 || !m.Less(0) || !m.LessEq(m) || MSN(0).Less(m) || m.Sub(1) != -2 || m.Add(3) != 2 {
		t.Fatal("wrap")
	}
	if !MSN(1).InWindow(0xfffffffe, 4) || MSN(2).InWindow(0xfffffffe, 4) || MSN(5).InWindow(5, 0) {
		t.Fatal("window")
	}
}

func TestSegmenterRFCExamples(t *testing.T) {
	// RFC 5041 §5.2: 2048-octet untagged message, MULPDU 1500.
	type seg struct {
		off, n int
		last   bool
	}
	run := func(msg, hdr, mulpdu int) []seg {
		s, err := NewSegmenter(msg, hdr, mulpdu)
		if err != nil {
			t.Fatal(err)
		}
		var out []seg
		for {
			off, n, last, ok := s.Next()
			if !ok {
				break
			}
			out = append(out, seg{off, n, last})
		}
		if len(out) != s.Count() || s.Remaining() != 0 {
			t.Fatalf("Count %d, got %d segments", s.Count(), len(out))
		}
		return out
	}
	if got := run(2048, UntaggedLen, 1500); len(got) != 2 || got[0] != (seg{0, 1482, false}) || got[1] != (seg{1482, 566, true}) {
		t.Fatalf("untagged: %v", got)
	}
	got := run(2048, TaggedLen, 1500)
	if len(got) != 2 || got[0] != (seg{0, 1486, false}) || got[1] != (seg{1486, 562, true}) || 16384+got[1].off != 17870 {
		t.Fatalf("tagged: %v", got)
	}
	if got := run(0, TaggedLen, 1500); len(got) != 1 || got[0] != (seg{0, 0, true}) {
		t.Fatalf("zero: %v", got)
	}
	if got := run(2972, UntaggedLen, 1504); len(got) != 2 || got[1] != (seg{1486, 1486, true}) {
		t.Fatalf("exact: %v", got)
	}
	// Sweep: segments tile the message, all full but the last.
	for _, msg := range []int{1, 7, 100, 1486, 1487, 65536, 1 << 20} {
		for _, mulpdu := range []int{19, 20, 64, 1500, 9000} {
			if msg/(mulpdu-UntaggedLen) > 1<<16 {
				continue // keep the test fast under -race
			}
			segs := run(msg, UntaggedLen, mulpdu)
			pos := 0
			for i, s := range segs {
				if s.off != pos || s.n > mulpdu-UntaggedLen || (i < len(segs)-1 && (s.last || s.n != mulpdu-UntaggedLen)) {
					t.Fatalf("msg %d mulpdu %d seg %d: %v", msg, mulpdu, i, s)
				}
				pos += s.n
			}
			if pos != msg || !segs[len(segs)-1].last {
				t.Fatalf("msg %d mulpdu %d: covered %d", msg, mulpdu, pos)
			}
		}
	}
	if _, err := NewSegmenter(10, UntaggedLen, UntaggedLen); !errors.Is(err, ErrMULPDU) {
		t.Fatal(err)
	}
	if _, err := NewSegmenter(-1, UntaggedLen, 100); !errors.Is(err, ErrMessageSize) {
		t.Fatal(err)
	}
	if _, err := NewSegmenter(1<<32, UntaggedLen, 100); !errors.Is(err, ErrMessageSize) {
		t.Fatal(err)
	}
	var zero Segmenter
	if _, _, _, ok := zero.Next(); ok || zero.Count() != 0 {
		t.Fatal("zero Segmenter yields")
	}
	s, _ := NewSegmenter(MaxMessageLen, UntaggedLen, 1<<16)
	if s.Count() != (MaxMessageLen+(1<<16-UntaggedLen)-1)/(1<<16-UntaggedLen) {
		t.Fatal("max count")
	}
}

func TestUntaggedQueue(t *testing.T) {
	q := NewUntaggedQueue()
	if q.Expected() != 1 || q.Posted() != 0 {
		t.Fatal("initial")
	}
	if _, err := q.Accept(1, 0, 10, true, 100); !errors.Is(err, ErrMSNNoBuffer) {
		t.Fatalf("no buffer: %v", err)
	}
	q.Post(2)
	if _, err := q.Accept(0, 0, 10, true, 100); !errors.Is(err, ErrMSNRange) {
		t.Fatalf("old msn: %v", err)
	}
	if _, err := q.Accept(3, 0, 10, true, 100); !errors.Is(err, ErrMSNNoBuffer) {
		t.Fatalf("future msn: %v", err)
	}
	if _, err := q.Accept(1+MaxWindow, 0, 10, true, 100); !errors.Is(err, ErrMSNRange) {
		t.Fatalf("beyond window: %v", err)
	}
	if _, err := q.Accept(1, 100, 1, false, 100); !errors.Is(err, ErrInvalidMO) {
		t.Fatalf("mo: %v", err)
	}
	if _, err := q.Accept(1, 90, 11, false, 100); !errors.Is(err, ErrMessageTooLong) {
		t.Fatalf("too long: %v", err)
	}
	// Message 2 completes before message 1: delivery waits for 1.
	if slot, err := q.Accept(2, 0, 5, true, 10); err != nil || slot != 1 {
		t.Fatal(slot, err)
	}
	if _, _, ok := q.Deliver(); ok {
		t.Fatal("delivered out of order")
	}
	if _, err := q.Accept(2, 5, 1, false, 10); !errors.Is(err, ErrInvalidMO) {
		t.Fatalf("after last: %v", err)
	}
	if _, err := q.Accept(1, 0, 50, false, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Accept(1, 20, 10, true, 100); !errors.Is(err, ErrInvalidMO) {
		t.Fatalf("last below highest MO: %v", err)
	}
	if q.Complete(0) || q.Length(0) != 50 {
		t.Fatal("state changed by a rejected segment")
	}
	if slot, err := q.Accept(1, 50, 20, true, 100); err != nil || slot != 0 || !q.Complete(0) {
		t.Fatal(slot, err)
	}
	if m, l, ok := q.Deliver(); !ok || m != 1 || l != 70 {
		t.Fatal(m, l, ok)
	}
	if m, l, ok := q.Deliver(); !ok || m != 2 || l != 5 {
		t.Fatal(m, l, ok)
	}
	if _, _, ok := q.Deliver(); ok || q.Posted() != 0 || q.Expected() != 3 {
		t.Fatal("after delivery")
	}
	// Wrap: MSN 0xffffffff then 0.
	q.Reset(0xffffffff)
	q.Post(3)
	for _, m := range []MSN{0xffffffff, 0} {
		if _, err := q.Accept(m, 0, 0, true, 0); err != nil {
			t.Fatal(m, err)
		}
		if got, _, ok := q.Deliver(); !ok || got != m {
			t.Fatal(got, ok)
		}
	}
	if q.Expected() != 1 || q.Posted() != 1 {
		t.Fatal("wrap state", q.Expected(), q.Posted())
	}
	// Many messages through the ring.
	q.Reset(1)
	q.Post(^uint32(0))
	q.Post(5)
	if q.Posted() != ^uint32(0) {
		t.Fatal("Post saturates")
	}
	for i := range 1000 {
		m := MSN(1 + i)
		if _, err := q.Accept(m, 0, 3, false, 8); err != nil {
			t.Fatal(i, err)
		}
		if _, err := q.Accept(m, 3, 5, true, 8); err != nil {
			t.Fatal(i, err)
		}
		if got, l, ok := q.Deliver(); !ok || got != m || l != 8 {
			t.Fatal(i, got, l, ok)
		}
	}
	if q.Length(-1) != 0 || q.Length(MaxWindow) != 0 || q.Complete(MaxWindow) {
		t.Fatal("out-of-range slot")
	}
	if _, err := q.Accept(q.Expected(), 0, -1, true, 8); err == nil {
		t.Fatal("negative length")
	}
	// Zero-length segments are not bounds-checked (RFC 5041 §7.1).
	q.Reset(1)
	q.Post(1)
	if _, err := q.Accept(1, 100, 0, false, 100); err != nil {
		t.Fatalf("zero-length at end: %v", err)
	}
	// Unpost removes only untouched buffers from the tail.
	q.Reset(1)
	q.Post(3)
	q.Accept(2, 0, 1, false, 8)
	if k := q.Unpost(5); k != 1 || q.Posted() != 2 {
		t.Fatal("Unpost", k, q.Posted())
	}
	if err := CheckQN(3, 4); err != nil {
		t.Fatal(err)
	}
	if err := CheckQN(4, 4); !errors.Is(err, ErrInvalidQN) {
		t.Fatal(err)
	}
}

func TestCheckTaggedBounds(t *testing.T) {
	for _, c := range []struct {
		to           uint64
		n            int
		base, length uint64
		want         error
	}{
		{100, 10, 100, 10, nil},
		{100, 11, 100, 10, ErrBaseBounds},
		{99, 1, 100, 10, ErrBaseBounds},
		{109, 1, 100, 10, nil},
		{110, 0, 100, 10, nil},
		{1 << 40, 0, 0, 0, nil},
		{^uint64(0), 1, 0, ^uint64(0), ErrTOWrap},
		{^uint64(0) - 1, 1, ^uint64(0) - 1, 1, nil},
		{5, -1, 0, 10, ErrBaseBounds},
	} {
		if err := CheckTaggedBounds(c.to, c.n, c.base, c.length); err != c.want {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

func TestTaggedStream(t *testing.T) {
	var s TaggedStream
	steps := []struct {
		stag uint32
		to   uint64
		n    int
		last bool
		want error
	}{
		{1, 100, 10, false, nil},
		{2, 110, 10, false, ErrInvalidSTag},
		{1, 111, 10, false, ErrBaseBounds},
		{1, 110, 0, false, nil}, // zero-length: not checked
		{1, 110, 10, true, nil},
		{2, 0, 10, false, nil}, // new message
		{2, ^uint64(0) - 5, 10, false, ErrTOWrap},
		{2, 10, 5, true, nil},
		{9, 9, 0, true, nil},
		{3, 0, 0, false, nil},
		{4, 0, 5, false, nil},
		{4, 6, 5, false, ErrBaseBounds},
		{4, 5, -1, false, ErrBaseBounds},
	}
	for i, st := range steps {
		if err := s.Accept(st.stag, st.to, st.n, st.last); err != st.want {
			t.Fatalf("step %d: %v want %v", i, err, st.want)
		}
	}
	if !s.Active() {
		t.Fatal("active")
	}
	s.Reset()
	if s.Active() {
		t.Fatal("reset")
	}
}

// FuzzHeader checks Check → accessors → Init round-trips for both views and
// that no input panics.
func FuzzHeader(f *testing.F) {
	f.Add(unhex(f, "4143 00000000 00000000 00000001 00000000"))
	f.Add(unhex(f, "c140 00000001 0000000000001000"))
	f.Add(unhex(f, "8142 deadbeef ffffffffffffffff 00"))
	f.Add([]byte{0x42})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := Check(b)
		if err != nil {
			if len(b) == 0 || len(b) < HeaderLen(b[0]) {
				if !errors.Is(err, ErrShort) {
					t.Fatalf("short input: %v", err)
				}
			} else if !errors.Is(err, ErrVersion) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		out := make([]byte, n)
		if IsTaggedHeader(b) {
			h := Tagged(b)
			if !h.IsValid() || !h.Tagged() || n != TaggedLen {
				t.Fatal("tagged view")
			}
			Tagged(out).Init(h.Last(), h.ULPControl(), h.STag(), h.TO())
		} else {
			h := Untagged(b)
			if !h.IsValid() || h.Tagged() || n != UntaggedLen {
				t.Fatal("untagged view")
			}
			Untagged(out).Init(h.Last(), h.ULPControl(), h.ULPField(), h.QN(), h.MSN(), h.MO())
		}
		want := bytes.Clone(b[:n])
		want[0] &^= CtrlRsvdMask // reserved bits are zero on transmit
		if !bytes.Equal(out, want) {
			t.Fatalf("round trip\n got % x\nwant % x", out, want)
		}
		if m, err := Check(out); err != nil || m != n {
			t.Fatal("re-check", m, err)
		}
	})
}

var sink uint64

func BenchmarkUntaggedDecode(b *testing.B) {
	buf := unhex(b, "4143 00000000 00000000 00000001 00000000")
	b.ReportAllocs()
	b.SetBytes(UntaggedLen)
	for b.Loop() {
		n, err := Check(buf)
		if err != nil {
			b.Fatal(err)
		}
		h := Untagged(buf[:n])
		sink += uint64(h.QN()) + uint64(h.MSN()) + uint64(h.MO()) + uint64(h.ULPField()) + uint64(h.ULPControl())
	}
}

func BenchmarkTaggedDecode(b *testing.B) {
	buf := unhex(b, "c140 00000001 0000000000001000")
	b.ReportAllocs()
	b.SetBytes(TaggedLen)
	for b.Loop() {
		n, err := Check(buf)
		if err != nil {
			b.Fatal(err)
		}
		h := Tagged(buf[:n])
		sink += uint64(h.STag()) + h.TO()
	}
}

func BenchmarkUntaggedEncode(b *testing.B) {
	buf := make(Untagged, UntaggedLen)
	b.ReportAllocs()
	b.SetBytes(UntaggedLen)
	var i uint32
	for b.Loop() {
		i++
		buf.Init(i&1 == 0, 0x43, 0, QNSend, MSN(i), i)
	}
}

func BenchmarkTaggedEncode(b *testing.B) {
	buf := make(Tagged, TaggedLen)
	b.ReportAllocs()
	b.SetBytes(TaggedLen)
	var i uint64
	for b.Loop() {
		i++
		buf.Init(true, 0x40, uint32(i), i)
	}
}

// BenchmarkSegment64K segments a 64 KiB message at MULPDU 1448 and writes each
// segment's header, as the send path does.
func BenchmarkSegment64K(b *testing.B) {
	hdr := make(Tagged, TaggedLen)
	const msg = 64 << 10
	b.ReportAllocs()
	b.SetBytes(msg)
	for b.Loop() {
		s, err := NewSegmenter(msg, TaggedLen, 1448)
		if err != nil {
			b.Fatal(err)
		}
		for {
			off, n, last, ok := s.Next()
			if !ok {
				break
			}
			hdr.Init(last, 0x40, 1, 4096+uint64(off))
			sink += uint64(n)
		}
	}
}

func BenchmarkUntaggedQueueAccept(b *testing.B) {
	q := NewUntaggedQueue()
	b.ReportAllocs()
	for b.Loop() {
		q.Post(1)
		m := q.Expected()
		if _, err := q.Accept(m, 0, 1000, false, 2000); err != nil {
			b.Fatal(err)
		}
		if _, err := q.Accept(m, 1000, 1000, true, 2000); err != nil {
			b.Fatal(err)
		}
		if _, _, ok := q.Deliver(); !ok {
			b.Fatal("deliver")
		}
	}
}

// Segments of several messages, each cut by a Segmenter and interleaved at
// random (each message's own segments stay in order), are all accepted and
// delivered in MSN order with their full lengths.
func TestUntaggedQueueInterleaved(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		q := NewUntaggedQueue()
		q.Reset(MSN(rng.Uint32()))
		first := q.Expected()
		nmsg := 1 + rng.IntN(MaxWindow)
		q.Post(uint32(nmsg))
		lens := make([]int, nmsg)
		segs := make([]Segmenter, nmsg)
		for i := range lens {
			lens[i] = rng.IntN(5000)
			segs[i], _ = NewSegmenter(lens[i], UntaggedLen, 19+rng.IntN(1500))
		}
		var got []uint32
		for live := nmsg; live > 0; {
			i := rng.IntN(nmsg)
			off, n, last, ok := segs[i].Next()
			if !ok {
				continue
			}
			if last {
				live--
			}
			if _, err := q.Accept(first.Add(uint32(i)), uint32(off), n, last, uint64(lens[i])); err != nil {
				t.Fatalf("round %d msg %d off %d: %v", round, i, off, err)
			}
			for {
				m, l, ok := q.Deliver()
				if !ok {
					break
				}
				if m != first.Add(uint32(len(got))) {
					t.Fatalf("round %d: delivered %d, want %d", round, m, first.Add(uint32(len(got))))
				}
				got = append(got, l)
			}
		}
		if len(got) != nmsg || q.Posted() != 0 {
			t.Fatalf("round %d: delivered %d of %d", round, len(got), nmsg)
		}
		for i, l := range got {
			if int(l) != lens[i] {
				t.Fatalf("round %d msg %d: length %d want %d", round, i, l, lens[i])
			}
		}
	}
}
