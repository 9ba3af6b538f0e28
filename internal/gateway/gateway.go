// Package gateway owns Sextant's data plane: an HTTP reverse proxy (HTTP/1.1
// and h2c in and out) configured only through xDS like Envoy or MOSN. It
// turns Envoy resources (listener, routes, clusters, endpoints) into an
// immutable routing table, routes each call by host, path and headers to a
// weighted cluster, picks an endpoint with the subset load balancer
// (internal/subset) over the cluster's policy (internal/balancer), forwards
// over pooled connections with timeouts, retries (with a budget) and outlier
// ejection, and hands one record per call to a Recorder (the call log,
// subpackage calllog). The xDS transport is subpackage xdsclient.
//
// It does not own the control plane, the policies or the storage engine.
// See docs/gateway.md.
package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"google.golang.org/protobuf/proto"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/calllog"
	"github.com/sextant-mesh/sextant/internal/gateway/xdsclient"
	"github.com/sextant-mesh/sextant/internal/locality"
)

// Recorder receives one record per call.
type Recorder interface {
	// Record is called on the call's goroutine after the answer is ready;
	// it must not block (calllog.Log drops when its queue is full).
	Record(r calllog.Record)
}

// Options configure a Gateway; zero values are defaults.
type Options struct {
	// Listener names the Listener resource whose routes the gateway
	// serves. Empty: the listener whose port is ListenPort, else
	// ProxyListener (Sextant's control plane's), else the only one.
	Listener   string
	ListenPort uint32
	// MaxRequestBytes limits request bodies (413 beyond); 0: no limit
	// (bodies stream in bounded memory, as in Envoy).
	MaxRequestBytes int
	// RequestReadTimeout bounds reading one request, headers and body,
	// from its first byte (a client trickling headers is cut off after
	// it); default 30s. Waiting between requests is the idle timeout.
	RequestReadTimeout time.Duration
	// TLSListenPorts are the ports ServeTLS serves: each serves the TLS
	// listener (filter chains with a DownstreamTlsContext) on that port.
	TLSListenPorts []uint32
	// TCPListenPorts are the ports ServeTCP serves: each serves the plain
	// TCP listener (tcp_proxy filter chains, tcp.go) on that port.
	TCPListenPorts []uint32
	// Recorder receives call records; nil records nothing.
	Recorder Recorder
	// Logger: nil discards.
	Logger *slog.Logger
	// IstioMetrics turns on Istio's standard metrics on /metrics
	// (istiometrics.go), for IstioReporters (default both: the gateway
	// stands for the caller's proxy and the destination's), keeping at
	// most IstioMaxSeries label sets (default DefaultIstioMaxSeries).
	IstioMetrics   bool
	IstioReporters []string
	IstioMaxSeries int
	// Tracing turns on spans (tracing.go); nil: off.
	Tracing *Tracing
	// Inbound makes the gateway a sidecar's too: ServeInbound serves the
	// workload's inbound listener and forwards to its app (inbound.go).
	Inbound *Inbound
	// AccessLog turns on access logs (accesslog.go); nil: off.
	AccessLog *AccessLog
	// Locality is where the gateway runs (zero: unknown). With it, an EDS
	// assignment whose localities all have priority 0 gets Istio's
	// priorities from here (priority.go's localize): same zone first,
	// then the region, then the rest.
	Locality locality.Locality
}

