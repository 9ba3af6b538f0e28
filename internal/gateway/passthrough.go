package gateway

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"

	"github.com/sextant-mesh/sextant/internal/balancer"
)

// TLS passthrough: a filter chain of a TLS port that forwards the client's
// TLS unopened to an endpoint, chosen by the server name of its
// ClientHello (Envoy's tcp_proxy behind filter_chain_match.server_names,
// what Istio publishes for a Gateway server with tls.mode PASSTHROUGH).
// The gateway reads the ClientHello, never answers it, and replays it to
// the endpoint, which does the handshake with the client.

const (
	tcpProxyFilterName = "envoy.filters.network.tcp_proxy"
	tcpProxyTypeURL    = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
	// defaultTCPIdle is tcp_proxy's idle_timeout when unset (Envoy's).
	defaultTCPIdle = time.Hour
)

// tcpProxySpec is a chain's tcp_proxy: its cluster or weighted clusters,
// and its idle timeout (0: none).
type tcpProxySpec struct {
	clusters []clusterWeight
	total    uint32
	idle     time.Duration
}

func isTCPProxy(f *listener.Filter) bool {
	return f.GetName() == tcpProxyFilterName || f.GetTypedConfig().GetTypeUrl() == tcpProxyTypeURL
}

// decodeTCPProxy reads a tcp_proxy filter. What would change how bytes
// flow and is not done here is refused, never ignored.
func decodeTCPProxy(path string, f *listener.Filter) (*tcpProxySpec, error) {
	m := new(tcpproxy.TcpProxy)
	if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
		return nil, fieldErr(path+".typed_config", "%v", err)
	}
	switch {
	case m.GetMetadataMatch() != nil:
		return nil, fieldErr(path+".metadata_match", "%v (publish the subset's own cluster)", errUnsupported)
	case m.GetTunnelingConfig() != nil:
		return nil, fieldErr(path+".tunneling_config", "%v", errUnsupported)
	case m.GetMaxConnectAttempts() != nil && m.GetMaxConnectAttempts().GetValue() > 1:
		return nil, fieldErr(path+".max_connect_attempts", "%v (one attempt, Envoy's default)", errUnsupported)
	case m.GetAccessLog() != nil || m.GetHashPolicy() != nil || m.GetOnDemand() != nil:
		return nil, fieldErr(path, "access_log, hash_policy, on_demand: %v", errUnsupported)
	}
	s := &tcpProxySpec{idle: defaultTCPIdle}
	if d := m.GetIdleTimeout(); d != nil {
		t, err := duration(d, path+".idle_timeout")
		if err != nil {
			return nil, err
		}
		s.idle = t
	}
	switch c := m.GetClusterSpecifier().(type) {
	case *tcpproxy.TcpProxy_Cluster:
		if c.Cluster == "" {
			return nil, fieldErr(path+".cluster", "empty")
		}
		s.clusters, s.total = []clusterWeight{{name: c.Cluster, weight: 1}}, 1
	case *tcpproxy.TcpProxy_WeightedClusters:
		var total uint64
		for i, cw := range c.WeightedClusters.GetClusters() {
			p := fmt.Sprintf("%s.weighted_clusters.clusters[%d]", path, i)
			if cw.GetName() == "" {
				return nil, fieldErr(p+".name", "empty")
			}
			if cw.GetMetadataMatch() != nil {
				return nil, fieldErr(p+".metadata_match", "%v", errUnsupported)
			}
			total += uint64(cw.GetWeight())
			s.clusters = append(s.clusters, clusterWeight{name: cw.GetName(), weight: cw.GetWeight()})
		}
		if len(s.clusters) == 0 {
			return nil, fieldErr(path+".weighted_clusters.clusters", "empty")
		}
		if total == 0 || total > math.MaxUint32 {
			return nil, fieldErr(path+".weighted_clusters", "weights sum to %d (want 1..2^32-1)", total)
		}
		s.total = uint32(total)
	default:
		return nil, fieldErr(path, "cluster specifier %T: %v (cluster, weighted_clusters)", c, errUnsupported)
	}
	return s, nil
}

// tcpProxyRT is a passthrough chain at run time: its clusters (nil where
// the cluster is unknown: its connections are closed).
type tcpProxyRT struct {
	spec     *tcpProxySpec
	clusters []*clusterRT
}

func newTCPProxyRT(s *tcpProxySpec, clusters map[string]*clusterRT) *tcpProxyRT {
	rt := &tcpProxyRT{spec: s, clusters: make([]*clusterRT, len(s.clusters))}
	for i, cw := range s.clusters {
		rt.clusters[i] = clusters[cw.name]
	}
	return rt
}

// pick chooses a weighted cluster: its name, and nil if it is unknown.
func (t *tcpProxyRT) pick() (string, *clusterRT) {
	n := rand.Uint32N(t.spec.total)
	for i, cw := range t.spec.clusters {
		if n < cw.weight {
			return cw.name, t.clusters[i]
		}
		n -= cw.weight
	}
	last := len(t.clusters) - 1
	return t.spec.clusters[last].name, t.clusters[last]
}

