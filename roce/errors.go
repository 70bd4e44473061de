package roce

import "errors"

// Parse errors. They are sentinels usable with errors.Is.
var (
	ErrShort          = errors.New("roce: packet too short")
	ErrBadOpcode      = errors.New("roce: reserved or unsupported opcode")
	ErrBadVersion     = errors.New("roce: unsupported BTH transport header version")
	ErrBadLength      = errors.New("roce: payload and pad are not a multiple of 4 bytes")
	ErrBadPad         = errors.New("roce: pad count larger than the payload allows")
	ErrPayload        = errors.New("roce: payload length not allowed for this opcode")
	ErrBadICRC        = errors.New("roce: ICRC mismatch")
	ErrBadIPHeader    = errors.New("roce: bad IP header")
	ErrBadUDPHeader   = errors.New("roce: bad UDP header")
	ErrBadMAD         = errors.New("roce: bad MAD header")
	ErrBadCMAHeader   = errors.New("roce: bad RDMA-CM header")
	ErrWrongAttribute = errors.New("roce: MAD attribute does not match the message type")
)
