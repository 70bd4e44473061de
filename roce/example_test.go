package roce_test

import (
	"fmt"

	"github.com/softrnic/softrnic/roce"
)

// Build an RDMA WRITE ONLY packet for IPv4 and parse it back.
func Example() {
	payload := []byte("hello, rdma")
	src, dst := [4]byte{192, 168, 77, 1}, [4]byte{192, 168, 77, 2}
	sport := roce.UDPSourcePort(0, 0x11, 0x19)

	h := roce.Header{Opcode: roce.RCWriteOnly, PKey: roce.DefaultPKey, DestQP: 0x19, AckReq: true,
		PSN: 0xfffffe, VA: 0x1000, RKey: 0xabcd, DMALen: uint32(len(payload))}
	b := make([]byte, 0, 128)
	b = h.Append(b, len(payload))
	b = append(b, payload...)
	b = roce.AppendPad(b, len(payload))
	b = roce.AppendICRC(b, roce.ICRCv4(src, dst, 0, true, sport, roce.UDPPort, b))

	p, err := roce.ParsePacket(b)
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Opcode(), p.Opcode().Headers(), p.BTH.PSN(), p.BTH.PSN().Add(3))
	fmt.Printf("va=%#x rkey=%#x len=%d pad=%d payload=%q\n",
		p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen(), len(p.Pad), p.Payload)
	fmt.Println(roce.ICRCv4(src, dst, 0, true, sport, roce.UDPPort, p.Covered()) == p.ICRCValue())
	// Output:
	// RC_RDMA_WRITE_ONLY RETH fffffe 000001
	// va=0x1000 rkey=0xabcd len=11 pad=1 payload="hello, rdma"
	// true
}

// Decode a responder's AETH syndrome.
func ExampleSyndrome() {
	for _, s := range []roce.Syndrome{roce.SyndromeACK, roce.RNRNAKSyndrome(roce.RNRTimerFor(1000_000)), roce.SyndromeRemoteAccessError} {
		switch {
		case s.IsACK():
			fmt.Println("ack, credits", s.Credits())
		case s.IsRNRNAK():
			fmt.Println("rnr nak, retry after", s.RNRTimer().Duration())
		case s.IsNAK():
			fmt.Println("nak:", s.NAKCode())
		}
	}
	// Output:
	// ack, credits 31
	// rnr nak, retry after 1.28ms
	// nak: REMOTE_ACCESS_ERROR
}
