package gateway

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// nbConn reads and writes a TCP connection with raw system calls, inside
// the connection's RawConn, so that Go's runtime does not see them as
// system calls (issue 48). The socket is non-blocking: a read or write
// returns at once, EAGAIN included, and the wait for readiness stays the
// poller's (deadlines apply as usual). What a raw call saves is the
// scheduler's syscall state: entering and leaving it is user CPU at each
// of the four or five calls of a proxied request, and a call seen in it by
// sysmon at two ticks in a row (a write on loopback runs the receiver's
// TCP input too; the thread may be preempted on a shared core) loses the
// P: with GOMAXPROCS 1 there is no idle P, so the P is handed to another
// thread, a futex wake and two context switches, and sysmon, having had
// work, keeps polling every 20 us instead of backing off to 10 ms. A
// non-blocking call on a socket is as short as the kernel's work on it, so
// nothing else could have used the P meanwhile.
//
// Read and Write may run at once (a tunnel's two directions): each has its
// own state and lock; the locks are uncontended on a request's path.
type nbConn struct {
	*net.TCPConn
	raw syscall.RawConn

	rmu    sync.Mutex
	rstep  func(fd uintptr) bool // c.readStep, bound once: no allocation a call
	rp     []byte
	rn     int
	rerrno syscall.Errno

	wmu    sync.Mutex
	wstep  func(fd uintptr) bool // c.writeStep
	wp     []byte
	wn     int
	werrno syscall.Errno
}

// maxRW bounds one system call's bytes, as internal/poll does.
const maxRW = 1 << 30

// newNBConn wraps a *net.TCPConn; any other connection is returned as is.
func newNBConn(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	n, err := newNB(tc)
	if err != nil {
		return c
	}
	return n
}

func newNB(tc *net.TCPConn) (*nbConn, error) {
	raw, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	c := &nbConn{TCPConn: tc, raw: raw}
	c.rstep, c.wstep = c.readStep, c.writeStep
	return c, nil
}

func (c *nbConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(p) > maxRW {
		p = p[:maxRW]
	}
	c.rmu.Lock()
	c.rp, c.rn, c.rerrno = p, 0, 0
	err := c.raw.Read(c.rstep)
	n, errno := c.rn, c.rerrno
	c.rp = nil
	c.rmu.Unlock()
	switch {
	case err != nil: // closed, deadline: net's error, as a plain Read's
		return 0, err
	case errno != 0:
		return 0, c.opError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readStep is RawConn.Read's function: false (wait for readability) when
// nothing can be read yet.
func (c *nbConn) readStep(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rp[0])), uintptr(len(c.rp)))
		switch e {
		case 0:
			c.rn = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.rerrno = e
		return true
	}
}

func (c *nbConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	c.wp, c.wn, c.werrno = p, 0, 0
	var err error
	if len(p) > 0 {
		err = c.raw.Write(c.wstep)
	}
	n, errno := c.wn, c.werrno
	c.wp = nil
	c.wmu.Unlock()
	switch {
	case err != nil:
		return n, err
	case errno != 0:
		return n, c.opError("write", errno)
	}
	return n, nil
}

// writeStep is RawConn.Write's function: it writes until everything went
// out (true) or the socket's buffer is full (false: wait for writability).
func (c *nbConn) writeStep(fd uintptr) bool {
	return rawWrite(fd, c.wp, &c.wn, &c.werrno)
}

// rawWrite writes p[*sent:] to the non-blocking fd: true when all of it
// went out or a write failed (*errno), false at EAGAIN.
func rawWrite(fd uintptr, p []byte, sent *int, errno *syscall.Errno) bool {
	for *sent < len(p) {
		chunk := p[*sent:]
		if len(chunk) > maxRW {
			chunk = chunk[:maxRW]
		}
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&chunk[0])), uintptr(len(chunk)))
		switch e {
		case 0:
			if n == 0 {
				*errno = syscall.EIO
				return true
			}
			*sent += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			*errno = e
			return true
		}
	}
	return true
}

func (c *nbConn) opError(op string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(op, errno)}
}
