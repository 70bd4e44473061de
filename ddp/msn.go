package ddp

// MSN is a DDP Message Sequence Number (RFC 5041 §4.3). It starts at 1 on
// each queue and wraps from 0xFFFFFFFF to 0; comparisons are modulo 2^32 and
// valid for numbers less than 2^31 apart.
type MSN uint32

// InitialMSN is the MSN of the first message on each queue.
const InitialMSN MSN = 1

// Next returns m+1 (mod 2^32).
func (m MSN) Next() MSN { return m + 1 }

// Add returns m+n (mod 2^32).
func (m MSN) Add(n uint32) MSN { return m + MSN(n) }

// Sub returns the signed distance m-o.
func (m MSN) Sub(o MSN) int32 { return int32(m - o) }

// Less reports whether m comes before o.
func (m MSN) Less(o MSN) bool { return int32(m-o) < 0 }

// LessEq reports whether m comes before or equals o.
func (m MSN) LessEq(o MSN) bool { return int32(m-o) <= 0 }

// InWindow reports whether m lies in [lo, lo+n).
func (m MSN) InWindow(lo MSN, n uint32) bool { return uint32(m-lo) < n }
