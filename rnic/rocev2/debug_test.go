package rocev2

import (
	"fmt"
	"os"
)

func (c *Conn) debugState() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := fmt.Sprintf("send=%v max=%v una=%v ePSN=%v msn=%d nakSent=%v rdLen=%d rdReads=%d rdOut=%d retry=%d rnr=%v seqRetried=%v lastNak=%v/%v cur=%d fatal=%v head=%d send=%d tail=%d\n",
		c.sendPSN, c.maxSent, c.unaPSN, c.ePSN, c.msn, c.nakSent, c.rdLen, c.rdReads, c.rdOut, c.retryLeft, c.rnrPending,
		c.seqRetried, c.lastNak, c.lastNakValid, c.curKind, c.fatal, c.sqHead, c.sqSend, c.sqTail)
	for i := c.sqHead; i != c.sqTail && i < c.sqHead+6; i++ {
		e := c.ent(i)
		s += fmt.Sprintf("  %d %v [%v,%v] started=%v done=%v got=%d\n", i, e.w.Opcode, e.first, e.last, e.started, e.done, e.got)
	}
	return s
}

func init() {
	if os.Getenv("ROCE_DEBUG") == "" {
		return
	}
	debugHook = func(c *Conn) {
		s := fmt.Sprintf("send=%v max=%v una=%v ePSN=%v rdOut=%d retry=%d head=%d send=%d tail=%d\n",
			c.sendPSN, c.maxSent, c.unaPSN, c.ePSN, c.rdOut, c.retryLeft, c.sqHead, c.sqSend, c.sqTail)
		for i := c.sqHead; i != c.sqTail && i < c.sqHead+6; i++ {
			e := c.ent(i)
			s += fmt.Sprintf("  %d %v [%v,%v] started=%v done=%v got=%d\n", i, e.w.Opcode, e.first, e.last, e.started, e.done, e.got)
		}
		println("FAILOLDEST", s)
	}
}
