package bench

// filled returns n bytes of a non-zero pattern, for the memory a benchmark copies from:
// softrnic's source regions and the baselines' send buffers alike. Memory a process
// never wrote is the kernel's shared zero page until written, so a copy from it reads one
// page that stays in the cache, where a program's data is spread over its own pages; an
// unwritten source made a run fast or not by whether it got fresh memory (bench/README
// has the runs).
func filled(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i) | 1
	}
	return b
}
