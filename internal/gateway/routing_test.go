package gateway_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/gateway"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// grpc-go's and fasthttp's process-wide background goroutines.
		goleak.IgnoreTopFunction("github.com/valyala/fasthttp.init.0.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.NewCallbackSerializer.func1"),
	)
}

func TestRoutesByHostPathAndHeaders(t *testing.T) {
	a := startUpstream(t, "a", nil)
	b := startUpstream(t, "b", nil)
	c := startUpstream(t, "c", nil)
	cp := startControlPlane(t, "")
	hdrRoute := prefixRoute("/", "b")
	hdrRoute.Match.Headers = []*route.HeaderMatcher{{Name: "x-canary",
		HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: &matcher.StringMatcher{
			MatchPattern: &matcher.StringMatcher_Exact{Exact: "yes"}}}}}
	exact := &route.Route{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Path{Path: "/exact"}},
		Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: "c"}}}}
	re := &route.Route{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: `/items/[0-9]+`}}},
		Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: "c"}}}}
	query := prefixRoute("/q", "b")
	query.Match.QueryParameters = []*route.QueryParameterMatcher{{Name: "tenant",
		QueryParameterMatchSpecifier: &route.QueryParameterMatcher_StringMatch{StringMatch: &matcher.StringMatcher{
			MatchPattern: &matcher.StringMatcher_Prefix{Prefix: "acme"}}}}}
	moved := &route.Route{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/old/"}},
		Action: &route.Route_Redirect{Redirect: &route.RedirectAction{
			PathRewriteSpecifier: &route.RedirectAction_PrefixRewrite{PrefixRewrite: "/new/"},
			ResponseCode:         route.RedirectAction_PERMANENT_REDIRECT}}}
	cp.set(rdsListener("gw", "routes"),
		routeConfig("routes",
			vhost("other", []string{"other.example.com"}, prefixRoute("/", "c")),
			vhost("all", []string{"*"}, exact, re, hdrRoute, query, moved, prefixRoute("/", "a"))),
		edsCluster("a"), edsCluster("b"), edsCluster("c"),
		assignment("a", ep{u: a}), assignment("b", ep{u: b}), assignment("c", ep{u: c}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/x", "upstream=a")
	g.waitEndpoints(t, 3)

	for _, tc := range []struct {
		name, path string
		hdr        []string
		want       string
	}{
		{"prefix", "/hello", nil, "upstream=a"},
		{"header", "/hello", []string{"x-canary", "yes"}, "upstream=b"},
		{"header other value", "/hello", []string{"x-canary", "no"}, "upstream=a"},
		{"exact path", "/exact", nil, "upstream=c"},
		{"exact path is exact", "/exact/more", nil, "upstream=a"},
		{"regex", "/items/42", nil, "upstream=c"},
		{"regex is anchored", "/items/42x", nil, "upstream=a"},
		{"host", "/", []string{"host", "other.example.com:8080"}, "upstream=c"},
		{"query parameter", "/q?x=1&tenant=acme-eu", nil, "upstream=b"},
		{"query parameter mismatch", "/q?tenant=other", nil, "upstream=a"},
		{"query parameter absent", "/q", nil, "upstream=a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, h := g.get(t, tc.path, tc.hdr...)
			if code != 200 || !strings.Contains(body, tc.want) {
				t.Fatalf("got %d %q, want 200 %s", code, body, tc.want)
			}
			if h.Get("Via") == "" || h.Get("X-Request-Id") == "" {
				t.Errorf("missing Via or X-Request-Id: %v", h)
			}
		})
	}
	// An absolute-form target (as sent to a forward proxy) routes by its
	// own host, which replaces the Host header, and its path.
	for _, tc := range []struct{ target, host, want string }{
		{"http://other.example.com/hello", "ignored.example", "upstream=c"},
		{"HTTP://www.example.com/hello?x=1", "other.example.com", "upstream=a"},
		{"http://other.example.com", "ignored.example", "upstream=c"},
	} {
		t.Run("absolute form "+tc.target, func(t *testing.T) {
			c, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", tc.target, tc.host)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(body), tc.want) {
				t.Fatalf("got %d %q, want 200 %s", resp.StatusCode, body, tc.want)
			}
		})
	}
}

