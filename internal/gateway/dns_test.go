package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/miekg/dns"
	"github.com/valyala/fasthttp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sextant-mesh/sextant/internal/gateway/xdsclient"
)

// dnsZone is a real DNS server on loopback (miekg/dns) whose A records the
// test changes.
type dnsZone struct {
	mu      sync.Mutex
	records map[string][]string // fqdn -> IPv4 addresses
	queries int
	srv     *dns.Server
}

func startDNS(t *testing.T) *dnsZone {
	t.Helper()
	z := &dnsZone{records: map[string][]string{}}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	z.srv = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		z.mu.Lock()
		z.queries++
		for _, q := range r.Question {
			if q.Qtype != dns.TypeA {
				continue
			}
			for _, ip := range z.records[q.Name] {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0},
					A: net.ParseIP(ip)})
			}
		}
		z.mu.Unlock()
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	z.srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = z.srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = z.srv.Shutdown() })
	return z
}

func (z *dnsZone) set(name string, ips ...string) {
	z.mu.Lock()
	z.records[dns.Fqdn(name)] = ips
	z.mu.Unlock()
}

// lookup resolves through the zone only, as the system resolver would.
func (z *dnsZone) lookup() lookupFunc {
	addr := z.srv.PacketConn.LocalAddr().String()
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
	return func(ctx context.Context, host string) ([]netip.Addr, error) { return r.LookupNetIP(ctx, "ip4", host) }
}

// namedUpstreams serves "a" on 127.0.0.1:P and "b" on 127.0.0.2:P, one
// port for both, as two addresses of one DNS name.
func namedUpstreams(t *testing.T) int {
	t.Helper()
	for range 20 {
		la, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := la.Addr().(*net.TCPAddr).Port
		lb, err := net.Listen("tcp", fmt.Sprintf("127.0.0.2:%d", port))
		if err != nil {
			la.Close()
			continue
		}
		for name, ln := range map[string]net.Listener{"a": la, "b": lb} {
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, name) })}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { srv.Close() })
		}
		return port
	}
	t.Skip("no port free on both 127.0.0.1 and 127.0.0.2")
	return 0
}

func dnsClusterProto(name string, typ cluster.Cluster_DiscoveryType, host string, port int) *cluster.Cluster {
	return &cluster.Cluster{
		Name: name, ClusterDiscoveryType: &cluster.Cluster_Type{Type: typ},
		DnsRefreshRate: durationpb.New(100 * time.Millisecond),
		LoadAssignment: &endpointpb.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointpb.LocalityLbEndpoints{{
			LbEndpoints: []*endpointpb.LbEndpoint{{HostIdentifier: &endpointpb.LbEndpoint_Endpoint{Endpoint: &endpointpb.Endpoint{
				Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
					Address: host, PortSpecifier: &core.SocketAddress_PortValue{PortValue: uint32(port)}}}}}}}},
		}}},
	}
}

// callDNS serves one call on g and returns the body ("a", "b") or the
// status.
func callDNS(g *Gateway) string {
	var ctx fasthttp.RequestCtx
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI("/")
	req.Header.SetHost("ext.example")
	ctx.Init(req, nil, nil)
	g.serve(&ctx)
	if code := ctx.Response.StatusCode(); code != 200 {
		return fmt.Sprint(code)
	}
	return string(ctx.Response.Body())
}

// TestDNSCluster: a STRICT_DNS cluster's endpoints are the addresses its
// name resolves to, re-resolved at its refresh rate from a real DNS server;
// a LOGICAL_DNS cluster uses the first address only; a failed lookup keeps
// the last answer.
func TestDNSCluster(t *testing.T) {
	z := startDNS(t)
	port := namedUpstreams(t)
	z.set("ext.example", "127.0.0.1")
	for _, c := range []struct {
		typ  cluster.Cluster_DiscoveryType
		both string // the endpoints with both addresses answered
	}{{cluster.Cluster_STRICT_DNS, "ab"}, {cluster.Cluster_LOGICAL_DNS, "a"}} {
		t.Run(c.typ.String(), func(t *testing.T) {
			z.set("ext.example", "127.0.0.1")
			g := New(Options{})
			g.lookup = z.lookup()
			defer g.pools.closeAll()
			defer g.stopDNS()
			spec, err := decodeCluster(dnsClusterProto("ext", c.typ, "ext.example", port))
			if err != nil {
				t.Fatal(err)
			}
			rs := &routeSpec{name: "r", match: matchSpec{kind: matchPrefix, value: "/"}, timeout: 5 * time.Second,
				clusters: []clusterWeight{{name: "ext", weight: 1}}}
			if _, err := g.Update(xdsclient.State{
				ListenerType: {"gw": &listenerSpec{name: "gw", inline: &routeConfigSpec{name: "rc",
					vhosts: []*vhostSpec{{name: "all", domains: []string{"*"}, routes: []*routeSpec{rs}}}}}},
				ClusterType: {"ext": spec},
			}); err != nil {
				t.Fatal(err)
			}
			// Warm: resolved while the update was applied.
			if got := callDNS(g); got != "a" {
				t.Fatalf("first call: got %q, want a", got)
			}
			seen := func(want string) {
				t.Helper()
				deadline := time.Now().Add(10 * time.Second)
				for time.Now().Before(deadline) {
					got := map[string]bool{}
					for range 20 {
						got[callDNS(g)] = true
					}
					var s []string
					for _, k := range []string{"a", "b"} {
						if got[k] {
							s = append(s, k)
						}
					}
					if strings.Join(s, "") == want && len(got) == len(want) {
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
				t.Fatalf("endpoints never became %q", want)
			}
			z.set("ext.example", "127.0.0.1", "127.0.0.2")
			if c.typ == cluster.Cluster_STRICT_DNS {
				seen("ab")
			} else {
				time.Sleep(500 * time.Millisecond) // several refreshes
				seen("a")
			}
			z.set("ext.example", "127.0.0.2")
			seen("b")
			// The name stops resolving: the last answer stays.
			z.set("ext.example")
			z.mu.Lock()
			q := z.queries
			z.mu.Unlock()
			waitForQueries := time.Now().Add(10 * time.Second)
			for {
				z.mu.Lock()
				n := z.queries
				z.mu.Unlock()
				if n >= q+2 || time.Now().After(waitForQueries) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			seen("b")
		})
	}
}

// TestDNSClusterDecode: what the gateway refuses in a DNS cluster, by field.
func TestDNSClusterDecode(t *testing.T) {
	two := dnsClusterProto("x", cluster.Cluster_LOGICAL_DNS, "a.example", 80)
	two.LoadAssignment.Endpoints[0].LbEndpoints = append(two.LoadAssignment.Endpoints[0].LbEndpoints,
		dnsClusterProto("x", cluster.Cluster_LOGICAL_DNS, "b.example", 80).LoadAssignment.Endpoints[0].LbEndpoints...)
	none := dnsClusterProto("x", cluster.Cluster_STRICT_DNS, "a.example", 80)
	none.LoadAssignment = nil
	bad := dnsClusterProto("x", cluster.Cluster_STRICT_DNS, "a_b!", 80)
	for name, c := range map[string]struct {
		c    *cluster.Cluster
		want string
	}{
		"logical two": {two, "exactly one host"},
		"no hosts":    {none, "at least one host"},
		"bad name":    {bad, "not an IP address or host name"},
	} {
		if _, err := decodeCluster(c.c); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, c.want)
		}
	}
}
