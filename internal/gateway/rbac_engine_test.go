package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	envoytype "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/valyala/fasthttp"
	expr "google.golang.org/genproto/googleapis/api/expr/v1alpha1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Hand-built Envoy RBAC protos, the schema Istio's AuthorizationPolicy
// becomes (and Sextant's control plane publishes).

func exact(s string) *matcher.StringMatcher {
	return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: s}}
}

func prefix(s string) *matcher.StringMatcher {
	return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: s}}
}

func permPath(sm *matcher.StringMatcher) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_UrlPath{UrlPath: &matcher.PathMatcher{Rule: &matcher.PathMatcher_Path{Path: sm}}}}
}

func permHeader(name string, sm *matcher.StringMatcher) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_Header{Header: &route.HeaderMatcher{Name: name,
		HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: sm}}}}
}

func permAnd(ps ...*rbacpb.Permission) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_AndRules{AndRules: &rbacpb.Permission_Set{Rules: ps}}}
}

func permNot(p *rbacpb.Permission) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_NotRule{NotRule: p}}
}

var permAny = &rbacpb.Permission{Rule: &rbacpb.Permission_Any{Any: true}}
var anyone = &rbacpb.Principal{Identifier: &rbacpb.Principal_Any{Any: true}}

func principal(sm *matcher.StringMatcher) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_Authenticated_{Authenticated: &rbacpb.Principal_Authenticated{PrincipalName: sm}}}
}

func fromCIDR(a string, n uint32) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_DirectRemoteIp{DirectRemoteIp: &core.CidrRange{AddressPrefix: a, PrefixLen: wrapperspb.UInt32(n)}}}
}

func engine(t testing.TB, action rbacpb.RBAC_Action, policies map[string]*rbacpb.Policy) *rbacEngine {
	t.Helper()
	e, err := compileRBAC(&rbacpb.RBAC{Action: action, Policies: policies}, "rules")
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// testReq is a call from peer with a client certificate of uri (none if
// empty) and dns names.
func testReq(method, uri, peer string, port uint16, spiffe string, dns ...string) *rbacReq {
	var h fasthttp.RequestHeader
	h.SetMethod(method)
	h.SetRequestURI(uri)
	h.SetHost("shop.test")
	h.Set("X-Team", "blue")
	r := &rbacReq{h: &h, peer: netip.MustParseAddr(peer), local: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), scheme: schemeHTTP}
	r.path = []byte(strings.SplitN(uri, "?", 2)[0])
	if spiffe != "" || len(dns) > 0 {
		c := &x509.Certificate{Subject: pkix.Name{CommonName: "client", Organization: []string{"acme"}}, DNSNames: dns}
		if spiffe != "" {
			u, _ := url.Parse(spiffe)
			c.URIs = []*url.URL{u}
		}
		r.tls, r.scheme = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}}, schemeHTTPS
		n := peerNamesOf(r.tls) // as a connection keeps them
		r.names = &n
	}
	return r
}

