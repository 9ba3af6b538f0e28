package gateway

import (
	"bufio"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// upPool is one endpoint's HTTP/1.1 keep-alive connections for roundTrip
// (upstream.go). At most max are open; an idle one is reused newest first
// (its socket and buffers are the warmest); each keeps its reader and
// writer. A call past max waits for a connection up to wait.
//
// It replaced fasthttp's HostClient (issue 48), which read the clock each
// time a connection went back (for its idle cleaner) and lent each call a
// reader from a sync.Pool: here idleness is counted in the sweep's rounds,
// and the reader stays with its connection.
type upPool struct {
	addr string
	dial func(addr string) (net.Conn, error)
	max  int
	wait time.Duration // the longest a call waits for a connection at max
	idle time.Duration // an idle connection closes after it (from idle to 5/4 idle); 0: never

	mu       sync.Mutex
	free     []*pooledConn // idle, the newest last
	open     int           // open or being dialled
	waiters  []*upWaiter   // calls waiting at max, the first first
	sweeping bool          // the sweep's timer is armed
	closed   bool          // closeIdle: connections that come back close
}

// pooledConn is a pooled connection with its buffers.
type pooledConn struct {
	c      net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer // made at its first use (upConn writes without it)
	rounds int           // the sweeps it has sat idle through
}

// upWaiter is a call waiting at max: it is handed a connection, or a
// dial (pc nil) when one closed.
type upWaiter struct{ ch chan *pooledConn }

// sweepRounds: an idle connection closes at its fifth sweep, the sweep
// running every idle/4: from idle to 5/4 idle after its last call.
const sweepRounds = 5

const upBufferSize = 4096

func newUpPool(addr string, dial func(string) (net.Conn, error), max int, wait, idle time.Duration) *upPool {
	return &upPool{addr: addr, dial: dial, max: max, wait: wait, idle: idle}
}

// acquire returns a connection: an idle one, a new one, or, at max, one
// handed back within the pool's wait (or timeout if shorter; 0: unset).
// Errors: fasthttp.ErrNoFreeConns past the pool's wait, ErrTimeout past
// timeout, the dial's.
func (p *upPool) acquire(timeout time.Duration) (*pooledConn, error) {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		pc := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return pc, nil
	}
	if p.open < p.max {
		p.open++
		p.mu.Unlock()
		return p.dialOne()
	}
	wait, errWait := p.wait, fasthttp.ErrNoFreeConns
	if timeout > 0 && timeout < wait {
		wait, errWait = timeout, fasthttp.ErrTimeout
	}
	if wait <= 0 {
		p.mu.Unlock()
		return nil, errWait
	}
	w := &upWaiter{ch: make(chan *pooledConn, 1)}
	p.waiters = append(p.waiters, w)
	p.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case pc := <-w.ch:
		if pc == nil {
			return p.dialOne() // a connection closed: its place is ours
		}
		return pc, nil
	case <-t.C:
	}
	p.mu.Lock()
	if i := slices.Index(p.waiters, w); i >= 0 {
		p.waiters = slices.Delete(p.waiters, i, i+1)
		p.mu.Unlock()
		return nil, errWait
	}
	p.mu.Unlock()
	// Handed something as the timer fired: pass it on.
	if pc := <-w.ch; pc != nil {
		p.release(pc)
	} else {
		p.mu.Lock()
		p.open--
		p.grantLocked()
		p.mu.Unlock()
	}
	return nil, errWait
}

// dialOne dials a connection whose place (open) is taken.
func (p *upPool) dialOne() (*pooledConn, error) {
	c, err := p.dial(p.addr)
	if err != nil {
		p.mu.Lock()
		p.open--
		p.grantLocked()
		p.mu.Unlock()
		return nil, err
	}
	return &pooledConn{c: c, br: bufio.NewReaderSize(c, upBufferSize)}, nil
}

// writer is pc's buffered writer.
func (pc *pooledConn) writer() *bufio.Writer {
	if pc.bw == nil {
		pc.bw = bufio.NewWriterSize(pc.c, upBufferSize)
	}
	return pc.bw
}

// release puts back a connection whose answer was read to its end.
// Bytes past it (an answer nobody asked for) close it instead.
func (p *upPool) release(pc *pooledConn) {
	if pc.br.Buffered() > 0 {
		p.close(pc)
		return
	}
	p.mu.Lock()
	if len(p.waiters) > 0 {
		w := p.waiters[0]
		p.waiters = slices.Delete(p.waiters, 0, 1)
		p.mu.Unlock()
		w.ch <- pc
		return
	}
	if p.closed {
		p.open--
		p.mu.Unlock()
		pc.c.Close()
		return
	}
	pc.rounds = 0
	p.free = append(p.free, pc)
	if !p.sweeping && p.idle > 0 {
		p.sweeping = true
		time.AfterFunc(p.idle/(sweepRounds-1), p.sweep)
	}
	p.mu.Unlock()
}

// close closes a connection that is not to be reused.
func (p *upPool) close(pc *pooledConn) {
	pc.c.Close()
	p.mu.Lock()
	p.open--
	p.grantLocked()
	p.mu.Unlock()
}

// grantLocked gives a place freed to the first waiter, to dial.
func (p *upPool) grantLocked() {
	if len(p.waiters) > 0 && p.open < p.max {
		w := p.waiters[0]
		p.waiters = slices.Delete(p.waiters, 0, 1)
		p.open++
		w.ch <- nil
	}
}

// sweep counts a round for each idle connection and closes those idle
// for sweepRounds of them; it runs again while any are idle.
func (p *upPool) sweep() {
	p.mu.Lock()
	n := 0 // free is oldest first: the ones to close lead it
	for _, pc := range p.free {
		if pc.rounds++; pc.rounds >= sweepRounds {
			n++
		}
	}
	gone := slices.Clone(p.free[:n])
	p.free = slices.Delete(p.free, 0, n)
	p.open -= n
	if p.sweeping = len(p.free) > 0; p.sweeping {
		time.AfterFunc(p.idle/(sweepRounds-1), p.sweep)
	}
	p.mu.Unlock()
	for _, pc := range gone {
		pc.c.Close()
	}
}

// closeIdle closes the idle connections, and those in use as they come
// back: the pool is no longer used (its endpoint left).
func (p *upPool) closeIdle() {
	p.mu.Lock()
	gone := p.free
	p.free, p.closed = nil, true
	p.open -= len(gone)
	p.mu.Unlock()
	for _, pc := range gone {
		pc.c.Close()
	}
}
