package gateway

import (
	"net"
	"testing"
)

// TestConnUnderWrappers: the HTTP/1.1 loop writes under lfConn and
// prefixConn at once, and reads under them only once they pass reads on:
// the guard saw the first head end without a bare LF, and the sniffed
// bytes are all read.
func TestConnUnderWrappers(t *testing.T) {
	inner, peer := net.Pipe()
	defer inner.Close()
	defer peer.Close()
	go func() { peer.Write([]byte("Host: a\r\n\r\n")) }()

	c := &lfConn{Conn: &prefixConn{Conn: inner, prefix: []byte("GET / HTTP/1.1\r\n")}}
	if w := writesOf(c); w != inner {
		t.Fatalf("writesOf = %T, want the connection under the wrappers", w)
	}
	if w := writesOf(inner); w != inner {
		t.Fatalf("writesOf(a bare connection) = %T, want itself", w)
	}
	if r := readsOf(c); r != nil {
		t.Fatal("readsOf before the first head was read: not nil")
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf) // the sniffed bytes
	if err != nil || string(buf[:n]) != "GET / HTTP/1.1\r\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if r := readsOf(c); r != nil {
		t.Fatal("readsOf before the head's end: not nil")
	}
	if n, err = c.Read(buf); err != nil || string(buf[:n]) != "Host: a\r\n\r\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if r := readsOf(c); r != inner {
		t.Fatalf("readsOf after the first head = %v, want the connection under the wrappers", r)
	}

	// The head ended within the sniffed bytes, some of them still unread.
	left := &lfConn{Conn: &prefixConn{Conn: inner, prefix: []byte("GET / HTTP/1.1\r\n\r\nGET")}}
	if n, err = left.Read(buf[:18]); err != nil || n != 18 || !left.lf.done {
		t.Fatalf("read %d, %v, guard done %v", n, err, left.lf.done)
	}
	if r := readsOf(left); r != nil {
		t.Fatal("readsOf with sniffed bytes unread: not nil")
	}

	// A bare LF: the guard fails every read from then on, so it stays.
	bad := &lfConn{Conn: &prefixConn{Conn: inner, prefix: []byte("GET / HTTP/1.1\nHost: a\n\n")}}
	if _, err = bad.Read(buf); err != nil {
		t.Fatalf("read: %v", err)
	}
	if _, err = bad.Read(buf); err != errBareLF {
		t.Fatalf("read after a bare LF: %v, want errBareLF", err)
	}
	if r := readsOf(bad); r != nil {
		t.Fatal("readsOf after a bare LF: not nil")
	}
	if r := readsOf(inner); r != nil {
		t.Fatal("readsOf(a bare connection): not nil")
	}
}