func TestRBACEvaluate(t *testing.T) {
	web := "spiffe://test/ns/default/sa/web"
	allow := engine(t, rbacpb.RBAC_ALLOW, map[string]*rbacpb.Policy{
		"orders-get": {Permissions: []*rbacpb.Permission{permAnd(permHeader(":method", exact("GET")), permPath(prefix("/orders")))},
			Principals: []*rbacpb.Principal{principal(exact(web))}},
		"health": {Permissions: []*rbacpb.Permission{permPath(exact("/healthz"))}, Principals: []*rbacpb.Principal{fromCIDR("10.0.0.0", 8)}},
		"ops": {Permissions: []*rbacpb.Permission{permAnd(permHeader("x-team", exact("blue")), permNot(permPath(prefix("/orders"))))},
			Principals: []*rbacpb.Principal{principal(exact("CN=client,O=acme"))}},
		"port": {Permissions: []*rbacpb.Permission{{Rule: &rbacpb.Permission_DestinationPort{DestinationPort: 9443}}},
			Principals: []*rbacpb.Principal{principal(nil)}},
	})
	deny := engine(t, rbacpb.RBAC_DENY, map[string]*rbacpb.Policy{
		"no-admin": {Permissions: []*rbacpb.Permission{permPath(prefix("/admin"))}, Principals: []*rbacpb.Principal{anyone}},
	})
	log := engine(t, rbacpb.RBAC_LOG, map[string]*rbacpb.Policy{
		"all": {Permissions: []*rbacpb.Permission{permAny}, Principals: []*rbacpb.Principal{anyone}},
	})
	for _, tc := range []struct {
		name   string
		e      *rbacEngine
		r      *rbacReq
		ok     bool
		policy string
	}{
		{"spiffe GET", allow, testReq("GET", "/orders/1?x=1", "127.0.0.1", 80, web), true, "orders-get"},
		{"spiffe POST", allow, testReq("POST", "/orders/1", "127.0.0.1", 80, web), false, ""},
		{"other spiffe", allow, testReq("GET", "/orders/1", "127.0.0.1", 80, "spiffe://test/ns/default/sa/evil"), false, ""},
		{"no certificate", allow, testReq("GET", "/orders/1", "127.0.0.1", 80, ""), false, ""},
		{"health from 10/8", allow, testReq("GET", "/healthz", "10.1.2.3", 80, ""), true, "health"},
		{"health from elsewhere", allow, testReq("GET", "/healthz", "192.168.1.1", 80, ""), false, ""},
		{"subject when no SAN matches", allow, testReq("GET", "/shop", "127.0.0.1", 80, "", "client.test"), true, "ops"},
		{"not_rule", allow, testReq("GET", "/orders", "127.0.0.1", 80, "", "client.test"), false, ""},
		{"any authenticated on port", allow, testReq("GET", "/orders", "127.0.0.1", 9443, "spiffe://x/y"), true, "port"},
		{"deny matches", deny, testReq("GET", "/admin/x", "127.0.0.1", 80, ""), false, "no-admin"},
		{"deny misses", deny, testReq("GET", "/orders", "127.0.0.1", 80, ""), true, ""},
		{"log", log, testReq("DELETE", "/x", "127.0.0.1", 80, ""), true, "all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, p := tc.e.evaluate(tc.r)
			if ok != tc.ok || p != tc.policy {
				t.Errorf("got %v %q, want %v %q", ok, p, tc.ok, tc.policy)
			}
		})
	}
}

// TestRBACRefused: what the gateway cannot evaluate is refused naming the
// field, never treated as a match or a miss.
func TestRBACRefused(t *testing.T) {
	md := &rbacpb.Permission{Rule: &rbacpb.Permission_Metadata{Metadata: &matcher.MetadataMatcher{Filter: "x"}}}
	fs := &rbacpb.Principal{Identifier: &rbacpb.Principal_FilterState{FilterState: &matcher.FilterStateMatcher{Key: "k"}}}
	ok := func(p *rbacpb.Policy) *rbachttp.RBAC {
		return &rbachttp.RBAC{Rules: &rbacpb.RBAC{Policies: map[string]*rbacpb.Policy{"p": p}}}
	}
	for _, tc := range []struct {
		field string
		cfg   *rbachttp.RBAC
	}{
		{`rules.policies["p"].permissions[0].metadata`, ok(&rbacpb.Policy{Permissions: []*rbacpb.Permission{md}, Principals: []*rbacpb.Principal{anyone}})},
		{`rules.policies["p"].permissions[0].and_rules.rules[1].metadata`, ok(&rbacpb.Policy{Permissions: []*rbacpb.Permission{permAnd(permAny, md)}, Principals: []*rbacpb.Principal{anyone}})},
		{`rules.policies["p"].principals[0].filter_state`, ok(&rbacpb.Policy{Permissions: []*rbacpb.Permission{permAny}, Principals: []*rbacpb.Principal{fs}})},
		{`rules.policies["p"].condition`, ok(&rbacpb.Policy{Permissions: []*rbacpb.Permission{permAny}, Principals: []*rbacpb.Principal{anyone}, Condition: new(expr.Expr)})},
		{`rules.policies["p"].permissions`, ok(&rbacpb.Policy{Principals: []*rbacpb.Principal{anyone}})},
		{`rules.policies["p"].permissions[0].any`, ok(&rbacpb.Policy{Permissions: []*rbacpb.Permission{{Rule: &rbacpb.Permission_Any{}}}, Principals: []*rbacpb.Principal{anyone}})},
		{`rules.policies["p"].permissions[0].header.name`, ok(&rbacpb.Policy{Permissions: []*rbacpb.Permission{permHeader(":status", exact("200"))}, Principals: []*rbacpb.Principal{anyone}})},
		{`rules.policies["p"].permissions[0].url_path.path`, ok(&rbacpb.Policy{Permissions: []*rbacpb.Permission{{Rule: &rbacpb.Permission_UrlPath{UrlPath: &matcher.PathMatcher{}}}}, Principals: []*rbacpb.Principal{anyone}})},
		{`rules.policies["p"].permissions[0].destination_port_range`, ok(&rbacpb.Policy{Permissions: []*rbacpb.Permission{{Rule: &rbacpb.Permission_DestinationPortRange{DestinationPortRange: &envoytype.Int32Range{Start: 9, End: 9}}}}, Principals: []*rbacpb.Principal{anyone}})},
		{`rules.policies["p"].principals[0].direct_remote_ip.address_prefix`, ok(&rbacpb.Policy{Permissions: []*rbacpb.Permission{permAny}, Principals: []*rbacpb.Principal{fromCIDR("10.0.0", 8)}})},
		{`rules.policies["p"].principals[0].authenticated.principal_name.safe_regex.regex`, ok(&rbacpb.Policy{Permissions: []*rbacpb.Permission{permAny}, Principals: []*rbacpb.Principal{principal(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: "("}}})}})},
		{`rules.audit_logging_options`, &rbachttp.RBAC{Rules: &rbacpb.RBAC{AuditLoggingOptions: &rbacpb.RBAC_AuditLoggingOptions{}}}},
		{`shadow_rules.policies["p"].permissions[0].metadata`, &rbachttp.RBAC{ShadowRules: &rbacpb.RBAC{Policies: map[string]*rbacpb.Policy{"p": {Permissions: []*rbacpb.Permission{md}, Principals: []*rbacpb.Principal{anyone}}}}}},
	} {
		t.Run(tc.field, func(t *testing.T) {
			_, err := compileRBACFilter("f", tc.cfg, "")
			if err == nil || !strings.HasPrefix(strings.TrimPrefix(err.Error(), "."), tc.field+":") {
				t.Fatalf("error %v, want one naming %s", err, tc.field)
			}
		})
	}
}

