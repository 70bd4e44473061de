package uapi

import (
	"bufio"
	"bytes"
	"fmt"
	"testing"
)

// BenchmarkGetResponse encodes and decodes the get answer of a device with 64 QPs (the
// control path, not a data path: it allocates per call).
func BenchmarkGetResponse(b *testing.B) {
	s := Status{Device: "softrnic0", ListenIWARP: []string{"127.0.0.1:4000"}}
	for i := range 64 {
		s.QPs = append(s.QPs, QPStatus{QPN: uint32(i + 1), Transport: "iwarp", State: "RTS",
			Peer: fmt.Sprintf("10.0.0.%d:5000", i), Counters: Counters{TxBytes: uint64(i) << 30}})
	}
	var buf []byte
	r := bufio.NewReader(nil)
	b.ReportAllocs()
	for b.Loop() {
		resp := Response{Pairs: s.Pairs()}
		buf = resp.Append(buf[:0])
		r.Reset(bytes.NewReader(buf))
		got, err := ReadResponse(r)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := DecodeStatus(got.Pairs); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkReadRequest parses a set request of 16 pairs.
func BenchmarkReadRequest(b *testing.B) {
	q := Request{Op: OpSet}
	for i := range 16 {
		q.Pairs = append(q.Pairs, Pair{"listen_iwarp", fmt.Sprintf("127.0.0.1:%d", 4000+i)})
	}
	msg := q.Append(nil)
	r := bufio.NewReader(nil)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(bytes.NewReader(msg))
		if _, err := ReadRequest(r); err != nil {
			b.Fatal(err)
		}
	}
}
