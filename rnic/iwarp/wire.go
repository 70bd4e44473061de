package iwarp

// Header builders shared by the sender roles.

import (
	"encoding/binary"

	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/rdmap"
)

var be = binary.BigEndian

func putUntagged(b []byte, last bool, op rdmap.Opcode, field, qn uint32, msn ddp.MSN, mo uint32) {
	ddp.Untagged(b[:ddp.UntaggedLen]).Init(last, rdmap.Control(op), field, qn, msn, mo)
}

func putTagged(b []byte, last bool, op rdmap.Opcode, stag uint32, to uint64) {
	ddp.Tagged(b[:ddp.TaggedLen]).Init(last, rdmap.Control(op), stag, to)
}
