package gateway

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// countingConn counts the writes that reach a connection, and how many
// are in progress.
type countingConn struct {
	net.Conn
	writes, inFlight atomic.Int32
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	return c.Conn.Write(p)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBatchConnCoalesces: what is written while the connection's writer is
// in a write goes out in one write after it, in order.
func TestBatchConnCoalesces(t *testing.T) {
	a, peer := net.Pipe()
	defer peer.Close()
	cc := &countingConn{Conn: a}
	b := newBatchConn(cc)
	b.start()
	defer b.Close()
	if _, err := b.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	// net.Pipe's write waits for the peer's read: the writer is in it.
	waitUntil(t, "the first write", func() bool { return cc.inFlight.Load() == 1 })
	for _, s := range []string{"b", "c", "d", "e", "f", "g", "h", "i", "j", "k"} {
		if _, err := b.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, 11)
	if _, err := io.ReadFull(peer, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != "abcdefghijk" {
		t.Fatalf("read %q", got)
	}
	if n := cc.writes.Load(); n != 2 {
		t.Fatalf("%d writes reached the connection, want 2 (the first, then the ten batched)", n)
	}
	waitUntil(t, "the idle connection to give its buffer back", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.buf == nil && b.idle
	})
}

// TestBatchConnCloseFlushes: Close writes what is pending before it closes.
func TestBatchConnCloseFlushes(t *testing.T) {
	a, peer := net.Pipe()
	defer peer.Close()
	b := newBatchConn(a)
	b.start()
	read := make(chan []byte)
	go func() { got, _ := io.ReadAll(peer); read <- got }()
	want := bytes.Repeat([]byte("0123456789"), 10000)
	for i := 0; i < len(want); i += 1000 {
		if _, err := b.Write(want[i : i+1000]); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := <-read; !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want %d", len(got), len(want))
	}
	if _, err := b.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

// TestBatchConnWriteError: a failed write is reported by a later Write,
// and a Write waiting for room is released by it.
func TestBatchConnWriteError(t *testing.T) {
	a, peer := net.Pipe()
	b := newBatchConn(a)
	b.start()
	defer b.Close()
	if _, err := b.Write(make([]byte, batchMax+1)); err != nil { // the writer takes it and waits on the peer
		t.Fatal(err)
	}
	if _, err := b.Write(make([]byte, batchMax+1)); err != nil { // pending, over batchMax
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	go func() { _, err := b.Write([]byte("x")); blocked <- err }()
	select {
	case err := <-blocked:
		t.Fatalf("a write over batchMax pending did not wait: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	peer.Close()
	if err := <-blocked; !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("waiting write: %v, want the connection's error", err)
	}
}

// TestBatchConnUnstarted writes directly until started (a TLS handshake,
// HTTP/1.1 over TLS).
func TestBatchConnUnstarted(t *testing.T) {
	a, peer := net.Pipe()
	defer peer.Close()
	cc := &countingConn{Conn: a}
	b := newBatchConn(cc)
	go func() { _, _ = io.ReadFull(peer, make([]byte, 2)) }()
	if _, err := b.Write([]byte("ab")); err != nil {
		t.Fatal(err)
	}
	if n := cc.writes.Load(); n != 1 {
		t.Fatalf("%d writes, want 1 (direct)", n)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}