// Gateway is the proxy. Update is called by the xDS client's goroutine;
// calls are served on fasthttp's and net/http's goroutines.
type Gateway struct {
	opts    Options
	log     *slog.Logger
	rec     Recorder
	metrics *metricsSet
	istio   *istioMetrics // nil without Options.IstioMetrics
	table   atomic.Pointer[table]
	tls     atomic.Pointer[tlsState] // the TLS listeners (tls.go)
	tcpL    atomic.Pointer[tcpState] // the TCP listeners (tcp.go)
	pools   pools
	probes  *probeRunner // health checks' (healthcheck.go); under mu

	// mu serializes Update (one config goroutine, but tests call it too)
	// and guards the fields below.
	mu       sync.Mutex
	clusters map[string]*clusterRT
	// The secrets TLS clusters read: SDS's, and the gateway's identity
	// (identity.go). Under mu.
	sdsSecrets map[string]any
	identity   map[string]any
	// chainWaits: why each TLS filter chain (by listener and server
	// names) waited at the last update, so a wait is logged once. Under mu.
	chainWaits map[string]string
	applied    appliedConfig
	xds        func() xdsclient.Status
	// dns re-resolves DNS clusters (dns.go), made on first use; lookup
	// replaces the system resolver in tests. Under mu.
	dns    *dnsResolver
	lookup lookupFunc

	srvMu sync.Mutex
	srv   *h1Server
	h2    h2Serving
	ln    net.Listener
	// tlsServers are ServeTLS's, one per TLS listener, ServeInbound's and
	// ServeService's.
	tlsServers []servers

	// inboundPort and inboundCluster are Options.Inbound's (inbound.go).
	inboundPort    uint32
	inboundCluster *clusterSpec
	inboundErr     error // Options.Inbound's fault, returned by ServeInbound

	// jwks holds the remote keys of the JWT filters (jwks.go).
	jwks *jwksCache

	tunnels tunnels // upgraded connections (upgrade.go)
	mirrors mirrors // mirrored copies in flight (filter_mirror.go)
}

// appliedConfig is what /v1/config shows.
type appliedConfig struct {
	Listener  string
	Routes    string
	Mesh      string // the mesh's route config served beside Routes (meshport.go)
	At        time.Time
	Resources map[string][]any // type URL -> decoded protos
}

// New returns a gateway with no config: every call is answered 503 until
// the first Update.
func New(opts Options) *Gateway {
	if opts.RequestReadTimeout <= 0 {
		opts.RequestReadTimeout = 30 * time.Second
	}
	opts.MaxRequestBytes = max(opts.MaxRequestBytes, 0)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{opts: opts, log: opts.Logger, rec: opts.Recorder, metrics: newMetrics(), clusters: map[string]*clusterRT{},
		jwks: newJWKSCache(opts.Logger)}
	if opts.Inbound != nil {
		g.inboundPort, g.inboundCluster, g.inboundErr = opts.Inbound.compile()
	}
	if opts.IstioMetrics {
		im := newIstioMetrics(opts.Recorder, opts.IstioReporters, opts.IstioMaxSeries)
		im.sidecar = opts.Inbound != nil // istiosidecar.go
		g.metrics.reg.MustRegister(im)
		g.rec, g.istio = im, im
	}
	if opts.Tracing != nil {
		if st, ok := opts.Tracing.Sink.(exportStats); ok {
			registerOTLPMetrics(g.metrics.reg, "sextant_gateway_tracing", "spans", "Spans", st)
		}
	}
	if opts.AccessLog != nil {
		if st, ok := opts.AccessLog.Sink.(accessLogStats); ok {
			registerAccessLogMetrics(g.metrics.reg, st)
		}
		if st, ok := opts.AccessLog.OTel.(exportStats); ok {
			registerOTLPMetrics(g.metrics.reg, "sextant_gateway_access_log_otlp", "records", "Access log records", st)
		}
	}
	return g
}

// XDSTypes are the resource types the gateway follows, for xdsclient.
func XDSTypes() []xdsclient.Type {
	return []xdsclient.Type{
		{URL: ListenerType, Wildcard: true, Decode: decodeListener},
		{URL: ClusterType, Wildcard: true, Decode: decodeClusterAny},
		{URL: RouteType, Decode: decodeRouteAny},
		{URL: EndpointType, Decode: decodeEndpointsAny},
		{URL: SecretType, Decode: decodeSecretAny},
	}
}

// SetXDSStatus lets /v1/config and /metrics show the xDS client's versions.
func (g *Gateway) SetXDSStatus(f func() xdsclient.Status) {
	g.mu.Lock()
	g.xds = f
	g.mu.Unlock()
}

var _ xdsclient.Handler = (*Gateway)(nil)

