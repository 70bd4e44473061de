package dat

import (
	"testing"
)

func benchPair(b *testing.B, size int) (*side, *side) {
	srv, cli := newSide(b, "server"), newSide(b, "client")
	connectPair(b, srv, cli, nil)
	if size > len(cli.buf) {
		cli.buf = make([]byte, size)
		cli.lmr, _ = cli.ia.CreateLMR(cli.buf, cli.pz, MemPrivAll, VATypeVA)
		srv.buf = make([]byte, size)
		srv.lmr, _ = srv.ia.CreateLMR(srv.buf, srv.pz, MemPrivAll, VATypeVA)
	}
	return srv, cli
}

// BenchmarkRDMAWrite posts a signalled RDMA Write and waits for its DTO
// completion event: the dat hot path (post → engine → CQ handler → EVD →
// wait).
func BenchmarkRDMAWrite(b *testing.B) {
	for _, size := range []int{64, 4096, 65536} {
		b.Run(itoa(size), func(b *testing.B) {
			srv, cli := benchPair(b, size)
			iov := []LMRTriplet{cli.lmr.Triplet(0, size)}
			remote := srv.lmr.RMRTriplet(0, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := cli.ep.PostRDMAWrite(iov, uint64(i), remote, CompletionDefault); err != nil {
					b.Fatal(err)
				}
				ev, _, err := cli.dto.Wait(nil, waitT, 1)
				if err != nil || ev.DTO.Status != DTOSuccess {
					b.Fatal(ev.DTO, err)
				}
			}
		})
	}
}

// BenchmarkSendRecvPingPong is a Send/Recv round trip between two EPs.
func BenchmarkSendRecvPingPong(b *testing.B) {
	srv, cli := benchPair(b, 64)
	civ := []LMRTriplet{cli.lmr.Triplet(0, 64)}
	siv := []LMRTriplet{srv.lmr.Triplet(0, 64)}
	crv := []LMRTriplet{cli.lmr.Triplet(1024, 64)}
	srv_ := []LMRTriplet{srv.lmr.Triplet(1024, 64)}
	b.SetBytes(128)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		srv.ep.PostRecv(srv_, 1, 0)
		cli.ep.PostRecv(crv, 2, 0)
		if err := cli.ep.PostSend(civ, 3, CompletionDefault); err != nil {
			b.Fatal(err)
		}
		if _, _, err := srv.dto.Wait(nil, waitT, 1); err != nil { // the ping
			b.Fatal(err)
		}
		if err := srv.ep.PostSend(siv, 4, CompletionDefault); err != nil {
			b.Fatal(err)
		}
		for k := 0; k < 2; k++ { // own send completion and the pong
			if _, _, err := cli.dto.Wait(nil, waitT, 1); err != nil {
				b.Fatal(err)
			}
		}
		if _, _, err := srv.dto.Wait(nil, waitT, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// BenchmarkRDMAWriteRoCE is BenchmarkRDMAWrite over the RoCEv2 transport
// (UDP sockets on loopback).
func BenchmarkRDMAWriteRoCE(b *testing.B) {
	for _, size := range []int{64, 4096, 65536} {
		b.Run(itoa(size), func(b *testing.B) {
			srv, cli := roceSides(b)
			connectPairTo(b, srv, cli, nil, roceSrv)
			if size > len(cli.buf) {
				cli.buf = make([]byte, size)
				cli.lmr, _ = cli.ia.CreateLMR(cli.buf, cli.pz, MemPrivAll, VATypeVA)
				srv.buf = make([]byte, size)
				srv.lmr, _ = srv.ia.CreateLMR(srv.buf, srv.pz, MemPrivAll, VATypeVA)
			}
			iov := []LMRTriplet{cli.lmr.Triplet(0, size)}
			remote := srv.lmr.RMRTriplet(0, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := cli.ep.PostRDMAWrite(iov, uint64(i), remote, CompletionDefault); err != nil {
					b.Fatal(err)
				}
				ev, _, err := cli.dto.Wait(nil, waitT, 1)
				if err != nil || ev.DTO.Status != DTOSuccess {
					b.Fatal(ev.DTO, err)
				}
			}
		})
	}
}
