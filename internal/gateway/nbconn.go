package gateway

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
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

	// A lazy connection (a client's; an endpoint's, upConn) gives its
	// read deadline to the poller only when a read is about to wait, and
	// not when the new one only extends the armed one by less than 1/64
	// of the time it was armed for: fasthttp sets two read deadlines per request
	// (the idle one before the next request, the read timeout after its
	// first byte), roundTrip one per call, each a runtime timer changed,
	// and for a request that arrives in one piece no read waits under the
	// second. When the armed deadline ends a wait before the one asked
	// for, the read arms that one and waits on (early), so a deadline is
	// never cut short. A deadline set while a read waits is armed at once
	// (it may be meant to interrupt it). SetDeadline's write deadline
	// reaches the poller only before a write (or at once, during one):
	// roundTrip's request goes out inside a read (upConn.sendAwait), where
	// it cannot wait.
	//
	// Deadlines are kept as nanoseconds on the monotonic clock (0: none;
	// deadlineNS) in atomics, and a
	// setter and a reader (or writer) each store theirs, then load the
	// other's, so that one of them sees both and arms: a deadline set
	// costs two atomics, and the lock, which orders the changes to the
	// poller's deadlines, is taken only to change one (the lock and a
	// time.Time compared under it were 5% of a proxied request's user
	// CPU, profiled; issue 48).
	lazy    bool
	dmu     sync.Mutex   // held while the poller's deadlines change
	want    atomic.Int64 // the read deadline asked for
	armed   atomic.Int64 // the poller's
	span    atomic.Int64 // armed less the time it was armed at
	reading atomic.Int32
	wwant   atomic.Int64 // the write deadline asked for
	warmed  atomic.Int64 // the poller's
	writing atomic.Int32

	// readEach's: the caller's function, and the two bound once.
	each      func(fd uintptr) bool
	eachStep  func(fd uintptr) bool
	eachCalls func() error
	// While a step of readEach reads through Read (fastStepTLS), stepping
	// is set and stepFD is the socket (stepRead); drained: a read there
	// found nothing or less than it asked for. The step's goroutine only.
	stepFD   uintptr
	stepping bool
	drained  bool
}

// maxRW bounds one system call's bytes, as internal/poll does.
const maxRW = 1 << 30

// newNBConn wraps a client's *net.TCPConn (its read deadlines lazy); any
// other connection is returned as is.
func newNBConn(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	n, err := newNB(tc)
	if err != nil {
		return c
	}
	n.lazy = true
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
	if c.stepping {
		return c.stepRead(p)
	}
	if len(p) > maxRW {
		p = p[:maxRW]
	}
	c.rmu.Lock()
	c.rp, c.rn, c.rerrno = p, 0, 0
	err := c.rawRead(c.rstep)
	n, errno := c.rn, c.rerrno
	c.rp = nil
	c.rmu.Unlock()
	if err != nil { // closed, deadline: net's error, as a plain Read's
		return 0, err
	}
	return c.readResult(n, errno)
}

