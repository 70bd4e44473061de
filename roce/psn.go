package roce

import "fmt"

// PSN is a 24-bit packet sequence number (IBTA Vol.1 §9.7.1). All arithmetic
// is modulo 2^24; comparisons are wrap-safe and treat the sequence space as a
// circle split into two halves of 2^23.
type PSN uint32

// PSNMask masks a value to 24 bits.
const PSNMask = 0x00FFFFFF

const psnHalf = 1 << 23

// Add returns p+n modulo 2^24.
func (p PSN) Add(n uint32) PSN { return PSN((uint32(p) + n) & PSNMask) }

// Prev returns p-1 modulo 2^24 (the last PSN before p, as a cumulative ACK names it).
func (p PSN) Prev() PSN { return PSN((uint32(p) - 1) & PSNMask) }

// Sub returns p-q modulo 2^24 as an unsigned distance (how far q is behind p).
func (p PSN) Sub(q PSN) uint32 { return (uint32(p) - uint32(q)) & PSNMask }

// Distance returns the signed distance from q to p in the range
// [-2^23, 2^23): positive when p is after q.
func (p PSN) Distance(q PSN) int32 {
	d := p.Sub(q)
	if d >= psnHalf {
		return int32(d) - (1 << 24)
	}
	return int32(d)
}

// Less reports whether p comes before q in wrap-safe order.
func (p PSN) Less(q PSN) bool { return p.Distance(q) < 0 }

// LessEq reports whether p == q or p comes before q.
func (p PSN) LessEq(q PSN) bool { return p.Distance(q) <= 0 }

// InWindow reports whether p lies in the half-open window [start, start+size)
// modulo 2^24. size must not exceed 2^23 for the answer to be meaningful.
func (p PSN) InWindow(start PSN, size uint32) bool { return p.Sub(start) < size }

// Valid reports whether p fits in 24 bits.
func (p PSN) Valid() bool { return p <= PSNMask }

// String returns the PSN as 6 hex digits, as rxe and ibv_rc_pingpong print it.
func (p PSN) String() string { return fmt.Sprintf("%06x", uint32(p)) }

// MSN is the responder's 24-bit message sequence number carried in the AETH (IBTA Vol.1
// §9.7.5.1.4, §9.3.5): the count of messages completed, modulo 2^24. It is a sequence
// number like PSN, so the same wrap-safe arithmetic applies.
type MSN uint32

// Next returns m+1 modulo 2^24.
func (m MSN) Next() MSN { return MSN((uint32(m) + 1) & MSNMask) }

// Add returns m+n modulo 2^24.
func (m MSN) Add(n uint32) MSN { return MSN((uint32(m) + n) & MSNMask) }

// Distance returns the signed distance from n to m in [-2^23, 2^23): positive when m is after n.
func (m MSN) Distance(n MSN) int32 { return PSN(m).Distance(PSN(n)) }

// Less reports whether m comes before n in wrap-safe order.
func (m MSN) Less(n MSN) bool { return m.Distance(n) < 0 }
