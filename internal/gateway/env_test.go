package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/calllog"
	"github.com/sextant-mesh/sextant/internal/gateway"
	"github.com/sextant-mesh/sextant/internal/gateway/xdsclient"
)

const nodeID = "gw-test"

// controlPlane is go-control-plane's own ADS server over a SnapshotCache on
// loopback: the real server Envoy talks to, fed hand-built resources.
type controlPlane struct {
	t     testing.TB
	cache cache.SnapshotCache
	addr  string
	srv   *grpc.Server
	ver   atomic.Int64
}

func startControlPlane(t *testing.T, addr string) *controlPlane { return startControlPlaneTB(t, addr) }

func startControlPlaneB(b *testing.B) *controlPlane { return startControlPlaneTB(b, "") }

func startControlPlaneTB(t testing.TB, addr string) *controlPlane {
	t.Helper()
	cp := &controlPlane{t: t, cache: cache.NewSnapshotCache(true, cache.IDHash{}, nil)}
	cp.serve(addr)
	t.Cleanup(cp.stop)
	return cp
}

func (cp *controlPlane) serve(addr string) {
	cp.t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	var err error
	for range 50 { // the port of a stopped server may take a moment to free
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		cp.t.Fatal(err)
	}
	cp.addr = ln.Addr().String()
	cp.srv = grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(cp.srv, server.NewServer(context.Background(), cp.cache, nil))
	go func() { _ = cp.srv.Serve(ln) }()
}

func (cp *controlPlane) stop() {
	if cp.srv != nil {
		cp.srv.Stop()
		cp.srv = nil
	}
}

// set publishes a snapshot of resources under a new version.
func (cp *controlPlane) set(res ...types.Resource) {
	cp.t.Helper()
	m := map[resource.Type][]types.Resource{}
	for _, r := range res {
		var typ string
		switch r.(type) {
		case *listener.Listener:
			typ = resource.ListenerType
		case *route.RouteConfiguration:
			typ = resource.RouteType
		case *cluster.Cluster:
			typ = resource.ClusterType
		case *endpoint.ClusterLoadAssignment:
			typ = resource.EndpointType
		case *tlsv3.Secret:
			typ = resource.SecretType
		default:
			cp.t.Fatalf("resource %T", r)
		}
		m[typ] = append(m[typ], r)
	}
	snap, err := cache.NewSnapshot(fmt.Sprint(cp.ver.Add(1)), m)
	if err != nil {
		cp.t.Fatal(err)
	}
	if err := cp.cache.SetSnapshot(context.Background(), nodeID, snap); err != nil {
		cp.t.Fatal(err)
	}
}

// gw is a gateway under test: proxy, admin API, call log, xDS client.
type gw struct {
	g      *gateway.Gateway
	xds    *xdsclient.Client
	log    *calllog.Log
	url    string // proxy base URL
	tls    string // TLS listener's host:port (startTLSGateway)
	admin  string // admin base URL
	client *http.Client
}

func startGateway(t *testing.T, cpAddr string) *gw { return startGatewayTB(t, cpAddr) }

func startGatewayB(b *testing.B, cpAddr string) *gw { return startGatewayTB(b, cpAddr) }

func startGatewayTB(t testing.TB, cpAddr string) *gw { return startGatewayOpts(t, cpAddr, false) }

// startTLSGateway is startGateway with a TLS listener too (gw.tls).
func startTLSGateway(t testing.TB, cpAddr string) *gw { return startGatewayOpts(t, cpAddr, true) }

// startGatewayWith starts a gateway of cpAddr with opts (its Recorder is
// the gateway's call log whatever opts say).
func startGatewayWith(t testing.TB, cpAddr string, opts gateway.Options) *gw {
	return startGatewayOpts(t, cpAddr, false, opts)
}

