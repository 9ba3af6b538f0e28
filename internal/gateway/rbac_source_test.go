package gateway

import (
	"net"
	"net/netip"
	"testing"

	"github.com/valyala/fasthttp"
)

// loopbackLF is the server end of a loopback TCP connection wrapped as the
// plaintext listener wraps its connections (dispatch), and the client end.
func loopbackLF(tb testing.TB) (*lfConn, net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		tb.Fatal(err)
	}
	c := &lfConn{Conn: &prefixConn{Conn: newNBConn(server)}}
	tb.Cleanup(func() { c.Close(); client.Close() })
	return c, client
}

// TestSourceOfConnection: a call's source names its connection's two
// addresses, at each request of the connection.
func TestSourceOfConnection(t *testing.T) {
	c, client := loopbackLF(t)
	var ctx fasthttp.RequestCtx
	peer := client.LocalAddr().(*net.TCPAddr).AddrPort()
	local := client.RemoteAddr().(*net.TCPAddr).AddrPort()
	for i := range 3 {
		ctx.Init2(c, discardLogger{}, false)
		ctx.Request.Header.SetRequestURI("/p?q=1")
		ctx.Request.Header.SetHost("h")
		src := sourceOf(&ctx)
		if src.peer != peer.Addr() || src.port != local.Port() || src.path != "/p" || src.host != "h" || src.conn != 0 {
			t.Fatalf("request %d: source %+v, want peer %v, port %d, path /p, host h, plaintext", i, src, peer.Addr(), local.Port())
		}
		if got, want := string(appendPeerIP(nil, &ctx)), ctx.RemoteIP().String(); got != want || want != "127.0.0.1" {
			t.Fatalf("request %d: peer IP %q, want fasthttp's %q (127.0.0.1)", i, got, want)
		}
		var r rbacReq
		r.of(&ctx)
		if r.peer != peer.Addr() || r.local != netip.AddrPortFrom(local.Addr(), local.Port()) || r.tls != nil {
			t.Fatalf("request %d: rbac view peer %v local %v, want %v %v", i, r.peer, r.local, peer.Addr(), local)
		}
	}
}

// BenchmarkSourceOf is what a call record reads of a plaintext HTTP/1.1
// request and its connection.
func BenchmarkSourceOf(b *testing.B) {
	c, _ := loopbackLF(b)
	var ctx fasthttp.RequestCtx
	ctx.Init2(c, discardLogger{}, false)
	ctx.Request.Header.SetRequestURI("/bench/path?q=1")
	ctx.Request.Header.SetHost("bench.local")
	b.ReportAllocs()
	for b.Loop() {
		if src := sourceOf(&ctx); src.port == 0 {
			b.Fatal("no port")
		}
	}
}
