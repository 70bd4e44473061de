package iwarp

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/softrnic/softrnic/mpa"
)

// frameReader deframes received FPDUs (RFC 5044 §4, §6): mpa.Reader, or fpduReader.
type frameReader interface {
	Next() (int, error)
	ReadFull(p []byte) error
	End() error
}

// fpduReader deframes FPDUs without Markers from a TCP connection. Headers, pads and
// CRCs come through a small buffer; a payload read of at least directMin bytes goes from
// the socket straight into the caller's memory with one readv whose second vector
// refills the buffer with whatever follows (the next FPDU's header, pad and CRC), so
// large FPDUs cost one system call each and the payload is copied once, kernel to target.
// Errors follow mpa.Reader: io.EOF at a clean FPDU boundary, io.ErrUnexpectedEOF inside
// one, *mpa.Error{Code: mpa.CodeCRC} from End on a CRC mismatch; errors are sticky.
type fpduReader struct {
	nc     net.Conn
	rc     syscall.RawConn // nil: plain reads
	crcOn  bool
	buf    []byte
	rp, wp int
	crc    uint32
	ulen   int
	remain int
	in     bool
	err    error

	rv readvState
}

const (
	rxBufSize = 8 << 10
	directMin = 512
)

var errFPDUInProgress = errors.New("iwarp: previous FPDU not ended")

func newFPDUReader(nc net.Conn, crc bool) *fpduReader {
	r := &fpduReader{nc: nc, crcOn: crc, buf: make([]byte, rxBufSize)}
	if tc, ok := nc.(*net.TCPConn); ok {
		if rc, err := tc.SyscallConn(); err == nil {
			r.rc = rc
			r.rv.init()
		}
	}
	return r
}

func (r *fpduReader) fail(err error) error {
	if r.err == nil {
		if err == io.EOF && (r.in || r.wp > r.rp) {
			err = io.ErrUnexpectedEOF
		}
		r.err = err
	}
	return r.err
}

// fill makes at least n (≤ len(buf)) bytes available in the buffer.
func (r *fpduReader) fill(n int) error {
	if r.wp-r.rp >= n {
		return nil
	}
	if r.rp > 0 {
		r.wp = copy(r.buf, r.buf[r.rp:r.wp])
		r.rp = 0
	}
	for r.wp < n {
		k, err := r.nc.Read(r.buf[r.wp:])
		r.wp += k
		if err != nil && r.wp < n {
			return r.fail(err)
		}
	}
	return nil
}

// Next starts the next FPDU and returns its ULPDU length.
func (r *fpduReader) Next() (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.in {
		return 0, r.fail(errFPDUInProgress)
	}
	if err := r.fill(mpa.LengthLen); err != nil {
		return 0, err
	}
	h := r.buf[r.rp : r.rp+mpa.LengthLen]
	r.ulen = int(binary.BigEndian.Uint16(h))
	if r.crcOn {
		r.crc = mpa.CRC32c(h)
	}
	r.rp += mpa.LengthLen
	r.remain, r.in = r.ulen, true
	return r.ulen, nil
}

// ReadFull fills p with the next len(p) octets of the current ULPDU.
func (r *fpduReader) ReadFull(p []byte) error {
	if r.err != nil {
		return r.err
	}
	if !r.in {
		return mpa.ErrNotInFPDU
	}
	if len(p) > r.remain {
		return mpa.ErrShortULPDU
	}
	n := copy(p, r.buf[r.rp:r.wp])
	r.rp += n
	for n < len(p) {
		need := len(p) - n
		if need >= directMin && r.rc != nil {
			// buffer is empty here: read the rest of p and refill the buffer at once
			r.rp, r.wp = 0, 0
			k, err := r.rv.readv(r.rc, p[n:], r.buf)
			if k > need {
				r.wp = k - need
				k = need
			}
			n += k
			if err != nil && n < len(p) {
				return r.fail(err)
			}
			continue
		}
		if err := r.fill(1); err != nil {
			return err
		}
		k := copy(p[n:], r.buf[r.rp:r.wp])
		r.rp += k
		n += k
	}
	if r.crcOn {
		r.crc = mpa.UpdateCRC32c(r.crc, p)
	}
	r.remain -= len(p)
	return nil
}

// End discards the rest of the ULPDU, consumes pad and CRC, and checks the CRC.
func (r *fpduReader) End() error {
	if r.err != nil {
		return r.err
	}
	if !r.in {
		return mpa.ErrNotInFPDU
	}
	for r.remain > 0 {
		if err := r.fill(1); err != nil {
			return err
		}
		k := min(r.remain, r.wp-r.rp)
		if r.crcOn {
			r.crc = mpa.UpdateCRC32c(r.crc, r.buf[r.rp:r.rp+k])
		}
		r.rp += k
		r.remain -= k
	}
	pad := mpa.PadLen(r.ulen)
	if err := r.fill(pad + mpa.CRCLen); err != nil {
		return err
	}
	t := r.buf[r.rp : r.rp+pad+mpa.CRCLen]
	r.rp += len(t)
	r.in = false
	if r.crcOn {
		if mpa.UpdateCRC32c(r.crc, t[:pad]) != mpa.GetCRC(t[pad:]) {
			return r.fail(&mpa.Error{Code: mpa.CodeCRC, Reason: "FPDU CRC mismatch"})
		}
	}
	return nil
}
