package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/sextant-mesh/sextant/client"
)

// httpsUpstream is a Go net/http HTTPS server on loopback with the key
// pair in certFile/keyFile; clientCA (a PEM file) set, it requires a
// client certificate from it. It answers its name and the serial number of
// the client's certificate ("-" for none); every 10th answer closes its
// connection, so that new connections come regularly.
type httpsUpstream struct {
	port  int
	calls atomic.Int64
}

func startHTTPSUpstream(t *testing.T, name, certFile, keyFile, clientCA string) *httpsUpstream {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}}
	if clientCA != "" {
		b, _ := os.ReadFile(clientCA)
		conf.ClientCAs = x509.NewCertPool()
		conf.ClientCAs.AppendCertsFromPEM(b)
		conf.ClientAuth = tls.RequireAndVerifyClientCert
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &httpsUpstream{port: ln.Addr().(*net.TCPAddr).Port}
	srv := &http.Server{TLSConfig: conf, ErrorLog: log.New(io.Discard, "", 0), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u.calls.Add(1)%10 == 0 {
			w.Header().Set("Connection", "close")
		}
		serial := "-"
		if len(r.TLS.PeerCertificates) > 0 {
			serial = r.TLS.PeerCertificates[0].SerialNumber.String()
		}
		fmt.Fprintf(w, "%s client=%s", name, serial)
	})}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return u
}

// tget is get with a deadline: a call that hangs fails the test instead.
func tget(t *testing.T, proxy, host, path string, _ map[string]string) (string, int) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+proxy+path, nil)
	req.Host = host
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), resp.StatusCode
}

func serialOf(t *testing.T, certFile string) string {
	t.Helper()
	c, err := tls.LoadX509KeyPair(certFile, strings.TrimSuffix(certFile, ".crt")+".key")
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf.SerialNumber.String()
}

const upstreamTLSConfig = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  trafficPolicy:
    tls: {mode: SIMPLE, credentialName: orders-ca, sni: orders.internal%s}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: billing}
spec:
  host: billing
  trafficPolicy:
    tls: {mode: MUTUAL, credentialName: gateway-client}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: greeter}
spec:
  host: greeter
  trafficPolicy:
    connectionPool: {http: {h2UpgradePolicy: UPGRADE}}
    tls: {mode: SIMPLE, credentialName: orders-ca, sni: orders.internal}
