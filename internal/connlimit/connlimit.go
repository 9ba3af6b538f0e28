// Package connlimit caps the connections a listener keeps open: per source
// address and in all. A connection over either cap is closed as soon as it
// is accepted, so that one source holding idle connections cannot use up
// the process's file descriptors and starve every other listener (the xDS
// port's idle connections did, issue 42). It owns no goroutine.
package connlimit

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
)

// DefaultPerSource is the cap per source address when Options.PerSource is
// 0: far above what one proxy or gateway host opens (one connection per
// process), far below the file descriptors of a server.
const DefaultPerSource = 512

// Why a connection was refused, as Options.Refused is told.
const (
	PerSource = "per_source"
	Total     = "total"
)

// Options configure a Listener; the zero value is the defaults.
type Options struct {
	// PerSource caps the open connections of one source IP address
	// (0: DefaultPerSource; negative: no cap).
	PerSource int
	// Total caps the open connections of the listener (0: DefaultTotal();
	// negative: no cap).
	Total int
	// Refused, when set, is called once per connection refused, with
	// PerSource or Total, on the accepting goroutine; it must not block.
	Refused func(reason string)
}

// Listener is a net.Listener that closes, at once, each connection over its
// caps; the others count against them until closed.
type Listener struct {
	net.Listener
	perSource, total int
	refused          func(string)

	mu    sync.Mutex
	open  int
	bySrc map[netip.Addr]int
}

// New wraps ln.
func New(ln net.Listener, o Options) *Listener {
	l := &Listener{Listener: ln, perSource: o.PerSource, total: o.Total, refused: o.Refused, bySrc: map[netip.Addr]int{}}
	if l.perSource == 0 {
		l.perSource = DefaultPerSource
	}
	if l.total == 0 {
		l.total = DefaultTotal()
	}
	return l
}

// Accept returns the next connection within the caps, closing those over
// them meanwhile.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := sourceOf(c)
		if why := l.admit(src); why != "" {
			// Counted before the close, so whoever sees the close sees
			// the count too.
			if l.refused != nil {
				l.refused(why)
			}
			c.Close()
			continue
		}
		return &conn{Conn: c, l: l, src: src}, nil
	}
}

// Open is the number of connections accepted and not yet closed.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// admit counts a connection from src, or says which cap it is over.
func (l *Listener) admit(src netip.Addr) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.total > 0 && l.open >= l.total:
		return Total
	case l.perSource > 0 && l.bySrc[src] >= l.perSource:
		return PerSource
	}
	l.open++
	l.bySrc[src]++
	return ""
}

func (l *Listener) release(src netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if n := l.bySrc[src] - 1; n > 0 {
		l.bySrc[src] = n
	} else {
		delete(l.bySrc, src)
	}
}

// sourceOf is c's remote IP address (IPv4-mapped addresses as IPv4); the
// zero Addr for a connection that has none (a pipe, a Unix socket), which
// then all count as one source.
func sourceOf(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if a, ok := netip.AddrFromSlice(ta.IP); ok {
			return a.Unmap()
		}
	}
	return netip.Addr{}
}

// conn gives its place back when closed, once.
type conn struct {
	net.Conn
	l    *Listener
	src  netip.Addr
	once sync.Once
}

// SyscallConn reaches the connection's socket (a server setting socket
// options, as gRPC's TCP_USER_TIMEOUT, sees the wrapper, not a
// *net.TCPConn).
func (c *conn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errNoSocket
	}
	return sc.SyscallConn()
}

// errNoSocket: the wrapped connection has no socket to reach.
var errNoSocket = errors.New("connlimit: the connection has no socket")

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.src) })
	return err
}
