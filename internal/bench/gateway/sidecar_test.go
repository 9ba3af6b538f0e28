package gateway

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"testing"

	"github.com/sextant-mesh/sextant/internal/debian"
)

// TestNginxPairIsMutualTLS: the nginx pair the sidecar scenario measures
// against is what it says, two TLS proxies doing mutual TLS: a call
// through the client side is answered by the upstream, and the server side
// refuses a TLS client without a certificate.
func TestNginxPairIsMutualTLS(t *testing.T) {
	if _, err := debian.Ensure("nginx", "nginx"); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ServeUpstream(ctx, ln, 16) }()
	defer func() { cancel(); <-done }()
	var procs []*process
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	p, err := startNginxPair(ctx, t.TempDir(), ln.Addr().String(), &procs)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + p.client.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("through the pair: %d", resp.StatusCode)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} // no client certificate
	defer tr.CloseIdleConnections()
	resp, err = (&http.Client{Transport: tr}).Get("https://" + p.server.addr + "/")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("the server side served a client without a certificate")
		}
	}
}
