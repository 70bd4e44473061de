package iwarp

import (
	"net"

	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rnic"
)

// Transmit batching. Without Markers the sender frames FPDUs itself (RFC 5044 §4.1:
// length, ULPDU, pad, CRC32c) into one iovec list and writes many FPDUs — of one message
// or of several queued work requests — with a single vectored write straight from the
// registered memory. Send WQEs written into the batch complete after the write succeeds.
// With Markers every FPDU goes through mpa.Writer, which places them.

const (
	batchIOV   = 256       // iovec entries (Linux IOV_MAX is 1024)
	batchArena = 8 << 10   // bytes of headers and trailers
	batchBytes = 512 << 10 // flush threshold
)

type txBatch struct {
	store []([]byte) // backing of iov
	iov   net.Buffers
	arena []byte
	used  int
	bytes int
	done  []*rnic.SendWQE // complete after the flush
	crc   bool
}

func newTxBatch(crc bool) txBatch {
	return txBatch{store: make([][]byte, batchIOV), arena: make([]byte, batchArena),
		done: make([]*rnic.SendWQE, 0, 64), crc: crc}
}

// fpdu frames one FPDU whose ULPDU is hdr followed by payload.
func (c *Conn) fpdu(hdr []byte, payload [][]byte) error {
	if c.params.TxMarkers {
		return c.wr.WriteFPDU(hdr, payload)
	}
	t := &c.tx
	ulen := len(hdr)
	for _, p := range payload {
		ulen += len(p)
	}
	if ulen > mpa.MaxULPDU {
		return mpa.ErrULPDUTooLong
	}
	pad := mpa.PadLen(ulen)
	need := mpa.LengthLen + len(hdr) + pad + mpa.CRCLen
	if t.used+need > len(t.arena) || len(t.iov)+len(payload)+2 > len(t.store) {
		if err := c.flush(); err != nil {
			return err
		}
	}
	if len(t.iov) == 0 {
		t.iov = t.store[:0]
	}
	h := t.arena[t.used : t.used+mpa.LengthLen+len(hdr)]
	be.PutUint16(h, uint16(ulen))
	copy(h[mpa.LengthLen:], hdr)
	t.used += len(h)
	t.iov = append(t.iov, h)
	var crc uint32
	if t.crc {
		crc = mpa.CRC32c(h)
	}
	for _, p := range payload {
		if len(p) == 0 {
			continue
		}
		t.iov = append(t.iov, p)
		if t.crc {
			crc = mpa.UpdateCRC32c(crc, p)
		}
	}
	tr := t.arena[t.used : t.used+pad+mpa.CRCLen]
	t.used += len(tr)
	clear(tr[:pad])
	if t.crc {
		crc = mpa.UpdateCRC32c(crc, tr[:pad])
	}
	mpa.PutCRC(tr[pad:], crc)
	t.iov = append(t.iov, tr)
	t.bytes += mpa.LengthLen + ulen + pad + mpa.CRCLen
	if t.bytes >= batchBytes {
		return c.flush()
	}
	return nil
}

// flush writes the batch and completes the WQEs written in it.
func (c *Conn) flush() error {
	t := &c.tx
	if len(t.iov) > 0 {
		n := len(t.iov)
		_, err := t.iov.WriteTo(c.nc)
		clear(t.store[:n])
		t.iov = t.store[:0]
		t.used, t.bytes = 0, 0
		if err != nil {
			return err
		}
	}
	for i, w := range t.done {
		c.qp.CompleteSend(w, rnic.StatusSuccess)
		t.done[i] = nil
	}
	t.done = t.done[:0]
	return nil
}