func TestRedirect(t *testing.T) {
	cp := startControlPlane(t, "")
	moved := &route.Route{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/old/"}},
		Action: &route.Route_Redirect{Redirect: &route.RedirectAction{
			PathRewriteSpecifier: &route.RedirectAction_PrefixRewrite{PrefixRewrite: "/new/"},
			ResponseCode:         route.RedirectAction_PERMANENT_REDIRECT}}}
	secure := &route.Route{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/login"}},
		Action: &route.Route_Redirect{Redirect: &route.RedirectAction{
			SchemeRewriteSpecifier: &route.RedirectAction_HttpsRedirect{HttpsRedirect: true}, StripQuery: true}}}
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, moved, secure)))
	g := startGateway(t, cp.addr)
	g.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	waitFor(t, "config", func() bool { code, _, _ := g.get(t, "/old/x"); return code == 308 })
	_, _, h := g.get(t, "/old/a/b?k=v", "host", "shop.example.com:8080")
	if got := h.Get("Location"); got != "http://shop.example.com:8080/new/a/b?k=v" {
		t.Errorf("prefix rewrite redirect: %q", got)
	}
	code, _, h := g.get(t, "/login?next=/", "host", "shop.example.com:8080")
	if code != 301 || h.Get("Location") != "https://shop.example.com/login" {
		t.Errorf("https redirect: %d %q", code, h.Get("Location"))
	}
}

func TestForwardingHeaders(t *testing.T) {
	seen := make(chan map[string]string, 1)
	u := startUpstream(t, "u", nil)
	u.set(func(w http.ResponseWriter, r *http.Request) {
		seen <- map[string]string{"xff": r.Header.Get("X-Forwarded-For"), "xfp": r.Header.Get("X-Forwarded-Proto"),
			"via": r.Header.Get("Via"), "rid": r.Header.Get("X-Request-Id"), "custom": r.Header.Get("X-Drop-Me"),
			"keep": r.Header.Get("X-Keep"), "subset": r.Header.Get("X-Sextant-Subset")}
		w.Header().Set("Connection", "X-Secret")
		w.Header().Set("X-Secret", "1")
		w.Write([]byte("ok"))
	})
	g := startGatewayTo(t, u, "ok")
	<-seen
	_, _, h := g.get(t, "/", "X-Forwarded-For", "10.0.0.9", "Connection", "X-Drop-Me", "X-Drop-Me", "1", "X-Keep", "2",
		"X-Request-Id", "abc", "X-Sextant-Subset", "version=v1")
	got := <-seen
	if got["xff"] != "10.0.0.9, 127.0.0.1" || got["xfp"] != "http" || got["via"] != "1.1 sextant" ||
		got["rid"] != "abc" || got["custom"] != "" || got["keep"] != "2" || got["subset"] != "" {
		t.Errorf("upstream saw %v", got)
	}
	if h.Get("X-Secret") != "" || h.Get("X-Request-Id") != "abc" {
		t.Errorf("downstream got hop-by-hop header or lost request id: %v", h)
	}
}

// An h2c client's forwarding fields (and the subset header, taken off)
// are edited as an HTTP/1.1 client's: the HTTP/2 server notes which of
// them a request has (h2sStream.fields), and only those are looked up.
func TestForwardingHeadersH2C(t *testing.T) {
	seen := make(chan map[string]string, 1)
	u := startUpstream(t, "u", nil)
	u.set(func(w http.ResponseWriter, r *http.Request) {
		seen <- map[string]string{"xff": r.Header.Get("X-Forwarded-For"), "via": r.Header.Get("Via"),
			"rid": r.Header.Get("X-Request-Id"), "auth": r.Header.Get("Proxy-Authorization"), "subset": r.Header.Get("X-Sextant-Subset")}
		w.Write([]byte("ok"))
	})
	g := startGatewayTo(t, u, "ok")
	<-seen
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		want map[string]string
	}{
		{"all", map[string]string{"X-Forwarded-For": "10.0.0.9", "X-Request-Id": "abc", "Via": "1.0 fred", "Proxy-Authorization": "Basic eA==",
			"X-Sextant-Subset": "version=v1"},
			map[string]string{"xff": "10.0.0.9, 127.0.0.1", "via": "1.0 fred, 1.1 sextant", "rid": "abc", "auth": "", "subset": ""}},
		{"none", nil, map[string]string{"xff": "127.0.0.1", "via": "1.1 sextant", "auth": "", "subset": ""}},
	} {
		req, _ := http.NewRequest("GET", g.url+"/", nil)
		for k, v := range tc.hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got := <-seen
		if resp.Proto != "HTTP/2.0" {
			t.Fatalf("%s: answered in %s", tc.name, resp.Proto)
		}
		if tc.want["rid"] == "" {
			if len(got["rid"]) != 32 {
				t.Errorf("%s: made request id %q, want 32 hex digits", tc.name, got["rid"])
			}
			tc.want["rid"] = got["rid"]
		}
		if !maps.Equal(got, tc.want) {
			t.Errorf("%s: upstream saw %v, want %v", tc.name, got, tc.want)
		}
		if rid := resp.Header.Get("X-Request-Id"); rid != got["rid"] {
			t.Errorf("%s: answered request id %q, sent %q", tc.name, rid, got["rid"])
		}
	}
}

