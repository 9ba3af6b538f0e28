package gateway_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
)

// spiffeCert issues a client certificate whose URI SAN is id.
func (p *pki) spiffeCert(t *testing.T, id string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	u, _ := url.Parse(id)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(p.count.Add(1)), Subject: pkix.Name{CommonName: "workload"},
		URIs: []*url.URL{u}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	pair, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// withHTTPFilters puts filters (then the router) in every HCM of l.
func withHTTPFilters(t *testing.T, l *listener.Listener, filters ...*hcm.HttpFilter) *listener.Listener {
	t.Helper()
	router, _ := anypb.New(&hcm.HttpConnectionManager{}) // any message: the gateway ignores the router's config
	for _, fc := range l.FilterChains {
		for _, f := range fc.Filters {
			m := new(hcm.HttpConnectionManager)
			if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
				t.Fatal(err)
			}
			m.HttpFilters = append(append([]*hcm.HttpFilter{}, filters...), &hcm.HttpFilter{Name: "envoy.filters.http.router",
				ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: router}})
			a, _ := anypb.New(m)
			f.ConfigType = &listener.Filter_TypedConfig{TypedConfig: a}
		}
	}
	return l
}

func rbacHTTPFilter(t *testing.T, name string, cfg *rbachttp.RBAC) *hcm.HttpFilter {
	a, err := anypb.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &hcm.HttpFilter{Name: name, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: a}}
}

func rbacPrincipal(id string) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_Authenticated_{Authenticated: &rbacpb.Principal_Authenticated{
		PrincipalName: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: id}}}}}
}

func rbacPath(prefix string) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_UrlPath{UrlPath: &matcher.PathMatcher{Rule: &matcher.PathMatcher_Path{
		Path: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: prefix}}}}}}
}

func rbacMethod(m string) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_Header{Header: &route.HeaderMatcher{Name: ":method",
		HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: m}}}}}}
}

var rbacAnyone = &rbacpb.Principal{Identifier: &rbacpb.Principal_Any{Any: true}}

