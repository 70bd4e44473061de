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