func startGatewayOpts(t testing.TB, cpAddr string, withTLS bool, base ...gateway.Options) *gw {
	t.Helper()
	var opts gateway.Options
	if len(base) > 0 {
		opts = base[0]
	}
	var tln net.Listener
	if withTLS {
		var err error
		if tln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		opts.TLSListenPorts = []uint32{uint32(tln.Addr().(*net.TCPAddr).Port)}
	}
	lg, err := calllog.Open(calllog.Options{Dir: t.TempDir(), FlushInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	opts.Recorder = lg
	g := gateway.New(opts)
	conn, err := grpc.NewClient(cpAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	xc, err := xdsclient.New(conn, xdsclient.Options{Node: &core.Node{Id: nodeID}, Types: gateway.XDSTypes(), Handler: g,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	g.SetXDSStatus(xc.Status)
	ctx, cancel := context.WithCancel(context.Background())
	xdone := make(chan struct{})
	go func() { defer close(xdone); _ = xc.Run(ctx) }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sdone := make(chan struct{})
	go func() { defer close(sdone); _ = g.Serve(ln) }()
	tdone := make(chan struct{})
	if tln != nil {
		go func() { defer close(tdone); _ = g.ServeTLS(tln) }()
	} else {
		close(tdone)
	}
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	asrv := &http.Server{Handler: g.AdminHandler(lg)}
	go func() { _ = asrv.Serve(aln) }()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = g.Shutdown(sctx)
		<-sdone
		<-tdone
		_ = asrv.Close()
		cancel()
		<-xdone
		conn.Close()
		if err := lg.Close(); err != nil {
			t.Errorf("close call log: %v", err)
		}
	})
	w := &gw{g: g, xds: xc, log: lg, url: "http://" + ln.Addr().String(), admin: "http://" + aln.Addr().String(),
		client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
	if tln != nil {
		w.tls = tln.Addr().String()
	}
	return w
}

// get sends one request and returns status, body and headers.
func (w *gw) get(t *testing.T, path string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", w.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "host") {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := w.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// waitFor polls cond until it holds (bounded: 10 s).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitEndpoints waits until the gateway has applied the endpoints of n
// clusters: each cluster's endpoints may come in a response of their own,
// so one route serving says nothing of the others.
func (w *gw) waitEndpoints(t *testing.T, n int) {
	t.Helper()
	// And a plaintext gateway's listener and routes: a control plane sends
	// a route only after the clusters it names, so endpoints can be
	// applied before the routes that reach them (TestUpstreamTLSIdentity
	// got 404 no_route so). A TLS gateway's chains are its tests' to wait for.
	waitFor(t, fmt.Sprintf("the endpoints of %d clusters and the routes", n), func() bool {
		resp, err := w.client.Get(w.admin + "/v1/config")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var cfg struct {
			Listener    string                       `json:"listener"`
			RouteConfig string                       `json:"route_config"`
			Resources   map[string][]json.RawMessage `json:"resources"`
		}
		return json.NewDecoder(resp.Body).Decode(&cfg) == nil && len(cfg.Resources["ClusterLoadAssignment"]) >= n &&
			(w.tls != "" || cfg.Listener != "" && cfg.RouteConfig != "")
	})
}

// waitServes waits until path answers a body containing want.
func (w *gw) waitServes(t *testing.T, path, want string, hdr ...string) {
	t.Helper()
	waitFor(t, path+" to serve "+want, func() bool {
		_, b, _ := w.get(t, path, hdr...)
		return strings.Contains(b, want)
	})
}

// upstream is a real HTTP server on loopback that names itself in answers.
type upstream struct {
	name  string
	addr  string
	host  string
	port  uint32
	calls atomic.Int64
	conns atomic.Int64 // connections accepted (startHTTPSUpstream's)
	srv   *http.Server
	mu    sync.Mutex
	h     http.HandlerFunc
}

// startGatewayTo starts a control plane with one route, every path to
// cluster u.name of upstream u, and a gateway on it, and waits until the
// gateway answers "/" with body.
func startGatewayTo(t *testing.T, u *upstream, body string) *gw {
	t.Helper()
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", u.name))),
		edsCluster(u.name), assignment(u.name, ep{u: u}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/", body)
	return g
}

func startUpstream(t *testing.T, name string, h http.HandlerFunc) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{name: name, addr: ln.Addr().String(), h: h}
	host, port, _ := net.SplitHostPort(u.addr)
	var p int
	fmt.Sscan(port, &p)
	u.host, u.port = host, uint32(p)
	u.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.calls.Add(1)
		u.mu.Lock()
		h := u.h
		u.mu.Unlock()
		if h != nil {
			h(w, r)
			return
		}
		w.Header().Set("X-Upstream", name)
		fmt.Fprintf(w, "upstream=%s path=%s", name, r.URL.Path)
	})}
	go func() { _ = u.srv.Serve(ln) }()
	t.Cleanup(func() { _ = u.srv.Close() })
	return u
}

func (u *upstream) set(h http.HandlerFunc) {
	u.mu.Lock()
	u.h = h
	u.mu.Unlock()
}

// Resource builders: the shapes a control plane emits.

func rdsListener(name, routeName string) *listener.Listener {
	m := &hcm.HttpConnectionManager{
		StatPrefix: "ingress",
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{RouteConfigName: routeName,
			ConfigSource: &core.ConfigSource{ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}}}}},
	}
	a, _ := anypb.New(m)
	return &listener.Listener{Name: name,
		Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{Address: "127.0.0.1",
			PortSpecifier: &core.SocketAddress_PortValue{PortValue: 8080}}}},
		FilterChains: []*listener.FilterChain{{Filters: []*listener.Filter{{Name: "envoy.filters.network.http_connection_manager",
			ConfigType: &listener.Filter_TypedConfig{TypedConfig: a}}}}}}
}

