package gateway

// A sidecar's inbound side (sextant sidecar, docs/sidecar.md): the gateway
// subscribes, beside the wildcard listeners, to the workload's inbound
// listener, the one the control plane builds for a proxyless gRPC server
// at the workload's registered address (its PeerAuthentication mode as
// filter chains, its AuthorizationPolicies as RBAC filters, an inline
// route with non_forwarding_action). ServeInbound serves it on the mesh
// port: a connection whose first byte starts a TLS handshake goes to the
// TLS chain (the workload's identity, client certificates verified
// against the mesh's roots), any other to the plaintext chain, and is
// closed when the mode has none (STRICT). Every call goes to the app on
// Inbound.App: the route's non_forwarding_action names InboundCluster, a
// STATIC cluster made here. The TLS listener is kept in the TLS state
// under the mesh port, so identity renewals rebuild it as any other.

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/valyala/fasthttp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextant-mesh/sextant/internal/gateway/xdsclient"
)

// ServerListenerPrefix starts the name of the inbound listener of the
// workload listening at an address (the control plane's
// xds.ServerListenerPrefix, which grpc-go's xDS servers ask for too).
const ServerListenerPrefix = "grpc/server?xds.resource.listening_address="

// InboundCluster is the cluster of a sidecar's app, which an inbound
// route's non_forwarding_action stands for.
const InboundCluster = "inbound|app"

// Inbound is what a sidecar serves inbound.
type Inbound struct {
	// Addr is the mesh port's address as registered (host:port, the host
	// an IP address): it names the inbound listener.
	Addr string
	// App is the app's address, host:port (127.0.0.1:8080).
	App string
	// Service is the call log's partition of inbound calls (NAME.NS).
	Service string
}

// InboundListenerName is the name of the inbound listener of the workload
// registered at addr.
func InboundListenerName(addr string) string { return ServerListenerPrefix + addr }

func isInboundListener(name string) bool { return strings.HasPrefix(name, ServerListenerPrefix) }

// SidecarXDSTypes are XDSTypes with the inbound listener of the workload
// at addr subscribed to by name (the control plane makes it on demand).
func SidecarXDSTypes(addr string) []xdsclient.Type {
	ts := XDSTypes()
	for i := range ts {
		if ts[i].URL == ListenerType {
			ts[i].Names = []string{InboundListenerName(addr)}
		}
	}
	return ts
}

// compile checks in and returns its mesh port and the app's cluster.
func (in *Inbound) compile() (uint32, *clusterSpec, error) {
	ap, err := netip.ParseAddrPort(in.Addr)
	if err != nil || ap.Port() == 0 {
		return 0, nil, fmt.Errorf("gateway: inbound address %q: want IP:port", in.Addr)
	}
	app, err := netip.ParseAddrPort(in.App)
	if err != nil || app.Port() == 0 {
		return 0, nil, fmt.Errorf("gateway: app address %q: want IP:port", in.App)
	}
	svc := in.Service
	if svc == "" {
		svc = InboundCluster
	}
	c := &cluster.Cluster{Name: InboundCluster, ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_STATIC},
		LoadAssignment: &endpointpb.ClusterLoadAssignment{ClusterName: InboundCluster, Endpoints: []*endpointpb.LocalityLbEndpoints{{
			LbEndpoints: []*endpointpb.LbEndpoint{{HostIdentifier: &endpointpb.LbEndpoint_Endpoint{Endpoint: &endpointpb.Endpoint{
				Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
					Address: app.Addr().String(), PortSpecifier: &core.SocketAddress_PortValue{PortValue: uint32(app.Port())}}}},
			}}}},
		}}},
		Metadata: &core.Metadata{FilterMetadata: map[string]*structpb.Struct{SextantMetadataKey: {Fields: map[string]*structpb.Value{
			"service": structpb.NewStringValue(svc)}}}},
	}
	spec, err := decodeCluster(c)
	if err != nil {
		return 0, nil, fmt.Errorf("gateway: app cluster: %w", err)
	}
	return uint32(ap.Port()), spec, nil
}

// withInboundCluster is s with the app's cluster added (a copy: the xDS
// client keeps s).
func (g *Gateway) withInboundCluster(s xdsclient.State) xdsclient.State {
	if g.inboundCluster == nil {
		return s
	}
	out := maps.Clone(s)
	cl := maps.Clone(s[ClusterType])
	if cl == nil {
		cl = map[string]any{}
	}
	cl[InboundCluster] = g.inboundCluster
	out[ClusterType] = cl
	return out
}

