package rnic

// RecvOutstanding returns the number of receive WQEs the transport has taken from the
// QP's RQ or SRQ ([QP.TakeRecv]) whose completions have not been generated yet: each
// [QP.CompleteRecv] and each flush of a taken WQE ends its count. For a QP on an SRQ it is
// the number of SRQ buffers allocated to this QP (uDAPL dat_ep_recv_query
// nbufs_allocated). It takes the QP lock and does not allocate.
func (q *QP) RecvOutstanding() int {
	q.mu.Lock()
	n := len(q.taken)
	q.mu.Unlock()
	return n
}
