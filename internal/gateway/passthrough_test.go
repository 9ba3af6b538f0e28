package gateway_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// startPassthroughEndpoint is an HTTPS server with a certificate of ca for names:
// what a TLS passthrough chain forwards to.
func startPassthroughEndpoint(t *testing.T, ca *pki, name string, names ...string) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM := ca.issue(t, false, names...)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{name: name, addr: ln.Addr().String()}
	host, port, _ := net.SplitHostPort(u.addr)
	var p int
	fmt.Sscan(port, &p)
	u.host, u.port = host, uint32(p)
	u.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.calls.Add(1)
		fmt.Fprintf(w, "passthrough=%s proto=%s sni=%s", name, r.Proto, r.TLS.ServerName)
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}}}
	go func() { _ = u.srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = u.srv.Close() })
	return u
}

// passthroughChain is the filter chain Istio publishes for a Gateway
// server in tls.mode PASSTHROUGH: server names matched on a TLS
// ClientHello, a tcp_proxy to the cluster, no transport socket.
func passthroughChain(cluster string, idle time.Duration, names ...string) *listener.FilterChain {
	p := &tcpproxy.TcpProxy{StatPrefix: "passthrough", ClusterSpecifier: &tcpproxy.TcpProxy_Cluster{Cluster: cluster}}
	if idle > 0 {
		p.IdleTimeout = durationpb.New(idle)
	}
	a, _ := anypb.New(p)
	return &listener.FilterChain{
		FilterChainMatch: &listener.FilterChainMatch{ServerNames: names, TransportProtocol: "tls"},
		Filters:          []*listener.Filter{{Name: "envoy.filters.network.tcp_proxy", ConfigType: &listener.Filter_TypedConfig{TypedConfig: a}}},
	}
}

