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
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/calllog"
	"github.com/sextant-mesh/sextant/internal/subset"
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
	r := g.forwardTCP(c, hello, t, g.metrics.passthrough)
	if r.err != nil {
		g.log.Debug("gateway: TLS passthrough", "cluster", r.cluster, "sni", sni, "endpoint", r.endpoint, "result", r.result, "err", r.err)
	}
}

// tcpResult is how a forwarded TCP connection went.
type tcpResult struct {
	cluster  string
	cl       *clusterRT // nil: cluster_not_found
	endpoint string     // "" if none was picked
	// result: connected, connect_failure, no_healthy_endpoint,
	// cluster_not_found (sextant_gateway_*_total's label).
	result  string
	in, out int64          // bytes from the client, to the client
	ended   calllog.Reason // once connected: none (both sides closed), idle_timeout, upstream_reset
	err     error
}

// forwardTCP connects client connection c to an endpoint of one of t's
// clusters (by weight; the endpoint by the cluster's balancer, which
// learns a failed connect), sends it first (what was read of c already),
// then copies both ways until both directions end or the connection is
// idle for t's idle timeout (splice). The outcome (connected, or why not)
// is counted in outcomes by cluster as soon as it is known.
func (g *Gateway) forwardTCP(c net.Conn, first []byte, t *tcpProxyRT, outcomes *prometheus.CounterVec) tcpResult {
	r, up, res, start := g.connectTCP(c, t)
	// Counted once known, not when the connection ends (hours later, for
	// some).
	outcomes.WithLabelValues(r.cluster, r.result).Inc()
	if up == nil {
		return r
	}
	defer r.cl.cb.disconnect()
	defer g.tunnels.done(up)
	_ = c.SetDeadline(time.Time{})
	if len(first) > 0 {
		if _, err := up.Write(first); err != nil {
			up.Close()
			res.Done(time.Since(start), balancer.Unreachable)
			r.ended, r.err = calllog.ReasonReset, err
			return r
		}
	}
	// The balancer learns the connect, not the tunnel's life (hours, for
	// some): a latency it would otherwise count against the endpoint.
	res.Done(time.Since(start), balancer.Success)
	down, upc, closed := g.istioTCP(r.cl, c, up) // Istio's TCP metrics (istiotcp.go)
	r.in, r.out, r.err = splice(down, upc, t.spec.idle)
	r.in += int64(len(first))
	closed()
	switch {
	case r.err == nil:
	case errors.Is(r.err, os.ErrDeadlineExceeded):
		r.ended = calllog.ReasonIdleTimeout
	default:
		r.ended = calllog.ReasonReset
	}
	return r
}

// connectTCP picks one of t's clusters and an endpoint of it and connects
// to it, registering the tunnel; up is nil when it could not (r says why).
func (g *Gateway) connectTCP(c net.Conn, t *tcpProxyRT) (r tcpResult, up net.Conn, res subset.Result, start time.Time) {
	name, cl := t.pick()
	r = tcpResult{cluster: name, cl: cl}
	if cl == nil {
		r.result, r.ended = "cluster_not_found", calllog.ReasonNoCluster
		return r, nil, res, start
	}
	var err error
	res, err = cl.lb.Pick(nil)
	if err != nil {
		r.result, r.ended, r.err = "no_healthy_endpoint", calllog.ReasonNoHealthy, err
		return r, nil, res, start
	}
	ep := cl.endpointFor(res.Host.ID)
	if ep == nil {
		res.Done(0, balancer.Canceled)
		r.result, r.ended = "no_healthy_endpoint", calllog.ReasonNoHealthy
		return r, nil, res, start
	}
	r.endpoint = ep.addr
	if !cl.cb.connect() { // max_connections (circuit.go)
		res.Done(0, balancer.Canceled)
		r.result, r.ended = "overflow", calllog.ReasonOverflow
		return r, nil, res, start
	}
	start = time.Now()
	up, err = net.DialTimeout("tcp", ep.addr, cl.spec.connect)
	if err != nil || up == nil {
		cl.cb.disconnect()
	}
	if err != nil {
		res.Done(time.Since(start), balancer.Unreachable)
		r.result, r.ended, r.err = "connect_failure", calllog.ReasonConnect, err
		return r, nil, res, start
	}
	if !g.tunnels.pending(up) {
		up.Close()
		cl.cb.disconnect()
		res.Done(0, balancer.Canceled)
		r.result, r.ended = "connect_failure", calllog.ReasonOther // shutting down
		return r, nil, res, start
	}
	if !g.tunnels.attach(up, c) {
		cl.cb.disconnect()
		res.Done(0, balancer.Canceled)
		r.result, r.ended = "connect_failure", calllog.ReasonOther
		return r, nil, res, start
	}
	r.result = "connected"
	return r, up, res, start
}

// splice copies bytes both ways until both directions have ended, or
// neither carried a byte for idle (0: no limit), through one bounded
// buffer each way. A side that ends its writes (EOF) is half-closed on
// the other connection, as Envoy's tcp_proxy does; an error closes both.
// It returns the bytes copied from down to up and back, and the first
// error (os.ErrDeadlineExceeded: idle), nil when both ended cleanly.
func splice(down, up net.Conn, idle time.Duration) (in, out int64, err error) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	var wg sync.WaitGroup
	var once sync.Once
	wg.Add(2)
	half := func(dst, src net.Conn, n *int64) {
		defer wg.Done()
		var e error
		if *n, e = idleCopy(dst, src, idle, &last); e != nil {
			// Broken, reset or idle: end both directions.
			once.Do(func() { err = e })
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
	go half(up, down, &in)
	go half(down, up, &out)
	wg.Wait()
	up.Close()
	return in, out, err
}

// idleCopy copies src to dst until EOF (nil) or an error; with idle set,
// reading gives up once neither direction (last, shared) moved a byte for
// idle. It returns the bytes copied.
func idleCopy(dst, src net.Conn, idle time.Duration, last *atomic.Int64) (int64, error) {
	// h2.go's 32 KiB buffers: a connection's two were most of its garbage.
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var total int64
	for {
		if idle > 0 {
			_ = src.SetReadDeadline(time.Unix(0, last.Load()).Add(idle))
		}
		n, err := src.Read(buf)
		if n > 0 {
			last.Store(time.Now().UnixNano())
			w, werr := dst.Write(buf[:n])
			total += int64(w)
			if werr != nil {
				return total, werr
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			return total, nil
		case idle > 0 && errors.Is(err, os.ErrDeadlineExceeded) && time.Since(time.Unix(0, last.Load())) < idle:
			// The other direction moved: not idle, read on.
		default:
			return total, err
		}
	}
}