// readResult is what a read of n bytes that ended with errno returns.
func (c *nbConn) readResult(n int, errno syscall.Errno) (int, error) {
	switch {
	case errno != 0:
		return 0, c.opError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// stepRead is Read inside a step of readEach (fastStepTLS).
func (c *nbConn) stepRead(p []byte) (int, error) { return c.readDrained(c.stepFD, p, &c.drained) }

// readDrained reads fd, c's socket, once inside a step of readEach:
// errWouldBlock instead of a wait, and at once (no system call) once a
// read found nothing or less than it asked for (*drained; the step waits
// before it reads again).
func (c *nbConn) readDrained(fd uintptr, p []byte, drained *bool) (int, error) {
	if *drained {
		return 0, errWouldBlock
	}
	if len(p) > maxRW {
		p = p[:maxRW]
	}
	n, e := rawRead(fd, p)
	switch {
	case e == syscall.EAGAIN:
		*drained = true
		return 0, errWouldBlock
	case e == 0 && n > 0:
		*drained = n < len(p)
	}
	return c.readResult(n, e)
}

// rawRead is RawConn.Read(f) under the read deadline (a wait the armed
// deadline ends early leaves f's state as it was: f returned false, or
// was not called).
func (c *nbConn) rawRead(f func(fd uintptr) bool) error {
	return c.underReadDeadline(func() error { return c.raw.Read(f) })
}

// underReadDeadline runs read, which may wait for the connection to be
// readable, under the read deadline asked for: on a lazy connection, again
// when the armed deadline ended its wait before that one.
func (c *nbConn) underReadDeadline(read func() error) error {
	if !c.lazy {
		return read()
	}
	for {
		c.begin()
		err := read()
		c.end()
		if err == nil || !c.early(err) {
			return err
		}
	}
}

// readEach calls step inside one RawConn.Read, at first and after each
// wait for readability, until step returns true. Go's poller forgets the
// socket's readiness as a RawConn.Read starts, not before each wait in
// it: so step may wait after a read that filled less than it asked for,
// as an edge-triggered event loop does, where a Read must first read
// until EAGAIN (a system call a proxied request for nothing; issue 48).
// The waits are under the read deadline asked for, as a Read's; a
// deadline set while step runs is lazy as between reads. While step runs,
// the connection's read lock is held: step must not call Read.
func (c *nbConn) readEach(step func(fd uintptr) bool) error {
	if c.eachStep == nil {
		c.eachStep = c.stepEach
		c.eachCalls = func() error { return c.raw.Read(c.eachStep) }
	}
	c.each = step
	err := c.underReadDeadline(c.eachCalls)
	c.each = nil
	return err
}

// stepEach is readEach's RawConn.Read function: underReadDeadline counted
// a read from before the first call to the end of the last, but only the
// waits are reads (they arm the deadline asked for, begin).
func (c *nbConn) stepEach(fd uintptr) bool {
	c.end()
	if c.each(fd) {
		c.reading.Add(1) // (underReadDeadline's end)
		return true
	}
	c.begin()
	return false
}

// readStep is RawConn.Read's function: false (wait for readability) when
// nothing can be read yet.
func (c *nbConn) readStep(fd uintptr) bool {
	n, e := rawRead(fd, c.rp)
	if e == syscall.EAGAIN {
		return false
	}
	c.rn, c.rerrno = n, e
	return true
}

// rawRead reads the non-blocking fd into p once, again if a signal
// interrupted it: EAGAIN when nothing can be read yet.
func rawRead(fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		n, e := sysRead(fd, p)
		if e != syscall.EINTR {
			return n, e
		}
	}
}

func (c *nbConn) Write(p []byte) (int, error) {
	if c.lazy {
		c.writing.Add(1)
		defer c.writing.Add(-1)
		if c.wwant.Load() != c.warmed.Load() {
			c.dmu.Lock()
			err := c.armWrite()
			c.dmu.Unlock()
			if err != nil {
				return 0, err
			}
		}
	}
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
		n, e := sysWrite(fd, chunk)
		switch e {
		case 0:
			if n <= 0 {
				*errno = syscall.EIO
				return true
			}
			*sent += n
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

func (c *nbConn) SetReadDeadline(t time.Time) error {
	if !c.lazy {
		return c.TCPConn.SetReadDeadline(t)
	}
	c.want.Store(deadlineNS(t))
	if c.reading.Load() > 0 { // else the next read sees want (begin)
		c.dmu.Lock()
		defer c.dmu.Unlock()
		return c.arm()
	}
	return nil
}

func (c *nbConn) SetWriteDeadline(t time.Time) error {
	if !c.lazy {
		return c.TCPConn.SetWriteDeadline(t)
	}
	c.wwant.Store(deadlineNS(t))
	c.dmu.Lock()
	defer c.dmu.Unlock()
	return c.armWrite()
}

func (c *nbConn) SetDeadline(t time.Time) error {
	if !c.lazy {
		return c.TCPConn.SetDeadline(t)
	}
	c.wwant.Store(deadlineNS(t))
	if c.writing.Load() > 0 { // else the next write sees wwant
		c.dmu.Lock()
		err := c.armWrite()
		c.dmu.Unlock()
		if err != nil {
			return err
		}
	}
	return c.SetReadDeadline(t)
}

// WriteTo reads c (splicing where it can) under the read deadline.
func (c *nbConn) WriteTo(w io.Writer) (int64, error) {
	var total int64
	err := c.underReadDeadline(func() error {
		n, err := c.TCPConn.WriteTo(w)
		total += n
		return err
	})
	return total, err
}

// begin arms the read deadline asked for, unless it only extends the
// armed one a little, before a read; an error (closed) the read reports.
func (c *nbConn) begin() {
	c.reading.Add(1)
	w, a := c.want.Load(), c.armed.Load()
	// Against the armed deadline's span, not the time left to it: no
	// clock read (early corrects a deadline that ends a wait too soon).
	if w == a || (a > 0 && w > a && w-a < c.span.Load()/64) { // (a > 0: w-a cannot overflow)
		return
	}
	c.dmu.Lock()
	_ = c.arm()
	c.dmu.Unlock()
}

func (c *nbConn) end() { c.reading.Add(-1) }

// early reports whether err is the armed read deadline ending a wait
// before the deadline asked for, which it then arms: the read is to wait
// on.
func (c *nbConn) early(err error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	c.dmu.Lock()
	defer c.dmu.Unlock()
	w := c.want.Load()
	if w == 0 || w == c.armed.Load() || nowNS() >= w {
		return false
	}
	return c.arm() == nil
}

// armWrite gives the poller the write deadline asked for; c.dmu is held.
func (c *nbConn) armWrite() error {
	w := c.wwant.Load()
	if w == c.warmed.Load() {
		return nil
	}
	if err := c.TCPConn.SetWriteDeadline(timeOfNS(w)); err != nil {
		return err
	}
	c.warmed.Store(w)
	return nil
}

// arm gives the poller the read deadline asked for; c.dmu is held.
func (c *nbConn) arm() error {
	w := c.want.Load()
	if w == c.armed.Load() {
		return nil
	}
	if err := c.TCPConn.SetReadDeadline(timeOfNS(w)); err != nil {
		return err
	}
	var span int64
	if w != 0 {
		span = w - nowNS()
	}
	c.span.Store(span) // (before armed: begin reads armed, then span)
	c.armed.Store(w)
	return nil
}

// deadlineBase is what nbConn's deadlines count from: a reading of the
// monotonic clock, so that a deadline set from time.Now keeps to it when
// the wall clock is stepped, as the poller's own deadlines do.
var deadlineBase = time.Now()

// deadlineNS is t as nbConn keeps a deadline: nanoseconds since
// deadlineBase (on the monotonic clock when t has its reading), 0 for
// none. A time at or before deadlineBase is -1, as past as it; one more
// than 292 years after it is as good as never (math.MaxInt64).
func deadlineNS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	if d := t.Sub(deadlineBase); d > 0 { // (Sub saturates)
		return int64(d)
	}
	return -1
}

// timeOfNS is the deadline deadlineNS kept as ns.
func timeOfNS(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return deadlineBase.Add(time.Duration(ns))
}

// nowNS is the time now as deadlineNS keeps it.
func nowNS() int64 { return int64(time.Since(deadlineBase)) }

func (c *nbConn) opError(op string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(op, errno)}
}
