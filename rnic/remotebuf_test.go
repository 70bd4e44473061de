package rnic

import (
	"bytes"
	"errors"
	"testing"
)

// TestRemoteBufferWire: the 16-byte big-endian layout of rping's struct rping_rdma_info.
func TestRemoteBufferWire(t *testing.T) {
	r := RemoteBuffer{Addr: 0x0102030405060708, RKey: 0x0a0b0c0d, Len: 0x00100000}
	b := r.Append([]byte{0xee})
	want := []byte{0xee, 1, 2, 3, 4, 5, 6, 7, 8, 0x0a, 0x0b, 0x0c, 0x0d, 0, 0x10, 0, 0}
	if !bytes.Equal(b, want) {
		t.Fatalf("% x", b)
	}
	got, err := ParseRemoteBuffer(append(b[1:], 0xff, 0xff)) // trailing bytes ignored
	if err != nil || got != r {
		t.Fatal(got, err)
	}
	for n := 0; n < RemoteBufferLen; n++ {
		if _, err := ParseRemoteBuffer(b[1 : 1+n]); !errors.Is(err, ErrShortRemoteBuffer) {
			t.Fatal(n, err)
		}
	}
	_, pd, _ := setup(t)
	mr, _ := pd.RegMRAt(make([]byte, 4096), 0x10000, AccessLocalWrite|AccessRemoteRead)
	if rb := mr.RemoteBuffer(16, 100); rb.Addr != 0x10010 || rb.RKey != mr.RKey() || rb.Len != 100 {
		t.Fatal(rb)
	}
}
