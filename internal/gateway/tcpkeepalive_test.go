package gateway

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestUpstreamKeepalive: a cluster's tcp_keepalive (a DestinationRule's
// tcp.tcpKeepalive) is on the sockets its pools dial, HTTP/1.1 and HTTP/2
// alike, with its probes, time and interval.
func TestUpstreamKeepalive(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	addr := ln.Addr().String()
	opts := connOpts{keepalive: true, kaProbes: 4, kaIdle: 7 * time.Second, kaInterval: 3 * time.Second}
	dials := map[string]func() (net.Conn, error){
		"http1": func() (net.Conn, error) { return newH1Upstream(addr, time.Second, nil, opts).pool.dial(addr) },
		"h2c": func() (net.Conn, error) {
			return newH2CUpstream(addr, time.Second, nil, opts).tr.dial(context.Background())
		},
	}
	for name, dial := range dials {
		c, err := dial()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer c.Close()
		if bc, ok := c.(*batchConn); ok {
			c = bc.Conn
		}
		sc, ok := c.(syscall.Conn)
		if !ok {
			t.Fatalf("%s: a %T has no socket to read", name, c)
		}
		raw, err := sc.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][3]int{
			"SO_KEEPALIVE":  {syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
			"TCP_KEEPCNT":   {syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, 4},
			"TCP_KEEPIDLE":  {syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, 7},
			"TCP_KEEPINTVL": {syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, 3},
		}
		for opt, w := range want {
			var v int
			var gerr error
			if err := raw.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), w[0], w[1]) }); err != nil || gerr != nil {
				t.Fatalf("%s: %s: %v %v", name, opt, err, gerr)
			}
			if v != w[2] {
				t.Errorf("%s: %s %d, want %d", name, opt, v, w[2])
			}
		}
	}
}