// BenchmarkRBAC evaluates an ALLOW engine of 10 policies (method, path,
// header and SPIFFE principal matchers, as an AuthorizationPolicy of 10
// rules becomes) over a call that the last policy allows.
func BenchmarkRBAC(b *testing.B) {
	policies := map[string]*rbacpb.Policy{}
	for i := range 10 {
		name := string(rune('a'+i)) + "-rule"
		policies[name] = &rbacpb.Policy{
			Permissions: []*rbacpb.Permission{permAnd(permHeader(":method", exact("GET")), permPath(prefix("/svc"+string(rune('0'+i))+"/")),
				permHeader("x-team", exact("blue")))},
			Principals: []*rbacpb.Principal{principal(exact("spiffe://test/ns/default/sa/web" + string(rune('0'+i))))},
		}
	}
	e := engine(b, rbacpb.RBAC_ALLOW, policies)
	f := &rbacFilter{name: "rbac", rules: e}
	r := testReq("GET", "/svc9/orders?x=1", "127.0.0.1", 80, "spiffe://test/ns/default/sa/web9")
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if ok, p := f.rules.evaluate(r); !ok || p != "j-rule" {
			b.Fatal(ok, p)
		}
	}
}

// FuzzRBACConfig: any RBAC filter config either compiles or is refused
// with an error; a compiled one evaluates any call without panicking.
func FuzzRBACConfig(f *testing.F) {
	seeds := []proto.Message{
		&rbachttp.RBAC{Rules: &rbacpb.RBAC{Action: rbacpb.RBAC_DENY, Policies: map[string]*rbacpb.Policy{
			"p": {Permissions: []*rbacpb.Permission{permAnd(permHeader(":method", exact("GET")), permNot(permPath(prefix("/a"))))},
				Principals: []*rbacpb.Principal{principal(exact("spiffe://t/ns/a/sa/b")), fromCIDR("10.0.0.0", 8)}}}},
			ShadowRules: &rbacpb.RBAC{Policies: map[string]*rbacpb.Policy{"s": {Permissions: []*rbacpb.Permission{permAny}, Principals: []*rbacpb.Principal{anyone}}}}},
		&rbachttp.RBACPerRoute{Rbac: &rbachttp.RBAC{}},
	}
	for _, s := range seeds {
		a, _ := anypb.New(s)
		f.Add(a.GetValue())
	}
	r := testReq("GET", "/a/b?c", "10.0.0.1", 80, "spiffe://t/ns/a/sa/b", "x.test")
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg := new(rbachttp.RBAC)
		if proto.Unmarshal(b, cfg) != nil {
			return
		}
		fl, err := compileRBACFilter("f", cfg, "")
		if err != nil {
			return
		}
		for _, e := range []*rbacEngine{fl.rules, fl.shadow} {
			if e != nil {
				e.evaluate(r)
			}
		}
	})
}
