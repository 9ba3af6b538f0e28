package gateway_test

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/gateway"
)

// tcpListener is a plain TCP listener on port of one chain per cluster,
// each matched by the source prefix given beside it ("" for any).
func tcpListenerOf(port uint32, chains ...[2]string) *listener.Listener {
	l := &listener.Listener{Name: "tcp", Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
		Address: "0.0.0.0", PortSpecifier: &core.SocketAddress_PortValue{PortValue: port}}}}}
	for _, c := range chains {
		a, _ := anypb.New(&tcpproxy.TcpProxy{StatPrefix: "tcp/" + c[0], ClusterSpecifier: &tcpproxy.TcpProxy_Cluster{Cluster: c[0]}})
		fcm := &listener.FilterChainMatch{}
		if c[1] != "" {
			addr, bits, _ := strings.Cut(c[1], "/")
			var n uint32
			fmt.Sscan(bits, &n)
			fcm.SourcePrefixRanges = []*core.CidrRange{{AddressPrefix: addr, PrefixLen: wrapperspb.UInt32(n)}}
		}
		l.FilterChains = append(l.FilterChains, &listener.FilterChain{FilterChainMatch: fcm,
			Filters: []*listener.Filter{{Name: "envoy.filters.network.tcp_proxy", ConfigType: &listener.Filter_TypedConfig{TypedConfig: a}}}})
	}
	return l
}

// startTCPEchoServer echoes each connection's bytes back until its EOF.
func startTCPEchoServer(tb testing.TB) *upstream {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	tb.Cleanup(func() { ln.Close(); wg.Wait() })
	a := ln.Addr().(*net.TCPAddr)
	return &upstream{name: "echo", addr: a.String(), host: "127.0.0.1", port: uint32(a.Port)}
}

// startTCPGateway starts a gateway serving TCP on a port of its own.
func startTCPGateway(tb testing.TB, cpAddr string) (*gw, string) {
	tb.Helper()
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	w := startGatewayWith(tb, cpAddr, gateway.Options{TCPListenPorts: []uint32{uint32(tln.Addr().(*net.TCPAddr).Port)}})
	done := make(chan error, 1)
	go func() { done <- w.g.ServeTCP(tln) }()
	tb.Cleanup(func() {
		tln.Close()
		if err := <-done; err != nil {
			tb.Errorf("ServeTCP: %v", err)
		}
	})
	return w, tln.Addr().String()
}

// roundTrip sends msg over a new connection to addr, half-closes, and
// reads the answer to EOF (a connection the far side closed may fail the
// write: the bytes read tell).
func roundTrip(addr string, msg []byte) ([]byte, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(msg)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		errc <- err
	}()
	b, err := io.ReadAll(c)
	if werr := <-errc; err == nil {
		err = werr
	}
	return b, err
}