func TestWeightedClusters(t *testing.T) {
	a := startUpstream(t, "a", nil)
	b := startUpstream(t, "b", nil)
	cp := startControlPlane(t, "")
	split := &route.Route{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
		Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_WeightedClusters{
			WeightedClusters: &route.WeightedCluster{Clusters: []*route.WeightedCluster_ClusterWeight{
				{Name: "a", Weight: wrapperspb.UInt32(80)}, {Name: "b", Weight: wrapperspb.UInt32(20)}}}}}}}
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, split)),
		edsCluster("a"), edsCluster("b"), assignment("a", ep{u: a}), assignment("b", ep{u: b}))
	g := startGateway(t, cp.addr)
	waitFor(t, "both clusters", func() bool { g.get(t, "/"); return a.calls.Load() > 0 && b.calls.Load() > 0 })
	a0, b0 := a.calls.Load(), b.calls.Load()
	const n = 1000
	for range n {
		if code, body, _ := g.get(t, "/"); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
	}
	na, nb := a.calls.Load()-a0, b.calls.Load()-b0
	// 80/20 over 1000 calls: the standard deviation is ~13; allow 6 sigma.
	if na+nb != n || na < 720 || na > 880 {
		t.Fatalf("a got %d, b got %d of %d; want about 800/200", na, nb, n)
	}
}

func TestSubsetsFromRouteMetadataAndHeader(t *testing.T) {
	v1 := startUpstream(t, "v1", nil)
	v2 := startUpstream(t, "v2", nil)
	v2b := startUpstream(t, "v2b", nil)
	cp := startControlPlane(t, "")
	withSubsets := func(c *cluster.Cluster) {
		c.LbSubsetConfig = &cluster.Cluster_LbSubsetConfig{
			FallbackPolicy:  cluster.Cluster_LbSubsetConfig_NO_FALLBACK,
			SubsetSelectors: []*cluster.Cluster_LbSubsetConfig_LbSubsetSelector{{Keys: []string{"version"}}, {Keys: []string{"version", "zone"}}},
		}
	}
	md, _ := structpb.NewStruct(map[string]any{"version": "v2"})
	toV2 := prefixRoute("/v2", "svc")
	toV2.GetRoute().MetadataMatch = &core.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.lb": md}}
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, toV2, prefixRoute("/", "svc"))),
		edsCluster("svc", withSubsets),
		assignment("svc", ep{u: v1, md: map[string]any{"version": "v1", "zone": "z1"}},
			ep{u: v2, md: map[string]any{"version": "v2", "zone": "z1"}},
			ep{u: v2b, md: map[string]any{"version": "v2", "zone": "z2"}}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/v2", "upstream=v2")

	for range 50 {
		if _, body, _ := g.get(t, "/v2"); !strings.Contains(body, "upstream=v2") {
			t.Fatalf("route metadata_match version=v2 went to %q", body)
		}
		if _, body, _ := g.get(t, "/v2", "X-Sextant-Subset", "zone=z2"); !strings.Contains(body, "upstream=v2b") {
			t.Fatalf("version=v2 (route) + zone=z2 (header) went to %q", body)
		}
		if _, body, _ := g.get(t, "/", "X-Sextant-Subset", "version=v1"); !strings.Contains(body, "upstream=v1") {
			t.Fatalf("header version=v1 went to %q", body)
		}
	}
	// No subset for the request's metadata and NO_FALLBACK: 503 naming the cluster.
	code, body, h := g.get(t, "/", "X-Sextant-Subset", "version=v9")
	if code != 503 || h.Get("X-Sextant-Error") != "no_subset" || !strings.Contains(body, `"cluster":"svc"`) {
		t.Fatalf("got %d %q %v", code, body, h)
	}
	// A request without metadata matches no selector.
	if code, _, _ := g.get(t, "/"); code != 503 {
		t.Fatalf("no metadata: got %d, want 503", code)
	}
	// A key given twice is ambiguous: 400 naming it.
	code, body, h = g.get(t, "/", "X-Sextant-Subset", "version=v1, version=v2")
	if code != 400 || h.Get("X-Sextant-Error") != "bad_subset_header" || !strings.Contains(body, "given twice") {
		t.Fatalf("duplicate key: got %d %q %v", code, body, h)
	}
	// CONNECT is not proxied (as Envoy without a connect_matcher).
	req, _ := http.NewRequest("CONNECT", g.url, nil)
	req.Host = "example.com:443"
	resp, err := g.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || resp.Header.Get("X-Sextant-Error") != "no_route" || !strings.Contains(string(cb), "CONNECT is not proxied") {
		t.Fatalf("CONNECT: got %d %q %v", resp.StatusCode, cb, resp.Header)
	}
}

