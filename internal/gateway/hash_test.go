package gateway

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/valyala/fasthttp"
)

// TestDecodeHashPolicies: each hash policy is read; what the gateway cannot
// compute is refused naming the field.
func TestDecodeHashPolicies(t *testing.T) {
	hs, err := decodeHashPolicies([]*route.RouteAction_HashPolicy{
		{PolicySpecifier: &route.RouteAction_HashPolicy_Header_{Header: &route.RouteAction_HashPolicy_Header{HeaderName: "x-user"}}},
		{PolicySpecifier: &route.RouteAction_HashPolicy_ConnectionProperties_{ConnectionProperties: &route.RouteAction_HashPolicy_ConnectionProperties{SourceIp: true}}, Terminal: true},
		{PolicySpecifier: &route.RouteAction_HashPolicy_QueryParameter_{QueryParameter: &route.RouteAction_HashPolicy_QueryParameter{Name: "u"}}},
		{PolicySpecifier: &route.RouteAction_HashPolicy_FilterState_{FilterState: &route.RouteAction_HashPolicy_FilterState{Key: "io.grpc.channel_id"}}},
	}, "route")
	want := []hashSpec{{kind: hashHeader, name: "x-user"}, {kind: hashSourceIP, terminal: true}, {kind: hashQuery, name: "u"}}
	if err != nil || fmt.Sprint(hs) != fmt.Sprint(want) {
		t.Fatalf("got %v %v, want %v", hs, err, want)
	}
	for _, tc := range []struct {
		name, want string
		hp         *route.RouteAction_HashPolicy
	}{
		{"no header name", "hash_policy[0]: empty name", &route.RouteAction_HashPolicy{PolicySpecifier: &route.RouteAction_HashPolicy_Header_{Header: &route.RouteAction_HashPolicy_Header{}}}},
		{"cookie attributes", "hash_policy[0].cookie.attributes: not supported", &route.RouteAction_HashPolicy{PolicySpecifier: &route.RouteAction_HashPolicy_Cookie_{
			Cookie: &route.RouteAction_HashPolicy_Cookie{Name: "c", Attributes: []*route.RouteAction_HashPolicy_CookieAttribute{{Name: "SameSite", Value: "Lax"}}}}}},
	} {
		if _, err := decodeHashPolicies([]*route.RouteAction_HashPolicy{tc.hp}, "route"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// BenchmarkCallHash: a call's hash by a header and by a cookie, as a
// consistent-hash route computes it before the pick.
func BenchmarkCallHash(b *testing.B) {
	for _, tc := range []struct {
		name string
		spec hashSpec
	}{
		{"header", hashSpec{kind: hashHeader, name: "x-user"}},
		{"cookie", hashSpec{kind: hashCookie, name: "affinity", ttl: time.Hour}},
		{"source-ip", hashSpec{kind: hashSourceIP}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var ctx fasthttp.RequestCtx
			ctx.Init(&fasthttp.Request{}, &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 40000}, nil)
			ctx.Request.Header.Set("X-User", "user-1234")
			ctx.Request.Header.SetCookie("affinity", "0123456789abcdef")
			specs := []hashSpec{tc.spec}
			b.ReportAllocs()
			for b.Loop() {
				if _, ok, _ := callHash(&ctx, specs); !ok {
					b.Fatal("no hash")
				}
			}
		})
	}
}

// TestCallHashSourceIP: a source-IP hash is of the client's IP as Envoy
// writes it, an IPv4-mapped one as IPv4; a client without an IP address
// gives no hash.
func TestCallHashSourceIP(t *testing.T) {
	specs := []hashSpec{{kind: hashSourceIP}}
	for _, tc := range []struct {
		addr net.Addr
		want string // "": no hash
	}{
		{&net.TCPAddr{IP: net.IPv4(10, 1, 2, 3).To4(), Port: 40000}, "10.1.2.3"},
		{&net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 40000}, "10.1.2.3"}, // 16 bytes, IPv4-mapped
		{&net.TCPAddr{IP: net.ParseIP("2001:db8::7"), Port: 40000}, "2001:db8::7"},
		{&net.UnixAddr{Name: "/tmp/s", Net: "unix"}, ""},
	} {
		var ctx fasthttp.RequestCtx
		ctx.Init(&fasthttp.Request{}, tc.addr, nil)
		h, ok, _ := callHash(&ctx, specs)
		if tc.want == "" {
			if ok {
				t.Errorf("%v: hashed, want no hash", tc.addr)
			}
			continue
		}
		if !ok || h != xxhash.Sum64String(tc.want) {
			t.Errorf("%v: hash %x (ok %v), want xxhash(%q)", tc.addr, h, ok, tc.want)
		}
	}
}
