package gateway

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection, the first
// wrapped in an nbConn.
func tcpPair(t testing.TB) (*nbConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- nil
			return
		}
		done <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer := <-done
	if peer == nil {
		t.Fatal("accept failed")
	}
	nc, ok := newNBConn(c).(*nbConn)
	if !ok {
		t.Fatalf("newNBConn(%T) did not wrap it", c)
	}
	t.Cleanup(func() { nc.Close(); peer.Close() })
	return nc, peer
}

func TestNBConnReadWrite(t *testing.T) {
	c, peer := tcpPair(t)
	if _, err := peer.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, err := c.Read(buf) // waits for the bytes: the socket is non-blocking
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("Read = %q, %v; want hello", buf[:n], err)
	}
	if n, err := c.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(nil) = %d, %v", n, err)
	}
	if n, err := c.Write([]byte("world")); n != 5 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(peer, got); err != nil || string(got) != "world" {
		t.Fatalf("peer read %q, %v", got, err)
	}
	peer.Close()
	if n, err := c.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("Read after the peer closed = %d, %v; want io.EOF", n, err)
	}
}

// A write larger than the socket's buffers waits for the reader (EAGAIN,
// then the poller) and delivers every byte in order.
func TestNBConnLargeWrite(t *testing.T) {
	c, peer := tcpPair(t)
	want := make([]byte, 8<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	got := make(chan []byte, 1)
	go func() {
		time.Sleep(50 * time.Millisecond) // let the writer fill the buffers
		b, _ := io.ReadAll(peer)
		got <- b
	}()
	if n, err := c.Write(want); n != len(want) || err != nil {
		t.Fatalf("Write = %d, %v; want %d", n, err, len(want))
	}
	c.CloseWrite()
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("peer read %d bytes, not the %d written", len(b), len(want))
	}
}

func TestNBConnDeadlines(t *testing.T) {
	c, _ := tcpPair(t)
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.Read(make([]byte, 8))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past its deadline = %v; want a timeout", err)
	}
	// The peer never reads: the write fills the buffers, then times out.
	big := make([]byte, 64<<20)
	c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	n, err := c.Write(big)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n == 0 || n >= 64<<20 {
		t.Fatalf("Write past its deadline = %d, %v; want part written and a timeout", n, err)
	}
}

func TestNBConnErrors(t *testing.T) {
	c, peer := tcpPair(t)
	// A reset: the peer closes with unread bytes.
	if _, err := c.Write([]byte("unread")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	peer.(*net.TCPConn).SetLinger(0)
	peer.Close()
	time.Sleep(20 * time.Millisecond)
	_, err := c.Read(make([]byte, 8))
	var op *net.OpError
	if !errors.Is(err, syscall.ECONNRESET) || !errors.As(err, &op) || op.Op != "read" {
		t.Fatalf("Read after a reset = %v; want read: ECONNRESET in a net.OpError", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Write after a reset = %v; want EPIPE or ECONNRESET", err)
	}
	c.Close()
	if _, err := c.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close = %v; want net.ErrClosed", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close = %v; want net.ErrClosed", err)
	}
}

// Only a *net.TCPConn is wrapped.
func TestNBConnOthers(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if c := newNBConn(a); c != a {
		t.Fatalf("newNBConn(pipe) = %T; want the pipe as is", c)
	}
}