// Update applies an accepted xDS state: it rebuilds the routing table and
// updates the clusters in place (endpoint diffs; learned balancer state
// survives), then swaps the table in. Calls in flight finish on the table
// and connections they started with. It returns the route and endpoint
// names to subscribe to. It implements xdsclient.Handler.
func (g *Gateway) Update(s xdsclient.State) (map[string][]string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ls, err := g.chooseListener(s[ListenerType])
	if err != nil {
		return nil, err
	}
	if ls != nil && ls.noHTTP != "" {
		return nil, fmt.Errorf("gateway: listener %q: %s", ls.name, ls.noHTTP)
	}
	next := map[string]*clusterRT{}
	// fresh: the checkers of new clusters, stopped if the update fails.
	var fresh []*healthChecker
	applied := false
	defer func() {
		if !applied {
			for _, hc := range fresh {
				hc.stop()
			}
		}
	}()
	s = g.withInboundCluster(s)
	unsupported := map[string]string{}
	var retire []*clusterRT
	var eds []string
	names := make([]string, 0, len(s[ClusterType]))
	for n := range s[ClusterType] {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		spec := s[ClusterType][name].(*clusterSpec)
		if spec.unsupported != "" {
			unsupported[name] = spec.unsupported
			continue
		}
		rt := g.clusters[name]
		if rt == nil || !sameCluster(rt.spec, spec) {
			var policy balancer.Policy
			if rt != nil && rt.spec.policy == spec.policy && reflect.DeepEqual(rt.spec.eject, spec.eject) {
				policy = rt.policy // keep what the policy learned
			} else if policy, err = newPolicy(spec); err != nil {
				return nil, err
			}
			nrt, err := newClusterRT(spec, policy, g.metrics.cluster(name))
			if err != nil {
				return nil, err
			}
			if rt != nil {
				retire = append(retire, rt)
			}
			if spec.hc != nil {
				nrt.hc = newHealthChecker(spec.hc, nrt, g.probeRunner(), g.metrics)
			}
			rt = nrt
		}
		hosts := spec.static
		if spec.dns != nil {
			hosts = g.dnsHosts(spec.dns)
		}
		if spec.eds != "" {
			eds = append(eds, spec.eds)
			if a, ok := s[EndpointType][spec.eds].(*assignmentSpec); ok {
				hosts = a.hosts
				if !spec.localityWeighted {
					// Weights (distribute) instead of priorities, as Istio.
					hosts = localize(g.opts.Locality, a.hosts)
				}
			}
		}
		if rt.hc != nil && rt != g.clusters[name] {
			fresh = append(fresh, rt.hc)
		}
		if err := rt.setHosts(hosts, &g.pools, g.metrics); err != nil {
			return nil, err
		}
		next[name] = rt
	}
	for name, rt := range g.clusters {
		if _, ok := next[name]; !ok {
			retire = append(retire, rt)
		}
	}
	var rc *routeConfigSpec
	meshRoutes := ""
	want := map[string][]string{EndpointType: eds}
	if ls != nil {
		rc = ls.inline
		if ls.rds != "" {
			want[RouteType] = []string{ls.rds}
			rc, _ = s[RouteType][ls.rds].(*routeConfigSpec)
		}
		if mesh := g.meshBeside(ls, s[ListenerType]); mesh != nil {
			want[RouteType] = append(want[RouteType], mesh.rds)
			rc = withMesh(rc, s[RouteType][mesh.rds])
			meshRoutes = mesh.rds
		}
	}
	for _, name := range names {
		if rt := next[name]; rt != nil && rt.tls != nil {
			want[SecretType] = append(want[SecretType], rt.spec.tls.secrets()...)
		}
	}
	// Before the table that routes to them is swapped in.
	g.sdsSecrets = s[SecretType]
	g.refreshUpstreamTLS(next)
	tb := newTable(rc, next)
	tb.unsupported = unsupported
	if ls != nil {
		tb.upgrades, tb.streamIdle, tb.rbac, tb.port = ls.upgrades, ls.streamIdle, ls.rbac, ls.port
	}
	tb.setTelemetry(g, ls.telemetryOf())
	ts, err := g.buildTLS(s, next, want)
	if err != nil {
		return nil, err
	}
	tcps, err := g.buildTCP(s[ListenerType], next)
	if err != nil {
		return nil, err
	}
	applied = true
	warmAll(fresh) // as Envoy warms a new cluster: its hosts' first checks first
	g.table.Store(tb)
	jwks := remoteSources(tb.rbac)
	if ts != nil {
		for _, l := range ts {
			for _, c := range l.chains() {
				if c.table != nil { // nil: a passthrough chain
					c.table.unsupported = unsupported
					jwks = append(jwks, remoteSources(c.table.rbac)...)
				}
			}
		}
		g.tls.Store(&ts)
	}
	if tcps != nil {
		g.tcpL.Store(&tcps)
	}
	g.jwks.prefetch(jwks)
	for _, rt := range retire {
		for addr := range rt.hosts {
			if n := next[rt.name]; n == nil || !hasHost(n, addr) {
				g.metrics.forgetEndpoint(rt.name, addr)
			}
		}
		rt.retire(&g.pools)
	}
	g.clusters = next
	g.applied = appliedConfig{At: time.Now(), Resources: rawResources(s)}
	if ls != nil {
		g.applied.Listener = ls.name
		g.applied.Mesh = meshRoutes
		if rc != nil {
			g.applied.Routes = rc.name
		}
	}
	return want, nil
}