// TestRBACFilterOverXDS: a TLS listener with optional client certificates
// and two RBAC filters (DENY, then ALLOW with shadow rules), as Istio
// publishes an AuthorizationPolicy, enforced on real calls: the SPIFFE ID
// of the client certificate decides, a denied call gets 403 "RBAC: access
// denied" and a call record naming the policy, a route can disable a
// filter (RBACPerRoute), shadow denials are counted but not enforced.
func TestRBACFilterOverXDS(t *testing.T) {
	ca, clients := newPKI(t), newPKI(t)
	u := startUpstream(t, "up", nil)
	cp := startControlPlane(t, "")
	g := startTLSGateway(t, cp.addr)
	sc, sk := ca.issue(t, false, "shop.test")
	const web = "spiffe://test.local/ns/default/sa/web"
	deny := rbacHTTPFilter(t, "deny", &rbachttp.RBAC{Rules: &rbacpb.RBAC{Action: rbacpb.RBAC_DENY, Policies: map[string]*rbacpb.Policy{
		"ns[default]-policy[no-admin]-rule[0]": {Permissions: []*rbacpb.Permission{rbacPath("/admin")}, Principals: []*rbacpb.Principal{rbacAnyone}}}}})
	allow := rbacHTTPFilter(t, "envoy.filters.http.rbac", &rbachttp.RBAC{
		Rules: &rbacpb.RBAC{Action: rbacpb.RBAC_ALLOW, Policies: map[string]*rbacpb.Policy{
			"orders-get": {Permissions: []*rbacpb.Permission{{Rule: &rbacpb.Permission_AndRules{AndRules: &rbacpb.Permission_Set{
				Rules: []*rbacpb.Permission{rbacMethod("GET"), rbacPath("/orders")}}}}},
				Principals: []*rbacpb.Principal{rbacPrincipal(web)}},
			"healthz": {Permissions: []*rbacpb.Permission{rbacPath("/healthz")}, Principals: []*rbacpb.Principal{rbacAnyone}},
		}},
		ShadowRules: &rbacpb.RBAC{Action: rbacpb.RBAC_DENY, Policies: map[string]*rbacpb.Policy{
			"dry-run-no-healthz": {Permissions: []*rbacpb.Permission{rbacPath("/healthz")}, Principals: []*rbacpb.Principal{rbacAnyone}}}},
	})
	off, _ := anypb.New(&rbachttp.RBACPerRoute{}) // no rbac: the filter is off on this route
	open := prefixRoute("/open", "up")
	open.TypedPerFilterConfig = map[string]*anypb.Any{"envoy.filters.http.rbac": off}
	l := withHTTPFilters(t, tlsListener("gw-tls", g.tlsPort(), tlsChain{cert: "c", ca: "clients", require: false}), deny, allow)
	cp.set(l, certSecret("c", sc, sk), caSecret("clients", clients.pem),
		routeConfig("routes", vhost("all", []string{"*"}, open, prefixRoute("/", "up"))), edsCluster("up"), assignment("up", ep{u: u}))

	webc := g.tlsClient(ca.pool, true, clients.spiffeCert(t, web))
	evil := g.tlsClient(ca.pool, false, clients.spiffeCert(t, "spiffe://test.local/ns/default/sa/evil"))
	anon := g.tlsClient(ca.pool, true)
	call := func(c *http.Client, method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "https://shop.test"+path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor(t, "the RBAC listener to serve", func() bool {
		resp, err := webc.Get("https://shop.test/orders/1")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	for _, tc := range []struct {
		name   string
		c      *http.Client
		method string
		path   string
		want   int
	}{
		{"web GET orders", webc, "GET", "/orders/1", 200},
		{"web POST orders", webc, "POST", "/orders/1", 403},
		{"other identity", evil, "GET", "/orders/1", 403},
		{"no certificate", anon, "GET", "/orders/1", 403},
		{"healthz, anyone (shadow denies, not enforced)", anon, "GET", "/healthz", 200},
		{"admin: the DENY filter first", webc, "GET", "/admin/x", 403},
		{"route with the filter off", anon, "GET", "/open/x", 200},
	} {
		code, body := call(tc.c, tc.method, tc.path)
		if code != tc.want {
			t.Errorf("%s: %d %q, want %d", tc.name, code, body, tc.want)
		}
		if code == 403 && body != "RBAC: access denied" {
			t.Errorf("%s: body %q", tc.name, body)
		}
	}
	if n := metric(t, g, `sextant_gateway_rbac_total{result="denied"}`); n != 4 {
		t.Errorf("denied: %v, want 4", n)
	}
	if n := metric(t, g, `sextant_gateway_rbac_total{result="shadow_denied"}`); n != 1 {
		t.Errorf("shadow_denied: %v, want 1", n)
	}
	// The call records name the policy that denied each call.
	var recs []string
	waitFor(t, "the call records", func() bool {
		recs = recs[:0]
		for _, c := range g.calls(t, "up") {
			if c.Reason == "rbac_denied" || c.Detail != "" {
				recs = append(recs, c.Route+" "+c.Reason+" "+c.Detail)
			}
		}
		return len(recs) >= 5
	})
	joined := strings.Join(recs, "\n")
	for _, want := range []string{"rbac_denied ns[default]-policy[no-admin]-rule[0]",
		"rbac_denied envoy.filters.http.rbac: no policy allowed the call", "shadow denied: dry-run-no-healthz"} {
		if !strings.Contains(joined, want) {
			t.Errorf("records lack %q:\n%s", want, joined)
		}
	}
	// The records keep who called and what, over HTTP/2 (web) and
	// HTTP/1.1 (evil) alike: what a dry run replays.
	seen := map[string]bool{}
	for _, c := range g.calls(t, "up") {
		if c.Layout < 2 || !c.TLS || c.Port != int(g.tlsPort()) || c.PeerIP != "127.0.0.1" || c.Host != "shop.test" {
			t.Errorf("record %+v", c)
		}
		seen[fmt.Sprintf("%s %s %s %v %d", c.Principal, c.Method, c.Path, c.PeerCert, c.Status)] = true
	}
	for _, want := range []string{web + " POST /orders/1 true 403", "spiffe://test.local/ns/default/sa/evil GET /orders/1 true 403",
		" GET /orders/1 false 403", " GET /healthz false 200"} {
		if !seen[want] {
			t.Errorf("no record %q in %v", want, seen)
		}
	}

	// A dry run on those records: the candidate drops the DENY filter
	// and allows web whatever it asks; the route that turns the filter
	// off keeps it off.
	onlyWeb := rbacHTTPFilter(t, "envoy.filters.http.rbac", &rbachttp.RBAC{Rules: &rbacpb.RBAC{Action: rbacpb.RBAC_ALLOW,
		Policies: map[string]*rbacpb.Policy{"web": {Permissions: []*rbacpb.Permission{{Rule: &rbacpb.Permission_Any{Any: true}}},
			Principals: []*rbacpb.Principal{rbacPrincipal(web)}}}}})
	fj, err := protojson.Marshal(onlyWeb)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(g.admin+"/v1/rbac:dry-run", "application/json",
		strings.NewReader(fmt.Sprintf(`{"listeners":[{"port":%d,"http_filters":[%s]}]}`, g.tlsPort(), fj)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var dry struct {
		NewlyDenied  int `json:"newly_denied"`
		NewlyAllowed int `json:"newly_allowed"`
		Undetermined int `json:"undetermined"`
		Denied       []struct{ Principal, Method, Path, Policy string }
	}
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, &dry); err != nil || resp.StatusCode != 200 {
		t.Fatalf("dry run: %d %s", resp.StatusCode, body)
	}
	// Newly denied: anon's /healthz; newly allowed: web's POST and web's
	// /admin/x; evil and anon on /orders were denied and stay so.
	if dry.NewlyDenied != 1 || dry.NewlyAllowed != 2 || dry.Undetermined != 0 || len(dry.Denied) != 1 ||
		dry.Denied[0].Principal != "" || dry.Denied[0].Path != "/healthz" || dry.Denied[0].Policy != "envoy.filters.http.rbac: no policy allowed the call" {
		t.Errorf("dry run: %s", body)
	}
}

// TestRBACConfigRefused: an RBAC filter with a matcher the gateway cannot
// evaluate is NACKed naming the field; the old config keeps serving.
func TestRBACConfigRefused(t *testing.T) {
	u := startUpstream(t, "up", nil)
	cp := startControlPlane(t, "")
	rs := []typesResource{routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "up"))), edsCluster("up"), assignment("up", ep{u: u})}
	cp.set(append(rs, rdsListener("gw", "r"))...)
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/", "upstream=up")
	md := &rbacpb.Permission{Rule: &rbacpb.Permission_Metadata{Metadata: &matcher.MetadataMatcher{Filter: "istio_authn"}}}
	bad := withHTTPFilters(t, rdsListener("gw", "r"), rbacHTTPFilter(t, "envoy.filters.http.rbac", &rbachttp.RBAC{Rules: &rbacpb.RBAC{
		Policies: map[string]*rbacpb.Policy{"p": {Permissions: []*rbacpb.Permission{md}, Principals: []*rbacpb.Principal{rbacAnyone}}}}}))
	cp.set(append(rs, bad)...)
	waitFor(t, "a NACK", func() bool { return g.xds.Status().NACKs > 0 })
	if st := g.xds.Status(); !strings.Contains(st.LastNACK, `http_filters[0].typed_config.rules.policies["p"].permissions[0].metadata: not supported`) {
		t.Errorf("NACK: %q", st.LastNACK)
	}
	if code, _, _ := g.get(t, "/"); code != 200 {
		t.Errorf("old config: %d", code)
	}
	// The RBAC filter's name with a config of another type is refused too.
	// Waited for by its message, not by a count: the first bad listener may
	// be NACKed again (sent anew with another type's update) meanwhile.
	other, _ := anypb.New(&hcm.HttpConnectionManager{})
	odd := withHTTPFilters(t, rdsListener("gw", "r"), &hcm.HttpFilter{Name: "envoy.filters.http.rbac", ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: other}})
	cp.set(append(rs, odd)...)
	waitFor(t, "the NACK of a filter config of another type", func() bool {
		return strings.Contains(g.xds.Status().LastNACK, "http_filters[0].typed_config: type")
	})
}

