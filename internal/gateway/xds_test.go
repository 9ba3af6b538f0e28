package gateway_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

func TestBadConfigIsNACKedAndOldKept(t *testing.T) {
	a := startUpstream(t, "a", nil)
	cp := startControlPlane(t, "")
	good := []any{rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "a"))),
		edsCluster("a"), assignment("a", ep{u: a})}
	cp.set(res(good...)...)
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/", "upstream=a")

	badRoute := &route.Route{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_SafeRegex{
		SafeRegex: &matcher.RegexMatcher{Regex: "(unclosed"}}},
		Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: "a"}}}}
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, badRoute)), edsCluster("a"), assignment("a", ep{u: a}))
	waitFor(t, "a NACK", func() bool { return g.xds.Status().NACKs > 0 })
	st := g.xds.Status()
	if !strings.Contains(st.LastNACK, "virtual_hosts[0].routes[0].match.safe_regex.regex") {
		t.Errorf("NACK reason does not name the field: %q", st.LastNACK)
	}
	if code, body, _ := g.get(t, "/anything"); code != 200 || !strings.Contains(body, "upstream=a") {
		t.Fatalf("old config not kept: %d %q", code, body)
	}
	// A bad cluster is refused too; the good one stays.
	bad := edsCluster("a", func(c *cluster.Cluster) {
		c.LbSubsetConfig = &cluster.Cluster_LbSubsetConfig{SubsetSelectors: []*cluster.Cluster_LbSubsetConfig_LbSubsetSelector{{Keys: []string{"v", "v"}}}}
	})
	n := st.NACKs
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "a"))), bad, assignment("a", ep{u: a}))
	waitFor(t, "a second NACK: "+fmt.Sprint(g.xds.Status()), func() bool { return g.xds.Status().NACKs > n && strings.Contains(g.xds.Status().LastNACK, "Cluster") })
	if st := g.xds.Status(); !strings.Contains(st.LastNACK, `Cluster "a"`) || !strings.Contains(st.LastNACK, "lb_subset_config") {
		t.Errorf("cluster NACK: %q", st.LastNACK)
	}
	if code, _, _ := g.get(t, "/"); code != 200 {
		t.Fatalf("after a bad cluster: %d", code)
	}
	// /v1/config shows the NACK and the applied resources.
	resp, err := http.Get(g.admin + "/v1/config")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Listener  string                       `json:"listener"`
		XDS       map[string]any               `json:"xds"`
		Resources map[string][]json.RawMessage `json:"resources"`
	}
	json.NewDecoder(resp.Body).Decode(&cfg)
	resp.Body.Close()
	if cfg.Listener != "gw" || cfg.XDS["last_nack"] == "" || len(cfg.Resources["Cluster"]) != 1 {
		t.Errorf("/v1/config: %+v", cfg)
	}
}

// A cluster of a type the gateway does not implement is accepted (as Envoy
// would accept it), its calls get 503 saying why, and the rest serves.
func TestUnsupportedClusterDoesNotRefuseTheRest(t *testing.T) {
	a := startUpstream(t, "a", nil)
	cp := startControlPlane(t, "")
	odst := &cluster.Cluster{Name: "passthrough", ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST},
		LbPolicy: cluster.Cluster_CLUSTER_PROVIDED}
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/pass", "passthrough"), prefixRoute("/", "a"))),
		edsCluster("a"), odst, assignment("a", ep{u: a}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/", "upstream=a")
	code, body, _ := g.get(t, "/pass")
	if code != 503 || !strings.Contains(body, "ORIGINAL_DST") || !strings.Contains(body, `"cluster":"passthrough"`) {
		t.Fatalf("unsupported cluster: %d %q", code, body)
	}
	if g.xds.Status().NACKs != 0 {
		t.Fatalf("NACKed: %s", g.xds.Status().LastNACK)
	}
}

// A cluster asking for TLS to its endpoints (the mesh's ISTIO_MUTUAL) is
// refused with a 503 naming it, never served in plaintext.
func TestClusterWithTLSIsNotServedInPlaintext(t *testing.T) {
	a := startUpstream(t, "a", nil)
	cp := startControlPlane(t, "")
	// STATIC, with the same endpoint as a: the test's snapshot cache would
	// hold EDS back for a name the gateway does not ask for.
	mtls := &cluster.Cluster{Name: "m", ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_STATIC},
		LoadAssignment: assignment("m", ep{u: a}), TransportSocket: &core.TransportSocket{Name: "envoy.transport_sockets.tls"}}
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/m", "m"), prefixRoute("/", "a"))),
		edsCluster("a"), mtls, assignment("a", ep{u: a}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/", "upstream=a")
	before := a.calls.Load()
	code, body, _ := g.get(t, "/m")
	if code != 503 || !strings.Contains(body, "envoy.transport_sockets.tls") || !strings.Contains(body, "not sent in plaintext") {
		t.Fatalf("a TLS cluster: %d %q", code, body)
	}
	if a.calls.Load() != before {
		t.Fatal("the endpoint of a TLS cluster got a plaintext call")
	}
}