// TestTCPChains: a TCP listener's chains are matched by the client's
// address (the most specific source prefix wins; no chain fits: closed),
// bytes go both ways with a half-close, and each connection leaves a
// record: its bytes, or connect_failure for a cluster whose endpoint
// refuses.
func TestTCPChains(t *testing.T) {
	echo := startTCPEchoServer(t)
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadU := &upstream{host: "127.0.0.1", port: uint32(dead.Addr().(*net.TCPAddr).Port), addr: dead.Addr().String()}
	dead.Close()
	cp := startControlPlane(t, "")
	w, addr := startTCPGateway(t, cp.addr)
	_, ps, _ := net.SplitHostPort(addr)
	var port uint32
	fmt.Sscan(ps, &port)
	// 127.0.0.0/8 to echo, 127.0.0.1/32 (more specific) to the dead one.
	cp.set(tcpListenerOf(port, [2]string{"echo", "127.0.0.0/8"}, [2]string{"dead", "127.0.0.1/32"}),
		edsCluster("echo"), assignment("echo", ep{u: echo}), edsCluster("dead"), assignment("dead", ep{u: deadU}))
	// The refusing endpoint's chain: the connection is closed, and its
	// record says connect_failure.
	waitFor(t, "the dead chain", func() bool {
		if b, _ := roundTrip(addr, []byte("x")); len(b) != 0 {
			t.Fatalf("to the refusing endpoint: %q, want closed", b)
		}
		for _, c := range w.calls(t, "dead") {
			if c.Reason == "connect_failure" && c.Status == 503 && c.BytesIn == 0 && c.Endpoint == deadU.addr {
				return true
			}
		}
		return false
	})
	// Now only the /8 chain fits 127.0.0.1.
	cp.set(tcpListenerOf(port, [2]string{"echo", "127.0.0.0/8"}, [2]string{"dead", "10.0.0.0/8"}),
		edsCluster("echo"), assignment("echo", ep{u: echo}), edsCluster("dead"), assignment("dead", ep{u: deadU}))
	var conf struct {
		TCP []struct {
			Port     uint32
			Listener string
			Chains   []struct {
				Sources  []string          `json:"source_prefixes"`
				Route    string            `json:"route"`
				Clusters map[string]uint32 `json:"clusters"`
			}
		}
	}
	waitFor(t, "/v1/config's tcp", func() bool {
		w.adminJSON(t, "/v1/config", &conf)
		return len(conf.TCP) == 1 && len(conf.TCP[0].Chains) == 2 && conf.TCP[0].Chains[1].Sources[0] == "10.0.0.0/8"
	})
	if c := conf.TCP[0]; c.Port != port || c.Listener != "tcp" || c.Chains[0].Route != "tcp/echo" || c.Chains[0].Clusters["echo"] != 1 {
		t.Errorf("/v1/config tcp: %+v", conf.TCP)
	}
	msg := []byte(strings.Repeat("0123456789", 10000))
	waitFor(t, "the echo chain", func() bool { b, err := roundTrip(addr, msg); return err == nil && string(b) == string(msg) })
	// No chain fits: closed at once.
	cp.set(tcpListenerOf(port, [2]string{"dead", "10.0.0.0/8"}), edsCluster("dead"), assignment("dead", ep{u: deadU}))
	waitFor(t, "no chain", func() bool {
		b, _ := roundTrip(addr, msg)
		return len(b) == 0 && strings.Contains(w.metrics(t), `sextant_gateway_tcp_connections_total{cluster="",result="no_chain"}`)
	})

	waitFor(t, "the echo records", func() bool {
		for _, c := range w.calls(t, "echo") {
			if c.BytesIn == uint32(len(msg)) && c.BytesOut == uint32(len(msg)) && c.Reason == "" && c.Status == 200 && c.Route == "tcp/echo" {
				return true
			}
		}
		return false
	})
}

// BenchmarkTCPProxy: one connection per op, 64 KiB each way (sent,
// half-closed, echoed back), straight to the echo server and through the
// gateway's TCP proxy, in one run; cpu-us/conn is the process's CPU time
// (user+system, both ends and the proxy) per connection.
func BenchmarkTCPProxy(b *testing.B) {
	echo := startTCPEchoServer(b)
	cp := startControlPlaneB(b)
	w, addr := startTCPGateway(b, cp.addr)
	_, ps, _ := net.SplitHostPort(addr)
	var port uint32
	fmt.Sscan(ps, &port)
	cp.set(tcpListenerOf(port, [2]string{"echo", ""}), edsCluster("echo"), assignment("echo", ep{u: echo}))
	msg := make([]byte, 64<<10)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if got, err := roundTrip(addr, msg); err == nil && len(got) == len(msg) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the gateway never proxied")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = w
	for _, bc := range []struct{ name, addr string }{{"direct", echo.addr}, {"gateway", addr}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(2 * len(msg)))
			var before, after syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			b.ResetTimer()
			for range b.N {
				got, err := roundTrip(bc.addr, msg)
				if err != nil || len(got) != len(msg) {
					b.Fatalf("%d bytes back: %v", len(got), err)
				}
			}
			b.StopTimer()
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			cpu := time.Duration(after.Utime.Nano()-before.Utime.Nano()) + time.Duration(after.Stime.Nano()-before.Stime.Nano())
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/conn")
		})
	}
}

// metrics is the gateway's /metrics page.
func (w *gw) metrics(t *testing.T) string {
	t.Helper()
	resp, err := w.client.Get(w.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestServeTCPStops: closing the listener ends ServeTCP at once, closing
// an open connection rather than waiting out its idle timeout (an hour).
func TestServeTCPStops(t *testing.T) {
	echo := startTCPEchoServer(t)
	cp := startControlPlane(t, "")
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint32(tln.Addr().(*net.TCPAddr).Port)
	w := startGatewayWith(t, cp.addr, gateway.Options{TCPListenPorts: []uint32{port}})
	done := make(chan error, 1)
	go func() { done <- w.g.ServeTCP(tln) }()
	cp.set(tcpListenerOf(port, [2]string{"echo", ""}), edsCluster("echo"), assignment("echo", ep{u: echo}))
	var c net.Conn
	waitFor(t, "an open connection", func() bool {
		if c != nil {
			c.Close()
		}
		if c, err = net.DialTimeout("tcp", tln.Addr().String(), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "x")
		b := make([]byte, 1)
		n, _ := c.Read(b)
		return n == 1
	})
	defer c.Close()
	tln.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ServeTCP: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeTCP still waits for its open connection")
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the connection is still open")
	}
}
