package gateway

import (
	"net/netip"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/xds"
)

// TestTCPChainMatch: Envoy's order, the most specific destination prefix
// first, then the most specific source prefix among those chains (no going
// back to a less specific destination); a chain without ranges fits any
// address; none fits: -1.
func TestTCPChainMatch(t *testing.T) {
	p := func(s ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, x := range s {
			out = append(out, netip.MustParsePrefix(x))
		}
		return out
	}
	l := &tcpListenerRT{chains: []*tcpChainSpec{
		{},                         // 0: any
		{src: p("10.0.0.0/8")},     // 1
		{dst: p("192.168.1.0/24")}, // 2
		{dst: p("192.168.0.0/16"), src: p("10.1.0.0/16")}, // 3
	}}
	a := netip.MustParseAddr
	for _, c := range []struct {
		dst, src string
		want     int
	}{
		{"1.2.3.4", "172.16.0.1", 0},
		{"1.2.3.4", "10.9.9.9", 1},
		{"192.168.1.5", "10.1.2.3", 2}, // the /24 destination beats the /16 with a source match
		{"192.168.2.5", "10.1.2.3", 3},
		{"192.168.2.5", "10.9.9.9", -1}, // chain 3's destination wins, its source does not fit: none (Envoy does not go back)
	} {
		if got := l.match(a(c.dst), a(c.src)); got != c.want {
			t.Errorf("%s from %s: chain %d, want %d", c.dst, c.src, got, c.want)
		}
	}
	only := &tcpListenerRT{chains: []*tcpChainSpec{{src: p("10.0.0.0/8")}}}
	if got := only.match(a("1.2.3.4"), a("172.16.0.1")); got != -1 {
		t.Errorf("no chain fits: %d", got)
	}
}

// TestTCPListenerRefused: what a TCP chain cannot match on, and a listener
// mixing TCP with HTTP chains, are refused naming the field.
func TestTCPListenerRefused(t *testing.T) {
	tp, _ := anypb.New(&tcpproxy.TcpProxy{StatPrefix: "s", ClusterSpecifier: &tcpproxy.TcpProxy_Cluster{Cluster: "c"}})
	tcpFilter := &listener.Filter{Name: tcpProxyFilterName, ConfigType: &listener.Filter_TypedConfig{TypedConfig: tp}}
	mixed := xds.HTTPListener("l", 80, "r")
	mixed.FilterChains = append(mixed.FilterChains, &listener.FilterChain{Filters: []*listener.Filter{tcpFilter}})
	for _, c := range []struct {
		name string
		l    *listener.Listener
		want string
	}{
		{"destination port", &listener.Listener{Name: "l", FilterChains: []*listener.FilterChain{{
			FilterChainMatch: &listener.FilterChainMatch{DestinationPort: wrapperspb.UInt32(80)}, Filters: []*listener.Filter{tcpFilter}}}},
			"filter_chains[0].filter_chain_match: a TCP chain matches prefix_ranges and source_prefix_ranges only"},
		{"bad prefix", &listener.Listener{Name: "l", FilterChains: []*listener.FilterChain{{
			FilterChainMatch: &listener.FilterChainMatch{SourcePrefixRanges: []*core.CidrRange{{AddressPrefix: "10.0.0.0", PrefixLen: wrapperspb.UInt32(40)}}},
			Filters:          []*listener.Filter{tcpFilter}}}},
			"filter_chains[0].filter_chain_match.source_prefix_ranges[0]: 10.0.0.0/40: not an address prefix"},
		{"mixed", mixed, "both TCP (tcp_proxy) and HTTP or TLS chains"},
	} {
		a, _ := anypb.New(c.l)
		_, _, err := decodeListener(a)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