// errPeeked ends the handshake peekHello runs once it has the ClientHello.
var errPeeked = errors.New("gateway: ClientHello read")

// peekHello reads c's ClientHello without answering it (crypto/tls parses
// it; whatever it would send is dropped): the bytes read, to replay, and
// the server name asked for ("" without SNI).
func peekHello(c net.Conn) ([]byte, string, error) {
	rec := &recordConn{Conn: c}
	var sni string
	got := false
	err := tls.Server(rec, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		sni, got = h.ServerName, true
		return nil, errPeeked
	}}).Handshake()
	if !got {
		return nil, "", fmt.Errorf("gateway: read ClientHello: %w", err)
	}
	return rec.buf, sni, nil
}

// recordConn keeps what is read through it and sends nothing.
type recordConn struct {
	net.Conn
	buf []byte
}

func (r *recordConn) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.buf = append(r.buf, p[:n]...)
	return n, err
}

func (r *recordConn) Write(p []byte) (int, error) { return len(p), nil }

// passThrough forwards the client connection c, whose ClientHello (hello)
// asked for sni, to an endpoint of the chain's cluster, until either side
// ends it or it is idle for the chain's idle timeout. Connections are
// counted by cluster and outcome (sextant_gateway_tls_passthrough_total);
// they are not calls (the gateway cannot see requests inside TLS), so the
// call log has no record of them.
func (g *Gateway) passThrough(c net.Conn, hello []byte, t *tcpProxyRT, sni string) {
	defer c.Close()
	name, cl := t.pick()
	count := func(result string) { g.metrics.passthrough.WithLabelValues(name, result).Inc() }
	if cl == nil {
		count("cluster_not_found")
		g.log.Debug("gateway: TLS passthrough: no such cluster", "cluster", name, "sni", sni)
		return
	}
	res, err := cl.lb.Pick(nil)
	if err != nil {
		count("no_healthy_endpoint")
		return
	}
	ep := cl.endpointFor(res.Host.ID)
	if ep == nil {
		res.Done(0, balancer.Canceled)
		count("no_healthy_endpoint")
		return
	}
	start := time.Now()
	up, err := net.DialTimeout("tcp", ep.addr, cl.spec.connect)
	if err != nil {
		res.Done(time.Since(start), balancer.Unreachable)
		count("connect_failure")
		g.log.Debug("gateway: TLS passthrough: connect", "endpoint", ep.addr, "err", err)
		return
	}
	if !g.tunnels.pending(up) {
		up.Close()
		res.Done(0, balancer.Canceled)
		return
	}
	if !g.tunnels.attach(up, c) {
		res.Done(0, balancer.Canceled)
		return
	}
	defer g.tunnels.done(up)
	count("connected")
	_ = c.SetDeadline(time.Time{})
	if _, err := up.Write(hello); err != nil {
		up.Close()
		res.Done(time.Since(start), balancer.Unreachable)
		return
	}
	// The balancer learns the connect, not the tunnel's life (hours, for
	// some): a latency it would otherwise count against the endpoint.
	res.Done(time.Since(start), balancer.Success)
	down, upc, closed := g.istioTCP(cl, c, up) // Istio's TCP metrics (istiotcp.go)
	splice(down, upc, t.spec.idle)
	closed()
}

// splice copies bytes both ways until both directions have ended, or
// neither carried a byte for idle (0: no limit). A side that ends its
// writes (EOF) is half-closed on the other connection, as Envoy's
// tcp_proxy does; an error closes both.
func splice(down, up net.Conn, idle time.Duration) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	var wg sync.WaitGroup
	wg.Add(2)
	half := func(dst, src net.Conn) {
		defer wg.Done()
		if err := idleCopy(dst, src, idle, &last); err != nil {
			// Broken, reset or idle: end both directions.
			down.Close()
			up.Close()
			return
		}
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	go half(up, down)
	go half(down, up)
	wg.Wait()
	up.Close()
}

// idleCopy copies src to dst until EOF (nil) or an error; with idle set,
// reading gives up once neither direction (last, shared) moved a byte for
// idle.
func idleCopy(dst, src net.Conn, idle time.Duration, last *atomic.Int64) error {
	buf := make([]byte, 32<<10)
	for {
		if idle > 0 {
			_ = src.SetReadDeadline(time.Unix(0, last.Load()).Add(idle))
		}
		n, err := src.Read(buf)
		if n > 0 {
			last.Store(time.Now().UnixNano())
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			return nil
		case idle > 0 && errors.Is(err, os.ErrDeadlineExceeded) && time.Since(time.Unix(0, last.Load())) < idle:
			// The other direction moved: not idle, read on.
		default:
			return err
		}
	}
}
