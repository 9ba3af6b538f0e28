package gateway_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestActiveHealthCheckOverUpstreamTLS: a TLS cluster's checks use its own
// handshake (SNI, CA, client certificate), as Envoy's use the cluster's
// transport socket: an endpoint requiring mesh client certificates passes
// its HTTPS check, and leaves rotation when its /healthz starts failing.
func TestActiveHealthCheckOverUpstreamTLS(t *testing.T) {
	ca := newPKI(t)
	const id = "spiffe://cluster.local/ns/default/sa/orders"
	sc, sk := ca.issueURI(t, id)
	var status atomic.Int32
	status.Store(200)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ErrorLog: log.New(io.Discard, "", 0),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{keyPair(t, sc, sk)}, NextProtos: []string{"http/1.1"},
			ClientCAs: ca.pool, ClientAuth: tls.RequireAndVerifyClientCert},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" {
				w.WriteHeader(int(status.Load()))
				return
			}
			fmt.Fprint(w, "upstream=secure")
		})}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	tcp := ln.Addr().(*net.TCPAddr)
	u := &upstream{addr: ln.Addr().String(), host: tcp.IP.String(), port: uint32(tcp.Port)}
	cc, ck := ca.issueURI(t, "spiffe://cluster.local/ns/edge/sa/gateway")
	up := &tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsConfig("gw-cert")},
		ValidationContextType:          sdsValidation("mesh-ca", exactSAN(tlsv3.SubjectAltNameMatcher_URI, id))}}
	check := &core.HealthCheck{Timeout: durationpb.New(time.Second), Interval: durationpb.New(100 * time.Millisecond),
		NoTrafficInterval: durationpb.New(100 * time.Millisecond), UnhealthyThreshold: wrapperspb.UInt32(2), HealthyThreshold: wrapperspb.UInt32(1),
		HealthChecker: &core.HealthCheck_HttpHealthCheck_{HttpHealthCheck: &core.HealthCheck_HttpHealthCheck{Path: "/healthz"}}}
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "secure"))),
		tlsCluster(edsCluster("secure", func(c *cluster.Cluster) { c.HealthChecks = []*core.HealthCheck{check} }), up),
		assignment("secure", ep{u: u}), caSecret("mesh-ca", ca.pem), certSecret("gw-cert", cc, ck))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/x", "upstream=secure")
	// The cluster takes calls once its first checks are in or their
	// timeout (1 s) has passed, whichever comes first (warmAll): on a
	// loaded machine the first HTTPS check may come after the first call.
	waitFor(t, "the endpoint healthy by its HTTPS check", func() bool {
		e := g.endpointHealth(t, "secure", u.addr)
		return e.HealthFlags == "healthy" && strings.Contains(e.Output, "https://")
	})
	status.Store(503)
	waitFor(t, "the failing HTTPS check", func() bool {
		return strings.Contains(g.endpointHealth(t, "secure", u.addr).HealthFlags, "/failed_active_hc")
	})
	if code, _, h := g.get(t, "/x"); code != 503 || h.Get("X-Sextant-Error") != "no_healthy_endpoint" {
		t.Fatalf("calls with the endpoint failed: %d %s", code, h.Get("X-Sextant-Error"))
	}
	status.Store(200)
	g.waitServes(t, "/x", "upstream=secure")
}

// TestActiveHealthCheckGRPCOverUpstreamTLS: a gRPC check of an HTTP/2 TLS
// cluster runs over the cluster's handshake (ALPN h2, CA, SAN).
func TestActiveHealthCheckGRPCOverUpstreamTLS(t *testing.T) {
	ca := newPKI(t)
	sc, sk := ca.issue(t, false, "orders.example.com")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewServerTLSFromCert(ptr(keyPair(t, sc, sk)))))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	tcp := ln.Addr().(*net.TCPAddr)
	u := &upstream{addr: ln.Addr().String(), host: tcp.IP.String(), port: uint32(tcp.Port)}
	up := &tlsv3.UpstreamTlsContext{Sni: "orders.example.com", CommonTlsContext: &tlsv3.CommonTlsContext{
		ValidationContextType: sdsValidation("ca", exactSAN(tlsv3.SubjectAltNameMatcher_DNS, "orders.example.com"))}}
	check := &core.HealthCheck{Timeout: durationpb.New(time.Second), Interval: durationpb.New(100 * time.Millisecond),
		NoTrafficInterval: durationpb.New(100 * time.Millisecond), UnhealthyThreshold: wrapperspb.UInt32(2), HealthyThreshold: wrapperspb.UInt32(1),
		HealthChecker: &core.HealthCheck_GrpcHealthCheck_{GrpcHealthCheck: &core.HealthCheck_GrpcHealthCheck{}}}
	c := tlsCluster(h2cCluster("grpcs"), up)
	c.HealthChecks = []*core.HealthCheck{check}
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "grpcs"))),
		c, assignment("grpcs", ep{u: u}), caSecret("ca", ca.pem))
	g := startGateway(t, cp.addr)
	waitFor(t, "the gRPC check over TLS to pass", func() bool { return g.endpointHealth(t, "grpcs", u.addr).HealthFlags == "healthy" })
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	waitFor(t, "NOT_SERVING to fail it", func() bool {
		return strings.Contains(g.endpointHealth(t, "grpcs", u.addr).HealthFlags, "/failed_active_hc")
	})
}

func ptr[T any](v T) *T { return &v }