// chooseListener picks the listener the gateway serves.
func (g *Gateway) chooseListener(all map[string]any) (*listenerSpec, error) {
	if g.opts.Listener != "" {
		l, _ := all[g.opts.Listener].(*listenerSpec)
		if l != nil && l.tls {
			return nil, fmt.Errorf("gateway: listener %q has TLS filter chains: serve it on a --tls-listen port", l.name)
		}
		if l != nil && len(l.tcpChains) > 0 {
			return nil, fmt.Errorf("gateway: listener %q has TCP filter chains: serve it on a --tcp-listen port", l.name)
		}
		return l, nil // not (yet) there: serve nothing rather than refuse
	}
	// TLS listeners are served by ServeTLS on their ports, never in plaintext.
	m := make(map[string]any, len(all))
	for n, v := range all {
		if l := v.(*listenerSpec); !l.tls && len(l.tcpChains) == 0 && !isInboundListener(n) {
			m[n] = v
		}
	}
	var byPort []*listenerSpec
	for _, v := range m {
		l := v.(*listenerSpec)
		if g.opts.ListenPort != 0 && l.port == g.opts.ListenPort {
			byPort = append(byPort, l)
		}
	}
	switch {
	case len(byPort) == 1:
		return byPort[0], nil
	case len(byPort) == 0 && m[ProxyListener] != nil:
		// Sextant's control plane names its proxy listener so; the others it
		// publishes are api_listeners of gRPC clients.
		return m[ProxyListener].(*listenerSpec), nil
	case len(byPort) > 1:
		return nil, fmt.Errorf("gateway: %d listeners on port %d; name one with --listener", len(byPort), g.opts.ListenPort)
	case len(m) == 1:
		for _, v := range m {
			return v.(*listenerSpec), nil
		}
	case len(m) > 1:
		return nil, errors.New("gateway: several listeners and none on the listen port; name one with --listener")
	}
	return nil, nil
}

// sameCluster reports whether b can update a's run-time cluster in place.
func sameCluster(a, b *clusterSpec) bool {
	x, y := *a, *b
	x.raw, y.raw, x.static, y.static = nil, nil, nil, nil
	// Decoded certificates and pools do not compare (x509.CertPool holds
	// funcs): TLS contexts compare as sent.
	if (x.tls == nil) != (y.tls == nil) || x.tls != nil && !proto.Equal(x.tls.raw, y.tls.raw) {
		return false
	}
	x.tls, y.tls = nil, nil
	return reflect.DeepEqual(x, y)
}

func rawResources(s xdsclient.State) map[string][]any {
	out := map[string][]any{}
	for url, m := range s {
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			var raw any
			switch v := m[n].(type) {
			case *listenerSpec:
				raw = v.raw
			case *routeConfigSpec:
				raw = v.raw
			case *clusterSpec:
				raw = v.raw
			case *assignmentSpec:
				raw = v.raw
			case *secretSpec:
				raw = v.raw
			}
			out[url] = append(out[url], raw)
		}
	}
	return out
}

// Handler returns the proxy as a fasthttp handler (tests and benchmarks
// serve it on their own listeners).
func (g *Gateway) Handler() fasthttp.RequestHandler { return g.serve }

func hasHost(c *clusterRT, addr string) bool {
	_, ok := c.hosts[addr]
	return ok
}