func TestControlPlaneRestart(t *testing.T) {
	a := startUpstream(t, "a", nil)
	b := startUpstream(t, "b", nil)
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "a"))),
		edsCluster("a"), assignment("a", ep{u: a}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/", "upstream=a")

	addr := cp.addr
	cp.stop()
	waitFor(t, "the stream to drop", func() bool { return !g.xds.Status().Connected })
	for range 20 { // the last good config keeps serving while the control plane is away
		if code, body, _ := g.get(t, "/"); code != 200 || !strings.Contains(body, "upstream=a") {
			t.Fatalf("while the control plane is down: %d %q", code, body)
		}
	}
	// A new control plane process on the same address with a new config.
	cp2 := startControlPlane(t, addr)
	cp2.ver.Store(100)
	cp2.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "b"))),
		edsCluster("b"), assignment("b", ep{u: b}))
	g.waitServes(t, "/", "upstream=b")
	if g.xds.Status().Reconnects == 0 {
		t.Error("no reconnect counted")
	}
}

func TestConfigChangeKeepsCallsInFlight(t *testing.T) {
	started := make(chan struct{}, 1)
	slow := startUpstream(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		time.Sleep(300 * time.Millisecond)
		w.Write([]byte("upstream=slow"))
	})
	other := startUpstream(t, "other", nil)
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "s"))),
		edsCluster("s"), assignment("s", ep{u: slow}))
	g := startGateway(t, cp.addr)
	waitFor(t, "config", func() bool { code, _, _ := g.get(t, "/"); return code == 200 })
	<-started

	done := make(chan string, 1)
	go func() {
		resp, err := g.client.Get(g.url + "/")
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- resp.Status + " " + string(b)
	}()
	<-started
	// Remove the cluster and its endpoint while the call is in flight.
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "o"))),
		edsCluster("o"), assignment("o", ep{u: other}))
	if got := <-done; got != "200 OK upstream=slow" {
		t.Fatalf("call in flight across a config change: %q", got)
	}
	g.waitServes(t, "/", "upstream=other")
}

func TestGracefulDrain(t *testing.T) {
	started := make(chan struct{}, 1)
	slow := startUpstream(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case started <- struct{}{}:
		default:
		}
		time.Sleep(300 * time.Millisecond)
		w.Write([]byte("upstream=slow"))
	})
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "s"))),
		edsCluster("s"), assignment("s", ep{u: slow}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/", "upstream=slow")
	<-started // the call of waitServes
	done := make(chan string, 1)
	go func() {
		resp, err := g.client.Get(g.url + "/")
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- string(b)
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.g.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if got := <-done; got != "upstream=slow" {
		t.Fatalf("call in flight during drain: %q", got)
	}
	if _, err := net.DialTimeout("tcp", strings.TrimPrefix(g.url, "http://"), time.Second); err == nil {
		t.Error("still accepting after shutdown")
	}
}

func TestH2CInAndOut(t *testing.T) {
	var protos = make(chan string, 10)
	h2 := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos <- r.Proto
		w.Write([]byte("upstream=h2 " + r.Proto + " " + r.Method + " " + r.URL.Path + " " + r.Header.Get("X-Probe")))
	})}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	h2.Protocols = &p
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = h2.Serve(ln) }()
	t.Cleanup(func() { h2.Close() })
	tcp := ln.Addr().(*net.TCPAddr)
	u := &upstream{name: "h2", host: tcp.IP.String(), port: uint32(tcp.Port)}
	opts, _ := anypb.New(&upstreamhttp.HttpProtocolOptions{UpstreamProtocolOptions: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_{
		ExplicitHttpConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{}}}})
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "h2"))),
		edsCluster("h2", func(c *cluster.Cluster) {
			c.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": opts}
		}), assignment("h2", ep{u: u}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/", "upstream=h2 HTTP/2.0 GET /")
	// h2c in: an HTTP/2 client with prior knowledge.
	var cp2 http.Protocols
	cp2.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &cp2, TLSClientConfig: &tls.Config{}}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("PUT", g.url+"/h2/path", strings.NewReader("body"))
	req.Header.Set("X-Probe", "p1")
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Proto != "HTTP/2.0" || string(b) != "upstream=h2 HTTP/2.0 PUT /h2/path p1" || resp.Header.Get("Via") == "" {
		t.Fatalf("h2c in and out: %s %q %v", resp.Proto, b, resp.Header)
	}
}

// res turns a list of resources into types.Resource values.
func res(rs ...any) []typesResource {
	out := make([]typesResource, len(rs))
	for i, r := range rs {
		out[i] = r.(typesResource)
	}
	return out
}