func routeConfig(name string, vhosts ...*route.VirtualHost) *route.RouteConfiguration {
	return &route.RouteConfiguration{Name: name, VirtualHosts: vhosts}
}

func vhost(name string, domains []string, routes ...*route.Route) *route.VirtualHost {
	return &route.VirtualHost{Name: name, Domains: domains, Routes: routes}
}

func prefixRoute(prefix, clusterName string) *route.Route {
	return &route.Route{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: prefix}},
		Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: clusterName}}}}
}

func edsCluster(name string, mods ...func(*cluster.Cluster)) *cluster.Cluster {
	c := &cluster.Cluster{Name: name, ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
		EdsClusterConfig: &cluster.Cluster_EdsClusterConfig{EdsConfig: &core.ConfigSource{
			ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}}}},
		ConnectTimeout: durationpb.New(time.Second)}
	for _, m := range mods {
		m(c)
	}
	return c
}

// ep is one endpoint with optional envoy.lb metadata.
type ep struct {
	u       *upstream
	md      map[string]any
	weight  uint32
	healthy core.HealthStatus
}

func assignment(name string, eps ...ep) *endpoint.ClusterLoadAssignment {
	var lbs []*endpoint.LbEndpoint
	for _, e := range eps {
		lb := &endpoint.LbEndpoint{HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{Address: e.u.host,
				PortSpecifier: &core.SocketAddress_PortValue{PortValue: e.u.port}}}}}}, HealthStatus: e.healthy}
		if e.weight > 0 {
			lb.LoadBalancingWeight = wrapperspb.UInt32(e.weight)
		}
		if len(e.md) > 0 {
			st, _ := structpb.NewStruct(e.md)
			lb.Metadata = &core.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.lb": st}}
		}
		lbs = append(lbs, lb)
	}
	return &endpoint.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpoint.LocalityLbEndpoints{{LbEndpoints: lbs}}}
}

type typesResource = types.Resource

// calls returns the call records of service, oldest first.
func (w *gw) calls(t *testing.T, service string) []calllog.Call {
	t.Helper()
	resp, err := w.client.Get(w.admin + "/v1/calls?from=0&service=" + service)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Calls []calllog.Call `json:"calls"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Calls
}

// adminJSON decodes the answer of the gateway's admin API at path into v.
func (w *gw) adminJSON(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := w.client.Get(w.admin + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d", path, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}
