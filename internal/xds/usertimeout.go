package xds

import (
	"net"
	"syscall"
	"time"
)

// userTimeoutListener gives each connection it accepts the stall timeout as
// its TCP_USER_TIMEOUT when gRPC cannot: gRPC sets it only on a
// *net.TCPConn, and a listener that wraps its connections (the server's
// xDS port counts them, internal/connlimit) hands it another type, which
// would leave a subscriber that stopped reading connected for the kernel's
// retransmission limit (minutes) instead.
type userTimeoutListener struct {
	net.Listener
	d time.Duration
}

func (l userTimeoutListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	if _, plain := c.(*net.TCPConn); !plain {
		if sc, ok := c.(syscall.Conn); ok {
			// Best effort, as gRPC's own: a connection that refuses it is
			// still served.
			_ = setUserTimeout(sc, l.d)
		}
	}
	return c, nil
}