`

// TestUpstreamTLSEndToEnd: DestinationRules with tls SIMPLE (a CA secret,
// sni) and MUTUAL (a TLS secret with the gateway's client certificate and
// the CA), applied to a real server, make a real gateway call Go HTTPS
// upstreams over TLS and a grpc-go server with TLS credentials over HTTP/2
// (ALPN h2). A wrong CA and a subject alt name mismatch are 503s naming
// the failure; the client certificate rotated with secret create --replace
// mid-traffic fails no call and reaches the endpoint on new connections.
func TestUpstreamTLSEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and TLS upstreams")
	}
	api, proxy, _, server := startMeshTLS(t, "")
	ctx := context.Background()
	dir := t.TempDir()
	srvCert, srvKey := testCert(t, dir, "orders", time.Now().Add(24*time.Hour), "orders.internal")
	otherCA, _ := testCert(t, dir, "other", time.Now().Add(24*time.Hour), "other.internal")
	clientCert, clientKey := testCert(t, dir, "client", time.Now().Add(24*time.Hour), "gateway.edge")
	clientCert2, clientKey2 := testCert(t, dir, "client2", time.Now().Add(24*time.Hour), "gateway.edge")
	// The endpoint trusts both client certificates (they are self-signed).
	bundle := dir + "/clients.pem"
	b1, _ := os.ReadFile(clientCert)
	b2, _ := os.ReadFile(clientCert2)
	if err := os.WriteFile(bundle, append(b1, b2...), 0o600); err != nil {
		t.Fatal(err)
	}

	orders := startHTTPSUpstream(t, "orders-tls", srvCert, srvKey, "")
	billing := startHTTPSUpstream(t, "billing-mtls", srvCert, srvKey, bundle)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	kp, _ := tls.LoadX509KeyPair(srvCert, srvKey)
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{kp}})))
	gr := &greeter{name: "tls-greeter"}
	testgrpc.RegisterTestServiceServer(gs, gr)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	for _, args := range [][]string{
		{"secret", "create", "ca", "orders-ca", "--ca", srvCert},
		{"secret", "create", "tls", "gateway-client", "--cert", clientCert, "--key", clientKey, "--ca", srvCert},
	} {
		if out, err := runOn(t, server, "", args...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	// A CA secret is checked at create like a TLS one.
	if out, err := runOn(t, server, "", "secret", "create", "ca", "junk", "--ca", srvKey); err == nil || !strings.Contains(out+err.Error(), "PEM block 1 is a \"EC PRIVATE KEY\", want CERTIFICATE (field ca)") {
		t.Errorf("a key as a CA: %v\n%s", err, out)
	}
	if out, err := runOn(t, server, fmt.Sprintf(upstreamTLSConfig, ""), "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("config apply: %v\n%s", err, out)
	}

	// Registered after the DestinationRules: the gateway never calls them
	// in plaintext.
	for _, in := range []client.Instance{
		{ID: "o1", Service: "orders", Host: "127.0.0.1", Port: orders.port},
		{ID: "b1", Service: "billing", Host: "127.0.0.1", Port: billing.port},
		{ID: "g1", Service: "greeter", Host: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port, Protocol: "grpc"},
	} {
		if _, err := api.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	waitTrue(t, 20*time.Second, func() bool {
		body, code := tget(t, proxy, "orders", "/", nil)
		return code == 200 && body == "orders-tls client=-"
	})
	first := serialOf(t, clientCert)
	waitTrue(t, 20*time.Second, func() bool {
		body, code := tget(t, proxy, "billing", "/", nil)
		return code == 200 && body == "billing-mtls client="+first
	})

	// HTTP/2 over TLS: a grpc-go unary call through the gateway.
	cc, err := grpc.NewClient("passthrough:///"+proxy, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("greeter"))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	gc := testgrpc.NewTestServiceClient(cc)
	var res *testgrpc.SimpleResponse
	waitTrue(t, 20*time.Second, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		res, err = gc.UnaryCall(cctx, &testgrpc.SimpleRequest{})
		return err == nil
	})
	if string(res.GetPayload().GetBody()) != "tls-greeter" {
		t.Fatalf("gRPC over TLS: %q", res.GetPayload().GetBody())
	}

	// Rotation of the client certificate mid-traffic: no call fails.
	var calls, failed atomic.Int64
	var lastErr atomic.Value
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 20000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			req, _ := http.NewRequest("GET", "http://"+proxy+"/", nil)
			req.Host = "billing"
			resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
			calls.Add(1)
			if err != nil {
				failed.Add(1)
				lastErr.Store(err.Error())
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				failed.Add(1)
				lastErr.Store(fmt.Sprintf("%d %s", resp.StatusCode, b))
			}
		}
	}()
	waitTrue(t, 20*time.Second, func() bool { return calls.Load() > 30 })
	if out, err := runOn(t, server, "", "secret", "create", "tls", "gateway-client", "--cert", clientCert2, "--key", clientKey2, "--ca", srvCert, "--replace"); err != nil {
		t.Fatalf("rotate: %v\n%s", err, out)
	}
	second := serialOf(t, clientCert2)
	waitTrue(t, 20*time.Second, func() bool {
		body, code := tget(t, proxy, "billing", "/", nil)
		return code == 200 && body == "billing-mtls client="+second
	})
	n := calls.Load()
	waitTrue(t, 20*time.Second, func() bool { return calls.Load() > n+30 })
	close(stop)
	<-done
	if failed.Load() != 0 {
		t.Errorf("%d of %d calls failed across the rotation, last: %v", failed.Load(), calls.Load(), lastErr.Load())
	}

	// A subject alt name the certificate does not have: refused.
	if out, err := runOn(t, server, fmt.Sprintf(upstreamTLSConfig, ", subjectAltNames: [payments.internal]"), "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("config apply: %v\n%s", err, out)
	}
	var body string
	var code int
	waitTrue(t, 20*time.Second, func() bool { body, code = tget(t, proxy, "orders", "/x", nil); return code == 503 })
	if !strings.Contains(body, "tls_failure") || !strings.Contains(body, "subject alt name mismatch") {
		t.Errorf("SAN mismatch: %d %s", code, body)
	}
	// The wrong CA: certificate verify failed.
	if out, err := runOn(t, server, fmt.Sprintf(upstreamTLSConfig, ""), "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("config apply: %v\n%s", err, out)
	}
	if out, err := runOn(t, server, "", "secret", "create", "ca", "orders-ca", "--ca", otherCA, "--replace"); err != nil {
		t.Fatalf("secret replace: %v\n%s", err, out)
	}
	waitTrue(t, 20*time.Second, func() bool {
		body, code = tget(t, proxy, "orders", "/y", nil)
		return code == 503 && strings.Contains(body, "certificate verify failed")
	})
	if !strings.Contains(body, "tls_failure") || !strings.Contains(body, "x509: certificate signed by unknown authority") {
		t.Errorf("wrong CA: %d %s", code, body)
	}
}
