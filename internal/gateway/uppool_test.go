package gateway

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// poolTarget is a listener whose accepted connections are counted and
// watched for closing (a read that ends).
type poolTarget struct {
	ln     net.Listener
	dials  atomic.Int32
	closed chan struct{} // one value per connection the pool closed
}

func startPoolTarget(t *testing.T) *poolTarget {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pt := &poolTarget{ln: ln, closed: make(chan struct{}, 64)}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				var b [1]byte
				c.Read(b[:]) // the pool never writes: this ends when it closes
				c.Close()
				pt.closed <- struct{}{}
			}()
		}
	}()
	return pt
}

func (pt *poolTarget) pool(t *testing.T, max int, wait, idle time.Duration) *upPool {
	p := newUpPool(pt.ln.Addr().String(), func(a string) (net.Conn, error) {
		pt.dials.Add(1)
		return net.Dial("tcp", a)
	}, max, wait, idle)
	t.Cleanup(p.closeIdle)
	return p
}

func (pt *poolTarget) waitClosed(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case <-pt.closed:
	case <-time.After(within):
		t.Fatalf("no connection closed within %v", within)
	}
}

func (pt *poolTarget) noneClosed(t *testing.T, for_ time.Duration) {
	t.Helper()
	select {
	case <-pt.closed:
		t.Fatalf("a connection closed within %v", for_)
	case <-time.After(for_):
	}
}

// TestUpPoolReuse: idle connections are reused newest first; one with
// bytes left unread closes instead of going back.
func TestUpPoolReuse(t *testing.T) {
	pt := startPoolTarget(t)
	p := pt.pool(t, 8, time.Second, time.Hour)
	a, err := p.acquire(0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.acquire(0)
	if err != nil {
		t.Fatal(err)
	}
	p.release(a)
	p.release(b)
	if c, _ := p.acquire(0); c != b {
		t.Error("the newest idle connection was not taken first")
	} else {
		p.release(c)
	}
	if n := pt.dials.Load(); n != 2 {
		t.Errorf("%d dials, want 2", n)
	}
	// An answer nobody asked for is in the reader: the connection closes.
	c, _ := p.acquire(0)
	c.br.Reset(fakeReader("HTTP/1.1 200 OK\r\n\r\n"))
	c.br.Peek(1)
	p.release(c)
	pt.waitClosed(t, 5*time.Second)
	if open, idle := p.counts(); open != 1 || idle != 1 {
		t.Errorf("open %d, idle %d; want 1 and 1", open, idle)
	}
}

func (p *upPool) counts() (open, idle int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open, len(p.free)
}

func (p *upPool) openCount() int { open, _ := p.counts(); return open }

type fakeReader string

func (f fakeReader) Read(b []byte) (int, error) { return copy(b, f), nil }

// TestUpPoolMax: at max a call waits for a connection handed back, or
// for the place of one closed; it gives up at the pool's wait
// (ErrNoFreeConns) or its own timeout if shorter (ErrTimeout).
func TestUpPoolMax(t *testing.T) {
	pt := startPoolTarget(t)
	p := pt.pool(t, 1, 300*time.Millisecond, time.Hour)
	a, err := p.acquire(0)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := p.acquire(0); !errors.Is(err, fasthttp.ErrNoFreeConns) {
		t.Errorf("at max: %v, want ErrNoFreeConns", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("gave up after %v, want the pool's wait (300ms)", d)
	}
	if _, err := p.acquire(50 * time.Millisecond); !errors.Is(err, fasthttp.ErrTimeout) {
		t.Errorf("at max with a shorter timeout: %v, want ErrTimeout", err)
	}
	// Handed back while waited for.
	got := make(chan *pooledConn, 1)
	go func() { c, _ := p.acquire(0); got <- c }()
	waitUntil(t, "a waiter", func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.waiters) == 1 })
	p.release(a)
	if c := <-got; c != a {
		t.Fatalf("the waiter got %v, want the connection released", c)
	}
	// Closed while waited for: the waiter dials.
	go func() { c, _ := p.acquire(0); got <- c }()
	waitUntil(t, "a waiter", func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.waiters) == 1 })
	p.close(a)
	c := <-got
	if c == nil || c == a {
		t.Fatalf("the waiter got %v, want a new connection", c)
	}
	if n, open := pt.dials.Load(), p.openCount(); n != 2 || open != 1 {
		t.Errorf("%d dials, %d open; want 2 and 1", n, open)
	}
	// A dial that fails gives its place to the next waiter.
	p.dial = func(string) (net.Conn, error) { return nil, errors.New("refused") } // (no call in flight)
	p.close(c)
	if _, err := p.acquire(0); err == nil || p.openCount() != 0 {
		t.Errorf("a refused dial: %v, open %d; want the error and 0", err, p.openCount())
	}
}

// TestUpPoolIdle: an idle connection closes from idle to 5/4 idle after
// it went back, not before; closeIdle closes the idle ones at once and
// those in use as they come back.
func TestUpPoolIdle(t *testing.T) {
	const idle = 400 * time.Millisecond
	pt := startPoolTarget(t)
	p := pt.pool(t, 8, time.Second, idle)
	a, _ := p.acquire(0)
	p.release(a)
	pt.noneClosed(t, idle-50*time.Millisecond)
	pt.waitClosed(t, idle/4+time.Second) // (slack for a loaded machine)
	if open, idle := p.counts(); open != 0 || idle != 0 {
		t.Errorf("open %d, idle %d; want 0", open, idle)
	}
	waitUntil(t, "the sweep to stop", func() bool { p.mu.Lock(); defer p.mu.Unlock(); return !p.sweeping })

	a, _ = p.acquire(0)
	b, _ := p.acquire(0)
	p.release(a)
	p.closeIdle()
	pt.waitClosed(t, 5*time.Second)
	p.release(b)
	pt.waitClosed(t, 5*time.Second)
	if open, idle := p.counts(); open != 0 || idle != 0 {
		t.Errorf("after closeIdle: open %d, idle %d; want 0", open, idle)
	}
}