// buildInbound builds the inbound listener's run-time form (nil until it
// arrives): its TLS chain matched by any server name, its plaintext chain
// apart.
func (g *Gateway) buildInbound(s xdsclient.State, clusters map[string]*clusterRT, want map[string][]string, waits map[string]string) *tlsListenerRT {
	ls, _ := s[ListenerType][InboundListenerName(g.opts.Inbound.Addr)].(*listenerSpec)
	if ls == nil {
		return nil
	}
	rt := &tlsListenerRT{name: ls.name, exact: map[string]*tlsChainRT{}, wild: map[string]*tlsChainRT{}}
	for _, cs := range ls.chains {
		if cs.tcp != nil {
			continue
		}
		c := g.buildChain(ls, cs, s, clusters, want, waits)
		switch {
		case cs.tls == nil:
			rt.plain = c
		case rt.any == nil:
			rt.any = c
		}
	}
	return rt
}

// ServeInbound serves the workload's inbound listener on ln (the mesh
// port, Options.Inbound's) until Shutdown: mutual TLS or plaintext as the
// listener's chains allow, then HTTP/1.1 or HTTP/2 (ALPN h2, or h2c with
// prior knowledge), each call through the chain's RBAC filters to the app.
// Until the listener arrives every connection is closed. It returns nil
// after Shutdown.
func (g *Gateway) ServeInbound(ln net.Listener) error {
	if g.opts.Inbound == nil {
		return errors.New("gateway: ServeInbound needs Options.Inbound")
	}
	if g.inboundErr != nil {
		return g.inboundErr
	}
	port := g.inboundPort
	base := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		return g.configForClient(port, h)
	}}
	fastLn := newConnListener(ln.Addr())
	h2Ln := newConnListener(ln.Addr())
	srv := g.newFastServer(func(ctx *fasthttp.RequestCtx, ph *passHead) {
		if c, ok := ctx.Conn().(*tlsServerConn); ok {
			g.serveOn(ctx, g.tlsTable(port, c.sni), ph)
			return
		}
		g.serveOn(ctx, g.inboundPlainTable(), ph)
	})
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	h2 := g.newH2Server(func(w http.ResponseWriter, r *http.Request, ctx *fasthttp.RequestCtx) {
		if r.TLS != nil {
			g.serveH2On(w, r, ctx, g.tlsTable(port, r.TLS.ServerName))
			return
		}
		g.serveH2On(w, r, ctx, g.inboundPlainTable())
	}, &p)
	g.srvMu.Lock()
	g.tlsServers = append(g.tlsServers, servers{fast: srv, h2: h2, ln: ln})
	g.srvMu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = srv.Serve(fastLn) }()
	go func() { defer wg.Done(); _ = h2.Serve(h2Ln) }()
	var conns sync.WaitGroup
	err := acceptLoop(ln, func(c net.Conn) {
		conns.Add(1)
		go func() {
			defer conns.Done()
			g.inboundConn(c, base, port, fastLn, h2Ln)
		}()
	})
	conns.Wait()
	fastLn.Close()
	h2Ln.Close()
	wg.Wait()
	return err
}

// inboundConn reads the first byte of c: a TLS record's (22, handshake)
// goes to the TLS handshake, any other to the plaintext chain, if any.
func (g *Gateway) inboundConn(c net.Conn, base *tls.Config, port uint32, fastLn, h2Ln *connListener) {
	var b [1]byte
	_ = c.SetReadDeadline(time.Now().Add(tlsHandshakeTimeout))
	if _, err := io.ReadFull(c, b[:]); err != nil {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	pc := &prefixConn{Conn: c, prefix: b[:]}
	if b[0] == 0x16 {
		g.handshake(pc, base, port, fastLn, h2Ln)
		return
	}
	if g.inboundPlainTable() == nil {
		// STRICT (or no listener yet): as Envoy without a matching chain.
		g.metrics.tlsHandshakeErrors.Inc()
		g.log.Debug("gateway: plaintext connection refused on the mesh port", "remote", c.RemoteAddr().String())
		c.Close()
		return
	}
	g.dispatch(pc, fastLn, h2Ln)
}

// inboundPlainTable is the inbound listener's plaintext chain's routing
// table; nil when it has none.
func (g *Gateway) inboundPlainTable() *table {
	st := g.tls.Load()
	if st == nil {
		return nil
	}
	if l := (*st)[g.inboundPort]; l != nil && l.plain != nil {
		return l.plain.table
	}
	return nil
}
