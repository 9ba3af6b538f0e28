package connlimit

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// served accepts from l until it is closed, keeping each connection open
// until its client closes it (as a server waiting for a request would) or
// the test ends.
func served(t *testing.T, l *Listener) {
	t.Helper()
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(io.Discard, c)
				c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// dialFrom connects to addr from the loopback address src (127.0.0.0/8 is
// all this machine's).
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByPeer reports whether the server closed c (a read ends in EOF or a
// reset) within d; false when c is still open after d.
func closedByPeer(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return err == io.EOF || err != nil
}

func waitOpen(t *testing.T, l *Listener, want int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); l.Open() != want; {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open, want %d", l.Open(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPerSource: a source's connections past its cap are closed at once
// and counted; another source still connects; a closed connection gives
// its place back.
func TestPerSource(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	refused := map[string]int{}
	l := New(ln, Options{PerSource: 3, Total: 100, Refused: func(why string) { mu.Lock(); refused[why]++; mu.Unlock() }})
	served(t, l)
	addr := ln.Addr().String()
	var kept []net.Conn
	for range 3 {
		kept = append(kept, dialFrom(t, "127.0.0.1", addr))
	}
	waitOpen(t, l, 3)
	over := dialFrom(t, "127.0.0.1", addr)
	if !closedByPeer(over, 10*time.Second) {
		t.Fatal("the 4th connection of one source stayed open over a cap of 3")
	}
	other := dialFrom(t, "127.0.0.2", addr)
	waitOpen(t, l, 4)
	if closedByPeer(other, 200*time.Millisecond) {
		t.Fatal("another source's connection was closed")
	}
	for _, c := range kept {
		if closedByPeer(c, 50*time.Millisecond) {
			t.Fatal("a connection within the cap was closed")
		}
	}
	kept[0].Close()
	waitOpen(t, l, 3)
	again := dialFrom(t, "127.0.0.1", addr)
	waitOpen(t, l, 4)
	if closedByPeer(again, 200*time.Millisecond) {
		t.Fatal("a connection was refused after one of its source's closed")
	}
	mu.Lock()
	defer mu.Unlock()
	if refused[PerSource] != 1 || refused[Total] != 0 {
		t.Fatalf("refusals %v, want one per_source", refused)
	}
}

// TestTotal: past the listener's cap, every source is refused.
func TestTotal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	refused := map[string]int{}
	l := New(ln, Options{PerSource: 10, Total: 2, Refused: func(why string) { mu.Lock(); refused[why]++; mu.Unlock() }})
	served(t, l)
	addr := ln.Addr().String()
	dialFrom(t, "127.0.0.1", addr)
	dialFrom(t, "127.0.0.2", addr)
	waitOpen(t, l, 2)
	if c := dialFrom(t, "127.0.0.3", addr); !closedByPeer(c, 10*time.Second) {
		t.Fatal("a connection over the total cap stayed open")
	}
	mu.Lock()
	defer mu.Unlock()
	if refused[Total] != 1 {
		t.Fatalf("refusals %v, want one total", refused)
	}
}

// TestDefaults: zero options are the defaults, well under the open-file
// limit.
func TestDefaults(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	l := New(ln, Options{})
	if l.perSource != DefaultPerSource || l.total != DefaultTotal() || l.total <= 0 {
		t.Fatalf("defaults per source %d, total %d", l.perSource, l.total)
	}
}