// TestRBACDestinationPortAllProtocols: a DENY of the listener's port holds
// for HTTP/1.1 and h2c calls alike (the h2 path sees the local address).
func TestRBACDestinationPortAllProtocols(t *testing.T) {
	u := startUpstream(t, "up", nil)
	cp := startControlPlane(t, "")
	rs := []typesResource{routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "up"))), edsCluster("up"), assignment("up", ep{u: u})}
	cp.set(append(rs, rdsListener("gw", "r"))...)
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/", "upstream=up")
	_, port, _ := strings.Cut(strings.TrimPrefix(g.url, "http://"), ":")
	var p uint32
	for _, c := range port {
		p = p*10 + uint32(c-'0')
	}
	denyPort := rbacHTTPFilter(t, "envoy.filters.http.rbac", &rbachttp.RBAC{Rules: &rbacpb.RBAC{Action: rbacpb.RBAC_DENY,
		Policies: map[string]*rbacpb.Policy{"no-port": {Permissions: []*rbacpb.Permission{{Rule: &rbacpb.Permission_DestinationPort{DestinationPort: p}}},
			Principals: []*rbacpb.Principal{rbacAnyone}}}}})
	cp.set(append(rs, withHTTPFilters(t, rdsListener("gw", "r"), denyPort))...)
	waitFor(t, "the DENY to apply", func() bool { code, _, _ := g.get(t, "/"); return code == 403 })
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: &protos}, Timeout: 10 * time.Second}
	resp, err := h2c.Get(g.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 403 || string(b) != "RBAC: access denied" {
		t.Errorf("h2c: %s %d %q", resp.Proto, resp.StatusCode, b)
	}
}