func TestRequestBodiesAndLimit(t *testing.T) {
	echo := startUpstream(t, "echo", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(append([]byte(r.Method+" "), b...))
	})
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "echo"))),
		edsCluster("echo"), assignment("echo", ep{u: echo}))
	g := startGatewayWith(t, cp.addr, gateway.Options{MaxRequestBytes: 8 << 20})
	g.waitServes(t, "/", "GET")
	resp, err := g.client.Post(g.url+"/", "text/plain", strings.NewReader("hello body"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "POST hello body" {
		t.Fatalf("POST: %d %q", resp.StatusCode, b)
	}
	// Above the 8 MiB limit: 413, and nothing reaches the upstream.
	before := echo.calls.Load()
	resp, err = g.client.Post(g.url+"/", "text/plain", bytes.NewReader(make([]byte, 9<<20)))
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 {
			t.Fatalf("9 MiB body: %d, want 413", resp.StatusCode)
		}
	} // else: the gateway closed the connection while the client was still sending, also a refusal
	if n := echo.calls.Load() - before; n != 0 {
		t.Fatalf("an oversized body reached the upstream %d times", n)
	}
}

// An endpoint removed from EDS, or reported unhealthy, stops receiving calls.
func TestEndpointRemovedOrUnhealthyStopsReceivingCalls(t *testing.T) {
	a := startUpstream(t, "a", nil)
	b := startUpstream(t, "b", nil)
	c := startUpstream(t, "c", nil)
	cp := startControlPlane(t, "")
	rr := func(cl *cluster.Cluster) { cl.LbPolicy = cluster.Cluster_ROUND_ROBIN }
	routes := routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "svc")))
	cp.set(rdsListener("gw", "r"), routes, edsCluster("svc", rr), assignment("svc", ep{u: a}, ep{u: b}, ep{u: c}))
	g := startGateway(t, cp.addr)
	waitFor(t, "all three", func() bool { g.get(t, "/"); return a.calls.Load() > 0 && b.calls.Load() > 0 && c.calls.Load() > 0 })

	cp.set(rdsListener("gw", "r"), routes, edsCluster("svc", rr),
		assignment("svc", ep{u: a}, ep{u: c, healthy: core.HealthStatus_UNHEALTHY}))
	// Wait until b (removed) and c (unhealthy) are out: 20 calls in a row to a.
	waitFor(t, "b and c out", func() bool {
		b0, c0 := b.calls.Load(), c.calls.Load()
		for range 20 {
			g.get(t, "/")
		}
		return b.calls.Load() == b0 && c.calls.Load() == c0
	})
	b0, c0 := b.calls.Load(), c.calls.Load()
	for range 50 {
		if code, body, _ := g.get(t, "/"); code != 200 || !strings.Contains(body, "upstream=a") {
			t.Fatalf("%d %q", code, body)
		}
	}
	if b.calls.Load() != b0 || c.calls.Load() != c0 {
		t.Fatalf("removed endpoint got %d, unhealthy got %d calls", b.calls.Load()-b0, c.calls.Load()-c0)
	}
}