// A client's read deadlines are armed lazily: each still bounds the read
// that waits under it, and one set while a read waits interrupts it.
func TestNBConnLazyReadDeadline(t *testing.T) {
	c, peer := tcpPair(t)
	buf := make([]byte, 8)
	timedOut := func(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

	// A long deadline armed by a read, then a short one set with no read
	// waiting: the next read waits under the short one.
	c.SetReadDeadline(time.Now().Add(time.Minute))
	peer.Write([]byte("a"))
	if _, err := c.Read(buf); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	start := time.Now()
	if _, err := c.Read(buf); !timedOut(err) {
		t.Fatalf("Read under a 30 ms deadline = %v; want a timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the 30 ms deadline ended the read after %v", d)
	}

	// Extended again: the read waits for the bytes.
	c.SetReadDeadline(time.Now().Add(time.Minute))
	go func() { time.Sleep(50 * time.Millisecond); peer.Write([]byte("b")) }()
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "b" {
		t.Fatalf("Read after extending the deadline = %q, %v", buf[:n], err)
	}
	// Extended by a little (not re-armed), the read still works.
	c.SetReadDeadline(time.Now().Add(time.Minute + time.Millisecond))
	peer.Write([]byte("c"))
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "c" {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}

	// Set while a read waits (no deadline before): it ends the read.
	c.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() { _, err := c.Read(buf); done <- err }()
	time.Sleep(50 * time.Millisecond)
	c.SetReadDeadline(time.Now())
	select {
	case err := <-done:
		if !timedOut(err) {
			t.Fatalf("interrupted Read = %v; want a timeout", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a deadline set during a read did not end it")
	}

	// SetDeadline: the read side lazily, the write side at once.
	c.SetDeadline(time.Now().Add(-time.Second))
	if _, err := c.Read(buf); !timedOut(err) {
		t.Fatalf("Read past SetDeadline's = %v", err)
	}
	if _, err := c.Write([]byte("x")); !timedOut(err) {
		t.Fatalf("Write past SetDeadline's = %v", err)
	}
}

// WriteTo (io.Copy from the connection) reads under the lazy deadline.
func TestNBConnWriteToDeadline(t *testing.T) {
	c, _ := tcpPair(t)
	c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	var sink bytes.Buffer
	done := make(chan error, 1)
	go func() { _, err := io.Copy(&sink, c); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("io.Copy = %v; want a timeout", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("io.Copy ignored the read deadline")
	}
}

// A deadline extended by a little is not armed, but no wait ends before
// it: the armed one ending the wait arms it, and the read waits on.
func TestNBConnLazyDeadlineNotEarly(t *testing.T) {
	c, peer := tcpPair(t)
	buf := make([]byte, 8)
	d1 := time.Now().Add(time.Second)
	c.SetReadDeadline(d1)
	peer.Write([]byte("a"))
	if _, err := c.Read(buf); err != nil {
		t.Fatal(err)
	}
	d2 := d1.Add(10 * time.Millisecond) // under 1/64 of the second it was armed for
	c.SetReadDeadline(d2)
	c.begin()
	armed := timeOfNS(c.armed.Load())
	c.end()
	if !armed.Equal(d1) && time.Until(d1) > 700*time.Millisecond {
		t.Fatalf("armed %v, want %v kept (extended by 10 ms of %v left)", armed, d1, time.Until(d1))
	}
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read = %v; want a timeout", err)
	}
	if now := time.Now(); now.Before(d2) {
		t.Fatalf("the read ended %v before its deadline", d2.Sub(now))
	}
	// SetDeadline's write half reaches the poller before the next write.
	c.SetDeadline(time.Now().Add(-time.Second))
	if _, err := c.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write past SetDeadline's = %v; want a timeout", err)
	}
	c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte("y")); err != nil {
		t.Fatalf("Write with no deadline = %v", err)
	}
}

// deadlineNS keeps what a deadline means at the ends of int64's range: none,
// past, as good as never; and a deadline from time.Now on the monotonic
// clock (now.Sub, not the wall readings' difference).
func TestDeadlineNS(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		t    time.Time
		want int64
	}{
		{time.Time{}, 0},
		{time.Unix(0, 0), -1},
		{time.Unix(-5, 0), -1},
		{time.Date(1, 1, 2, 0, 0, 0, 0, time.UTC), -1},
		{deadlineBase, -1},
		{time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), math.MaxInt64},
		{now, int64(now.Sub(deadlineBase))},
		{now.Add(time.Hour), int64(now.Add(time.Hour).Sub(deadlineBase))},
	} {
		if got := deadlineNS(c.t); got != c.want {
			t.Errorf("deadlineNS(%v) = %d, want %d", c.t, got, c.want)
		}
	}
	if !timeOfNS(0).IsZero() || timeOfNS(deadlineNS(now)).Sub(now) != 0 || !timeOfNS(-1).Before(now) {
		t.Errorf("timeOfNS does not undo deadlineNS")
	}
}

// A deadline far in the future after a past one is armed by the next read,
// not taken for a small extension of the past one (their difference
// overflows int64).
func TestNBConnLazyDeadlineFarAfterPast(t *testing.T) {
	c, _ := tcpPair(t)
	c.SetReadDeadline(time.Unix(0, 0))
	c.begin()
	c.end()
	if a := c.armed.Load(); a != -1 {
		t.Fatalf("armed %d after a deadline at the epoch, want -1", a)
	}
	c.SetReadDeadline(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC))
	c.begin()
	c.end()
	if a := c.armed.Load(); a != math.MaxInt64 {
		t.Fatalf("armed %d after a deadline in 3000, want %d", a, int64(math.MaxInt64))
	}
}