// TestTLSPassthrough: one TLS port terminates a.test and passes p.test
// through unopened to an endpoint that does the handshake itself (its
// certificate reaches the client, HTTP/2 by ALPN end to end); a
// passthrough cluster without endpoints closes the connection; an idle
// passthrough connection is closed after its idle_timeout.
func TestTLSPassthrough(t *testing.T) {
	ca, backCA := newPKI(t), newPKI(t)
	u := startUpstream(t, "up", protoEcho)
	back := startPassthroughEndpoint(t, backCA, "back", "p.test")
	cp := startControlPlane(t, "")
	g := startTLSGateway(t, cp.addr)
	aCert, aKey := ca.issue(t, false, "a.test")
	l := tlsListener("gw-tls", g.tlsPort(), tlsChain{names: []string{"a.test"}, cert: "a-cert"})
	l.FilterChains = append(l.FilterChains, passthroughChain("back", 0, "p.test"),
		passthroughChain("empty", 0, "e.test"), passthroughChain("back", 300*time.Millisecond, "idle.test"))
	cp.set(l, certSecret("a-cert", aCert, aKey),
		routeConfig("routes", vhost("all", []string{"*"}, prefixRoute("/", "up"))),
		edsCluster("up"), assignment("up", ep{u: u}), edsCluster("back"), assignment("back", ep{u: back}),
		edsCluster("empty"), assignment("empty"))

	get := func(c *http.Client, url string) (string, *tls.ConnectionState, error) {
		resp, err := c.Get(url)
		if err != nil {
			return "", nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), resp.TLS, err
	}
	waitFor(t, "passthrough to serve", func() bool {
		body, _, err := get(g.tlsClient(backCA.pool, true), "https://p.test/x")
		return err == nil && strings.HasPrefix(body, "passthrough=back")
	})
	for _, h2 := range []bool{true, false} {
		body, st, err := get(g.tlsClient(backCA.pool, h2), "https://p.test/x")
		want := map[bool]string{true: "HTTP/2.0", false: "HTTP/1.1"}[h2]
		if err != nil || body != "passthrough=back proto="+want+" sni=p.test" {
			t.Fatalf("p.test h2=%v: %q %v", h2, body, err)
		}
		// The endpoint's certificate, not the gateway's: the TLS is the
		// endpoint's own.
		if st.PeerCertificates[0].VerifyHostname("p.test") != nil || st.PeerCertificates[0].Issuer.CommonName != "test CA" {
			t.Errorf("p.test served %v", st.PeerCertificates[0].Subject)
		}
	}
	if back.calls.Load() < 2 {
		t.Errorf("the endpoint saw %d calls", back.calls.Load())
	}
	// The same port still terminates a.test, with the gateway's certificate.
	body, st, err := get(g.tlsClient(ca.pool, true), "https://a.test/y")
	if err != nil || !strings.Contains(body, "xfp=https") || st.PeerCertificates[0].VerifyHostname("a.test") != nil {
		t.Fatalf("a.test: %q %v", body, err)
	}
	// Plain HTTP to a port that passes TLS through is told so too
	// (the ClientHello is read before a chain is picked).
	raw, err := net.DialTimeout("tcp", g.tls, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	raw.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(raw, "GET /x HTTP/1.1\r\nHost: p.test\r\n\r\n")
	plain, _ := io.ReadAll(raw)
	raw.Close()
	if !strings.HasPrefix(string(plain), "HTTP/1.1 400 ") || !strings.Contains(string(plain), "HTTP request to an HTTPS port") {
		t.Errorf("plain HTTP to a passthrough port: %q", plain)
	}
	// No endpoint: the connection is closed, the handshake fails.
	if _, _, err := get(g.tlsClient(backCA.pool, false), "https://e.test/"); err == nil {
		t.Error("e.test: a cluster without endpoints answered")
	}
	// Idle for longer than idle_timeout: the gateway closes the tunnel.
	conn, err := tls.Dial("tcp", g.tls, &tls.Config{ServerName: "idle.test", RootCAs: backCA.pool, InsecureSkipVerify: true,
		NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: idle.test\r\n\r\n")
	buf := make([]byte, 4096)
	if n, err := conn.Read(buf); err != nil || !strings.Contains(string(buf[:n]), "passthrough=back") {
		t.Fatalf("idle.test: %q %v", buf[:n], err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	start := time.Now()
	if _, err := conn.Read(buf); err == nil {
		t.Fatal("idle.test: read after the idle timeout succeeded")
	} else if d := time.Since(start); d > 10*time.Second {
		t.Errorf("idle.test: closed after %v (idle_timeout 300ms): %v", d, err)
	}

	var m strings.Builder
	resp, err := g.client.Get(g.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(&m, resp.Body)
	resp.Body.Close()
	for _, want := range []string{`sextant_gateway_tls_passthrough_total{cluster="back",result="connected"}`,
		`sextant_gateway_tls_passthrough_total{cluster="empty",result="no_healthy_endpoint"}`} {
		if !strings.Contains(m.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	var conf struct {
		TLS []struct {
			Chains []struct {
				ServerNames []string `json:"server_names"`
				Passthrough []string `json:"passthrough_clusters"`
			}
		}
	}
	g.adminJSON(t, "/v1/config", &conf)
	found := false
	for _, c := range conf.TLS[0].Chains {
		if len(c.ServerNames) == 1 && c.ServerNames[0] == "p.test" && len(c.Passthrough) == 1 && c.Passthrough[0] == "back" {
			found = true
		}
	}
	if !found {
		t.Errorf("admin /v1/config does not show the passthrough chain: %+v", conf.TLS)
	}
}

// TestTLSPassthroughRefused: what a passthrough chain cannot do is refused
// (NACK naming the field), never ignored.
func TestTLSPassthroughRefused(t *testing.T) {
	cp := startControlPlane(t, "")
	g := startTLSGateway(t, cp.addr)
	bad := passthroughChain("back", 0, "p.test")
	p := &tcpproxy.TcpProxy{StatPrefix: "x", ClusterSpecifier: &tcpproxy.TcpProxy_Cluster{Cluster: "back"},
		MetadataMatch: &core.Metadata{}}
	a, _ := anypb.New(p)
	bad.Filters[0].ConfigType = &listener.Filter_TypedConfig{TypedConfig: a}
	l := &listener.Listener{Name: "gw-tls", Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
		Address: "0.0.0.0", PortSpecifier: &core.SocketAddress_PortValue{PortValue: g.tlsPort()}}}},
		FilterChains: []*listener.FilterChain{bad}}
	cp.set(l, edsCluster("back"))
	waitFor(t, "NACK", func() bool {
		st := g.xds.Status()
		return st.NACKs > 0 && strings.Contains(st.LastNACK, "metadata_match")
	})
}
