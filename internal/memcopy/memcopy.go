// Package memcopy copies payloads into registered memory (and out of it) without the
// slow case of the Go runtime's memmove on recent Intel CPUs.
//
// runtime.memmove on amd64 (golang/go#66958; the code as of Go 1.26) copies 2,048
// bytes or more with REP MOVSQ on an Intel CPU with ERMS and FSRM whenever the
// destination is 16-byte aligned, whatever the source's alignment. On the Xeon this
// project's pages are measured on, REP MOVSQ from a source that is not 8-byte aligned
// runs at about a fifth of the speed of the runtime's AVX loop:
// `go test -run '^$' -bench Copy ./internal/memcopy` gives 166–177 ns for 4 KiB from
// a source 4, 12 or 28 bytes past an 8-byte boundary to a 16-byte-aligned destination
// with the builtin copy, 36–37 ns with Copy, and 26–29 ns for both when the source is
// aligned too. Misaligned sources are a transport's usual case: a payload follows
// 12 or 28 bytes of RoCEv2 headers (BTH, RETH) in a receive buffer, or MPA and DDP
// headers at any offset of a TCP stream, and goes to a page-aligned region.
//
// Copy moves the destination off 16-byte alignment by copying the first 8 bytes on
// their own, which sends the rest through the AVX loop. Where the runtime would not
// take REP MOVSQ, where the source is 8-byte aligned, or where the slices overlap, it
// is the builtin copy.
package memcopy

// repMinLen is the length from which runtime.memmove on amd64 may take REP MOVSQ.
const repMinLen = 2048
