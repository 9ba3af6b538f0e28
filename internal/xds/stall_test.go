package xds

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sextant-mesh/sextant/internal/config"
)

// acceptLog is a listener that keeps the connections it accepted.
type acceptLog struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *acceptLog) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

// stallProxy forwards TCP between clients and a server; while paused it
// reads nothing from the server, whose socket then sees the shut window of
// a client that stopped reading (its receive buffer is kept small so that
// the window shuts after a few kilobytes).
type stallProxy struct {
	lis    net.Listener
	target string
	hold   atomic.Pointer[chan struct{}]
	wg     sync.WaitGroup
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{lis: lis, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() { lis.Close(); p.resume(); p.wg.Wait() })
	return p
}

func (p *stallProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) })
			if err != nil {
				return err
			}
			return serr
		}}
		s, err := d.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(s, c); s.Close() }()
		go func() {
			defer p.wg.Done()
			defer c.Close()
			buf := make([]byte, 4096)
			for {
				if h := p.hold.Load(); h != nil {
					<-*h
				}
				n, err := s.Read(buf)
				if n > 0 {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

func (p *stallProxy) pause() {
	h := make(chan struct{})
	p.hold.Store(&h)
}

func (p *stallProxy) resume() {
	if h := p.hold.Swap(nil); h != nil {
		close(*h)
	}
}

// bigClusters is 64 clusters of ~4 KB each: 256 KB in one response, more
// than the client's flow-control window, so the server has unsent data.
func bigClusters() []Resource {
	var out []Resource
	for i := range 64 {
		cl := Cluster("c"+string(rune('A'+i)), config.Policy{})
		cl.AltStatName = strings.Repeat("x", 4000)
		out = append(out, Resource{Name: cl.Name, Version: "1", Message: cl})
	}
	return out
}

// serveStalled serves c with opts behind a stall proxy, subscribes to every
// cluster with the proxy paused, and returns the stream, the proxy and the
// listener of the accepted connections.
func serveStalled(t *testing.T, opts ServerOptions) (discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient, *stallProxy, *acceptLog) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	c := NewCache()
	c.Apply(TypeCluster, bigClusters(), nil, "1", time.Now())
	srv := NewServer(c, opts)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &acceptLog{Listener: inner}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx, lis); close(done) }()
	p := newStallProxy(t, inner.Addr().String())
	conn, err := grpc.NewClient(p.lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	t.Cleanup(func() { scancel(); conn.Close(); cancel(); <-done })
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		t.Fatal(err)
	}
	// The first exchange goes through before the pause: the connection is
	// up and accepted.
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "stalled"}, TypeUrl: TypeRoute.URL(), ResourceNames: []string{"none"}}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, srv, func(SubscriberStatus) bool { return true })
	p.pause()
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeCluster.URL()}); err != nil {
		t.Fatal(err)
	}
	return stream, p, lis
}

// TestStallTimeoutDefault: the ADS server's connections are not dropped
// after gRPC's 20 s TCP_USER_TIMEOUT but after DefaultStallTimeout. With
// gRPC's default, 1,000 subscribers syncing on a loaded machine lost
// streams with "connection reset by peer" (docs/perf/push.md).
func TestStallTimeoutDefault(t *testing.T) {
	_, p, lis := serveStalled(t, ServerOptions{})
	defer p.resume()
	lis.mu.Lock()
	conns := append([]net.Conn(nil), lis.conns...)
	lis.mu.Unlock()
	if len(conns) == 0 {
		t.Fatal("no connection accepted")
	}
	for _, c := range conns {
		if got := userTimeout(t, c); got != DefaultStallTimeout {
			t.Fatalf("TCP_USER_TIMEOUT %v, want %v", got, DefaultStallTimeout)
		}
	}
}

// userTimeout is the TCP_USER_TIMEOUT of c's socket.
func userTimeout(t *testing.T, c net.Conn) time.Duration {
	t.Helper()
	sc, ok := c.(syscall.Conn)
	if !ok {
		t.Fatalf("%T has no socket", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ms int
	var gerr error
	if err := rc.Control(func(fd uintptr) { ms, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT) }); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	return time.Duration(ms) * time.Millisecond
}

// TestStalledSubscriber: a client that reads nothing for a while keeps its
// stream and gets everything when it reads again; one that reads nothing
// for longer than the stall timeout loses its connection (the kernel aborts
// the server's end: what a subscriber saw as "connection reset by peer").
func TestStalledSubscriber(t *testing.T) {
	const pause = 4 * time.Second
	t.Run("kept", func(t *testing.T) {
		stream, p, _ := serveStalled(t, ServerOptions{})
		time.Sleep(pause)
		p.resume()
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("stream lost after a %v stall: %v", pause, err)
		}
		if len(r.Resources) != 64 {
			t.Fatalf("%d clusters after the stall, want 64", len(r.Resources))
		}
	})
	t.Run("dropped", func(t *testing.T) {
		// The kernel probes the shut window with backoff (0.2, 0.4, 0.8 s,
		// ...) and aborts at the first probe past the timeout: well within
		// the pause.
		stream, p, _ := serveStalled(t, ServerOptions{StallTimeout: 500 * time.Millisecond})
		time.Sleep(pause)
		p.resume()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			r, err := stream.Recv()
			if err != nil {
				t.Logf("stream ended as expected: %v", err)
				return
			}
			if len(r.Resources) == 64 {
				t.Fatal("the stalled subscriber got its clusters: the stall timeout did not apply")
			}
		}
		t.Fatal("stream still open")
	})
}

// TestConfigGivesWayToEndpoints: while some subscriber has an endpoint
// change to send, another's config response waits (up to maxHold), and its
// own endpoint responses do not.
func TestConfigGivesWayToEndpoints(t *testing.T) {
	c := NewCache()
	c.Apply(TypeCluster, []Resource{cluster("a", config.Policy{})}, nil, "1", time.Now())
	c.Apply(TypeEndpoint, []Resource{endpoints("a", 80)}, nil, "1", time.Now())
	_, conn := startADS(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recvType := func(want Type) {
		t.Helper()
		r, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.TypeUrl != want.URL() {
			t.Fatalf("got %s, want %s", r.TypeUrl, want.URL())
		}
		s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce})
	}
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "b"}, TypeUrl: TypeEndpoint.URL(), ResourceNamesSubscribe: []string{"*"}})
	recvType(TypeEndpoint)
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: TypeCluster.URL(), ResourceNamesSubscribe: []string{"*"}})
	recvType(TypeCluster)

	c.endpointQueued() // as if another subscriber had endpoints to send
	start := time.Now()
	c.Apply(TypeCluster, []Resource{cluster("a", config.Policy{LoadBalancer: config.PolicyRandom})}, nil, "2", time.Now())
	recvType(TypeCluster)
	if took := time.Since(start); took < maxHold {
		t.Fatalf("the config response went after %v, while another subscriber had endpoints to send (hold %v)", took, maxHold)
	}
	recvType(TypeEndpoint) // warming
	// Endpoint changes are never held.
	c.Apply(TypeEndpoint, []Resource{endpoints("a", 81)}, nil, "3", time.Now())
	recvType(TypeEndpoint)
	c.endpointServed()
	// The subscriber's own count ends once its send loop is past the
	// endpoint response the client just read.
	select {
	case <-c.endpointsIdle():
	case <-time.After(time.Minute):
		t.Fatal("the endpoint count did not return to zero")
	}
}
