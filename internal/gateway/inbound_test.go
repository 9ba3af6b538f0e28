package gateway_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	security "istio.io/api/security/v1beta1"

	"github.com/sextant-mesh/sextant/internal/calllog"
	"github.com/sextant-mesh/sextant/internal/gateway"
	"github.com/sextant-mesh/sextant/internal/gateway/xdsclient"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// TestInboundModes: a sidecar's gateway serves the inbound listener Sextant's
// control plane builds for the workload at its mesh address (xds.ServerListener,
// subscribed to by name beside the wildcard) and forwards to the app. Each
// PeerAuthentication mode decides by the connection's first byte: STRICT
// takes only mutual TLS (a plaintext client and one without a certificate
// are refused), PERMISSIVE both, DISABLE only plaintext; a change of mode
// applies to new connections; calls over mutual TLS are recorded with the
// client's SPIFFE ID.
func TestInboundModes(t *testing.T) {
	mesh := newPKI(t)
	app := startUpstream(t, "app", nil)
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := mln.Addr().String()
	lg, err := calllog.Open(calllog.Options{Dir: t.TempDir(), FlushInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(gateway.Options{Listener: gateway.ProxyListener, Recorder: lg,
		Inbound: &gateway.Inbound{Addr: addr, App: app.addr, Service: "shop/orders"}})
	sc, sk := mesh.issueURI(t, "spiffe://td/ns/shop/sa/orders")
	if err := g.SetIdentity(sc, sk, mesh.pem); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() }) // after the sidecar stopped (cleanups run last first)
	cp := startControlPlane(t, "")
	serveSidecar(t, g, mln, cp.addr, nodeID)

	cc, ck := mesh.issueURI(t, "spiffe://td/ns/shop/sa/web")
	// A new connection per call: a mode applies to new connections.
	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{
			Certificates: certs, InsecureSkipVerify: true, // the server's SPIFFE ID is checked below, Istio's way
			VerifyConnection: func(cs tls.ConnectionState) error {
				_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: mesh.pool})
				if err == nil && cs.PeerCertificates[0].URIs[0].String() != "spiffe://td/ns/shop/sa/orders" {
					err = fmt.Errorf("server %v", cs.PeerCertificates[0].URIs)
				}
				return err
			}}}}
	}
	call := func(c *http.Client, scheme string) bool {
		resp, err := c.Get(scheme + "://" + addr + "/x")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200 && string(b) == "upstream=app path=/x"
	}
	mtls, noCert, plain := client(keyPair(t, cc, ck)), client(), client()
	ap := netip.MustParseAddrPort(addr)
	for _, c := range []struct {
		mode                security.PeerAuthentication_MutualTLS_Mode
		mtls, noCert, plain bool
	}{
		{security.PeerAuthentication_MutualTLS_STRICT, true, false, false},
		{security.PeerAuthentication_MutualTLS_PERMISSIVE, true, true, true},
		{security.PeerAuthentication_MutualTLS_DISABLE, false, false, true},
		{security.PeerAuthentication_MutualTLS_STRICT, true, false, false},
	} {
		cp.set(xds.ServerListener(gateway.InboundListenerName(addr), ap, c.mode, nil))
		// The mode has arrived once the call it alone decides goes its way.
		waitFor(t, c.mode.String(), func() bool {
			if c.mode == security.PeerAuthentication_MutualTLS_DISABLE {
				return call(plain, "http") && !call(mtls, "https")
			}
			return call(mtls, "https") && call(plain, "http") == c.plain
		})
		if got := [3]bool{call(mtls, "https"), call(noCert, "https"), call(plain, "http")}; got != [3]bool{c.mtls, c.noCert, c.plain} {
			t.Errorf("%v: mutual TLS, TLS without a certificate, plaintext served %v, want %v", c.mode, got, [3]bool{c.mtls, c.noCert, c.plain})
		}
	}
	// HTTP/2 by ALPN over mutual TLS (a gRPC client's sidecar): the
	// inbound listener's TLS context offers h2.
	h2 := client(keyPair(t, cc, ck))
	h2.Transport.(*http.Transport).ForceAttemptHTTP2 = true
	resp, err := h2.Get("https://" + addr + "/x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 || string(b) != "upstream=app path=/x" {
		t.Fatalf("HTTP/2 over mutual TLS: %s %d %q", resp.Proto, resp.StatusCode, b)
	}
	// The app's calls are filed under the workload's service, with the
	// client's identity when it gave one.
	resp, err = http.Get("http://" + serveAdmin(t, g, lg) + "/v1/calls?service=shop/orders")
	if err != nil {
		t.Fatal(err)
	}
	var out struct{ Calls []calllog.Call }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var withID, without int
	for _, c := range out.Calls {
		switch {
		case c.Cluster != gateway.InboundCluster || c.Endpoint != app.addr:
			t.Fatalf("call %+v: not to the app", c)
		case c.Principal == "spiffe://td/ns/shop/sa/web" && c.TLS:
			withID++
		case c.Principal == "":
			without++
		}
	}
	if withID == 0 || without == 0 || withID+without != len(out.Calls) {
		t.Fatalf("calls recorded: %d with web's SPIFFE ID, %d without, of %d", withID, without, len(out.Calls))
	}
}

// serveAdmin serves g's admin API on loopback until the test ends.
func serveAdmin(t *testing.T, g *gateway.Gateway, lg *calllog.Log) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: g.AdminHandler(lg)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// serveSidecar runs g as a sidecar's proxy: an xDS client of the control
// plane at cpAddr as node nodeID, asking for the inbound listener of mln's
// address, and its inbound listener on mln, until the test ends.
func serveSidecar(t *testing.T, g *gateway.Gateway, mln net.Listener, cpAddr, nodeID string) {
	t.Helper()
	conn, err := grpc.NewClient(cpAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	xc, err := xdsclient.New(conn, xdsclient.Options{Node: &core.Node{Id: nodeID}, Types: gateway.SidecarXDSTypes(mln.Addr().String()), Handler: g,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	xdone, sdone := make(chan struct{}), make(chan struct{})
	go func() { defer close(xdone); _ = xc.Run(ctx) }()
	go func() { defer close(sdone); _ = g.ServeInbound(mln) }()
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = g.Shutdown(sctx)
		<-sdone
		cancel()
		<-xdone
		conn.Close()
	})
}
