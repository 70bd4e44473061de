package interop

import (
	"fmt"
	"time"
)

// WaitCMListen waits until an rdma_cm ID in the guest listens on port (as `rdma resource
// show cm_id` lists it), instead of a fixed sleep: under TCG on a loaded host a guest
// program can take seconds to reach rdma_listen, and a client that connects earlier is
// refused (TCP RST on siw, CM REJ on rxe).
func (g *Guest) WaitCMListen(port int, timeout time.Duration) error {
	return g.waitScript(fmt.Sprintf("rdma res show cm_id 2>/dev/null | grep 'state LISTEN' | grep -q ':%d '", port), "rdma res show cm_id", timeout)
}

// WaitTCPListen waits until a guest socket listens on TCP port (from /proc/net/tcp).
func (g *Guest) WaitTCPListen(port int, timeout time.Duration) error {
	return g.waitScript(fmt.Sprintf("grep -q ':%04X 00000000:0000 0A' /proc/net/tcp", port), "cat /proc/net/tcp", timeout)
}

// waitScript polls cond in the guest every 100 ms until it succeeds or timeout passes;
// on a timeout the output of show is in the error.
func (g *Guest) waitScript(cond, show string, timeout time.Duration) error {
	n := max(int(timeout/(100*time.Millisecond)), 1)
	script := fmt.Sprintf("i=0\nwhile [ $i -lt %d ]; do\n\tif %s; then exit 0; fi\n\ti=$((i+1)); sleep 0.1\ndone\n%s\nexit 1\n", n, cond, show)
	r, err := g.Run(script, timeout+30*time.Second)
	if err != nil {
		return err
	}
	if r.Code != 0 {
		return fmt.Errorf("guest: not listening after %v (%s):\n%s", timeout, cond, Tail(r.Output, 2000))
	}
	return nil
}
