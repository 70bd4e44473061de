package bench

// filled returns n bytes of a non-zero pattern, for the memory a benchmark copies from:
// softrnic's source regions and the baselines' send buffers alike. Memory a process
// never wrote is the kernel's shared zero page until written, so a copy from it reads one
// page that stays in the cache, where a program's data is spread over its own pages. A
// benchmark's source left unwritten was fast or not depending on whether it happened to
// get fresh memory or memory earlier runs had used: 1 MiB RDMA READs with CRC ran at
// 3,700–4,300 MB/s in a fresh process (-test.benchtime 4000x) and at 2,950–3,050 MB/s
// after the warm-up runs of the default -test.benchtime, with the raw TCP baseline at
// 3,700–4,000 MB/s in both (bench/README).
func filled(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i) | 1
	}
	return b
}
