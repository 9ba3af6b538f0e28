package mysqltest

import (
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy between servers and the database that a test can
// cut, stall and restore: losing the database, or waiting on it, without
// restarting the machine's shared MariaDB, which other tests and people
// use.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	down    bool
	stalled chan struct{} // non-nil while stalled; closed to let bytes through again
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to target until t
// ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// Addr is the address to connect to instead of the database.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every connection through the proxy and refuses new ones
// until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	p.release()
	for c := range p.conns {
		c.Close()
	}
}

// Stall holds every byte through the proxy, both ways, on open connections
// and new ones, until Restore: a database that stops answering without
// closing anything (a stuck round trip, a partition), which only the
// clients' own timeouts end.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
}

// Restore forwards new connections again, and what a stall held.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.down = false
	p.release()
	p.mu.Unlock()
}

// release ends a stall. Called with p.mu held.
func (p *Proxy) release() {
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
}

func (p *Proxy) close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

// copy forwards src to dst, holding each read while the proxy is stalled,
// and closes dst when src ends.
func (p *Proxy) copy(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate := p.stalled
			p.mu.Unlock()
			if gate != nil {
				<-gate
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.pipe(c)
		}()
	}
}

func (p *Proxy) pipe(c net.Conn) {
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		c.Close()
	}()
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		u.Close()
		return
	}
	p.conns[u] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, u)
		p.mu.Unlock()
		u.Close()
	}()
	done := make(chan struct{}, 2)
	go func() { p.copy(u, c); done <- struct{}{} }()
	go func() { p.copy(c, u); done <- struct{}{} }()
	<-done
	<-done
}
