package dat

import (
	"context"
	"net"

	"github.com/softrnic/softrnic/rnic"
)

// connParams are the per-connection parameters handed to a transport.
type connParams struct {
	privateData []byte
	ird, ord    int
}

// transport is the connection side of a provider (spec §6.4): listeners on
// connection qualifiers and connection establishment for Endpoints. Each
// engine transport (iWARP now, RoCEv2 later) implements it in its own
// transport_*.go file and registers a factory in transportFactories.
type transport interface {
	// listen binds a listener to addr ("ip:port", port 0 picks one).
	listen(addr string) (tlistener, error)
	// dial connects an Idle QP; on success the QP is in RTS and the peer's
	// private data is returned.
	dial(ctx context.Context, qp *rnic.QP, addr string, p connParams) (tconn, []byte, error)
	// classify maps a dial error to the connection event it produces and
	// the peer's private data of a rejection.
	classify(err error) (EventNumber, []byte)
	// peerClosed reports whether a fatal QP error is the peer closing the
	// connection (reported as DISCONNECTED rather than BROKEN).
	peerClosed(err error) bool
	// maxPrivateData is the largest private data of a connect, accept or
	// reject on this transport.
	maxPrivateData(op pdOp) int
	close()
}

type tlistener interface {
	accept(ctx context.Context) (treq, error)
	addr() *net.TCPAddr
	close()
}

type treq interface {
	privateData() []byte
	remoteAddr() net.Addr
	localAddr() net.Addr
	accept(qp *rnic.QP, p connParams) (tconn, error)
	reject(privateData []byte) error
}

type tconn interface {
	disconnect(graceful bool)
	localAddr() net.Addr
	remoteAddr() net.Addr
}

// pdOp names the CM message private data rides in.
type pdOp int

const (
	pdConnect pdOp = iota // connect request (MPA Request, IB CM REQ)
	pdAccept              // accept (MPA Reply, REP)
	pdReject              // reject (MPA Reply with R, REJ)
)
