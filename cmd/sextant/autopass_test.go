package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// autoPassthroughGateway is Istio's multicluster/expose-services.yaml on
// the test's TLS port, with a DestinationRule giving vault two subsets.
const autoPassthroughGateway = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: cross-network-gateway}
spec:
  selector: {istio: eastwestgateway}
  servers:
  - port: {number: %[1]d, name: tls, protocol: TLS}
    tls: {mode: AUTO_PASSTHROUGH}
    hosts: ["*.local"]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: vault}
spec:
  host: vault
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
`

// TestIstioGatewayAutoPassthrough: an Istio Gateway server in tls.mode
// AUTO_PASSTHROUGH makes a real gateway forward a TLS connection whose
// server name is Istio's outbound_.PORT_.SUBSET_.HOST to that service's
// (or subset's) endpoints unopened, with no VirtualService: the client
// sees the endpoint's own certificate. Server names of another form, of a
// host outside the server's hosts, or of a port the service does not
// listen on are refused (the connection is closed).
func TestIstioGatewayAutoPassthrough(t *testing.T) {
	tlsAddr := freeAddr(t)
	api, _, _, server := startMeshTLS(t, tlsAddr)
	ctx := context.Background()
	dir := t.TempDir()
	// Two endpoints of one service on one port (two loopback addresses),
	// each with its own certificate, which the gateway never has.
	ln1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln1.Addr().(*net.TCPAddr).Port
	ln2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.2:%d", port))
	if err != nil {
		ln1.Close()
		t.Skipf("a second loopback address: %v", err)
	}
	certs := map[string]string{}
	for i, ln := range []net.Listener{ln1, ln2} {
		name := fmt.Sprintf("vault-%d", i+1)
		cf, kf := testCert(t, dir, name, time.Now().Add(24*time.Hour), name+".internal")
		pem, err := os.ReadFile(cf)
		if err != nil {
			t.Fatal(err)
		}
		certs[name] = string(pem)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, name) })}
		go func() { _ = srv.ServeTLS(ln, cf, kf) }()
		t.Cleanup(func() { srv.Close() })
	}
	if _, err := api.Register(ctx,
		client.Instance{ID: "vault-1", Service: "vault", Host: "127.0.0.1", Port: port, Version: "v1"},
		client.Instance{ID: "vault-2", Service: "vault", Host: "127.0.0.2", Port: port, Version: "v2"}); err != nil {
		t.Fatal(err)
	}
	_, tlsPort, _ := net.SplitHostPort(tlsAddr)
	var tp int
	fmt.Sscan(tlsPort, &tp)
	if out, err := runOn(t, server, fmt.Sprintf(autoPassthroughGateway, tp), "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("config apply: %v\n%s", err, out)
	}
	// call connects with server name sni and answers which endpoint's
	// certificate the handshake showed and what it answered over it.
	call := func(sni string) (string, error) {
		d := &net.Dialer{Timeout: 10 * time.Second}
		c, err := tls.DialWithDialer(d, "tcp", "127.0.0.1:"+tlsPort, &tls.Config{ServerName: sni,
			// The endpoint's certificate is not for the server name: it
			// is checked below against the endpoints' own.
			InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		peer := c.ConnectionState().PeerCertificates[0]
		cert := ""
		for name := range certs {
			if peer.Subject.CommonName == name+".internal" || strings.Contains(strings.Join(peer.DNSNames, ","), name+".internal") {
				cert = name
			}
		}
		if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: vault\r\nConnection: close\r\n\r\n"); err != nil {
			return "", err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body := make([]byte, 64)
		n, _ := resp.Body.Read(body)
		return cert + " " + string(body[:n]), nil
	}
	host := "vault.default.svc.cluster.local"
	whole := fmt.Sprintf("outbound_.%d_._.%s", port, host)
	var out string
	waitTrue(t, 20*time.Second, func() bool {
		out, err = call(whole)
		return err == nil && (out == "vault-1 vault-1" || out == "vault-2 vault-2")
	})
	// A subset's name reaches only its endpoint, each time.
	for _, v := range []string{"1", "2"} {
		sni := fmt.Sprintf("outbound_.%d_.v%s_.%s", port, v, host)
		waitTrue(t, 20*time.Second, func() bool {
			out, err = call(sni)
			return err == nil && out == "vault-"+v+" vault-"+v
		})
		for range 5 {
			if out, err := call(sni); err != nil || out != "vault-"+v+" vault-"+v {
				t.Errorf("%s: %q, %v", sni, out, err)
			}
		}
	}
	// Refused: not Istio's form, a host outside "*.local", a port the
	// service does not listen on, an unknown subset, no server name.
	for _, sni := range []string{"vault.default.svc.cluster.local", fmt.Sprintf("outbound_.%d_._.vault.default", port),
		fmt.Sprintf("outbound_.%d_._.vault.default.svc.cluster.local", port+1), fmt.Sprintf("outbound_.%d_.v3_.%s", port, host), ""} {
		if out, err := call(sni); err == nil {
			t.Errorf("server name %q: answered %q; want the connection refused", sni, out)
		}
	}
	// A service registered after the Gateway is exposed once its instance
	// is (the publisher follows the registry's ports, no config change).
	if _, err := api.Register(ctx, client.Instance{ID: "vault-1-alias", Service: "vault-alias", Host: "127.0.0.1", Port: port}); err != nil {
		t.Fatal(err)
	}
	waitTrue(t, 20*time.Second, func() bool {
		out, err = call(fmt.Sprintf("outbound_.%d_._.vault-alias.default.svc.cluster.local", port))
		return err == nil && out == "vault-1 vault-1"
	})
}
