package iwarp

import "github.com/softrnic/softrnic/rnic"

// Transmit batching. mpa.Writer frames FPDUs (RFC 5044 §4.1, §4.3: length, ULPDU, pad,
// Markers, CRC32c) into one iovec list, and many FPDUs — of one message or of several
// queued work requests — go out with a single vectored write straight from the
// registered memory. Send WQEs written into the batch complete after the write succeeds.

// batchBytes is the flush threshold.
const batchBytes = 512 << 10

// fpdu queues one FPDU whose ULPDU is hdr followed by payload.
func (c *Conn) fpdu(hdr []byte, payload [][]byte) error {
	if err := c.wr.QueueFPDU(hdr, payload); err != nil {
		return err
	}
	if c.wr.Buffered() >= batchBytes {
		return c.flush()
	}
	return nil
}

// flush writes the batch and completes the WQEs written in it.
func (c *Conn) flush() error {
	if err := c.wr.Flush(); err != nil {
		return err
	}
	for i, w := range c.sent {
		c.qp.CompleteSend(w, rnic.StatusSuccess)
		c.sent[i] = nil
	}
	c.sent = c.sent[:0]
	return nil
}
