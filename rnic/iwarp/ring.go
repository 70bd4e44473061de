package iwarp

// ring is a fixed-capacity FIFO.
type ring[T any] struct {
	buf     []T
	head, n int
}

func newRing[T any](n int) ring[T] { return ring[T]{buf: make([]T, max(n, 1))} }
func (r *ring[T]) full() bool      { return r.n == len(r.buf) }
func (r *ring[T]) push(v T) bool {
	if r.full() {
		return false
	}
	r.buf[(r.head+r.n)%len(r.buf)] = v
	r.n++
	return true
}
func (r *ring[T]) front() *T { return &r.buf[r.head] }
func (r *ring[T]) pop() T {
	v := r.buf[r.head]
	var z T
	r.buf[r.head] = z
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return v
}
