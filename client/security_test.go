package client

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// TestTLSAndTokens runs the client over TLS and mutual TLS against the real
// stack with ACLs on, with certificates made in the test.
func TestTLSAndTokens(t *testing.T) {
	certs := apitest.NewCerts(t)
	ctx := context.Background()
	for _, mutual := range []bool{false, true} {
		name := "tls"
		if mutual {
			name = "mtls"
		}
		t.Run(name, func(t *testing.T) {
			srv := apitest.StartWith(t, apitest.Options{ACL: acl.Options{Enabled: true}, TLS: certs.ServerTLS(mutual)})
			if !strings.HasPrefix(srv.URL, "https://") {
				t.Fatalf("server URL %s", srv.URL)
			}
			opts := []Option{WithCAFile(certs.CAFile)}
			if mutual {
				opts = []Option{WithTLSConfig(certs.ClientTLS(true))}
			}
			anon, err := New(srv.URL, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer anon.HTTPClient().CloseIdleConnections()
			var boot struct {
				Secret string `json:"secret"`
			}
			if err := anon.Call(ctx, http.MethodPost, "/v1/acl/bootstrap", nil, &boot); err != nil {
				t.Fatal(err)
			}
			if _, err := anon.Namespaces(ctx); !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("without a token: %v, want ErrUnauthenticated", err)
			}
			c, err := New(srv.URL, append(opts, WithToken(boot.Secret))...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.HTTPClient().CloseIdleConnections()
			if _, err := c.Register(ctx, Instance{Namespace: "prod", Service: "orders", Host: "10.0.0.1", Port: 80}); err != nil {
				t.Fatal(err)
			}
			q, err := c.Query(ctx, "prod", "orders", QueryOptions{})
			if err != nil || len(q.Instances) != 1 {
				t.Fatalf("query over TLS: %v %+v", err, q)
			}
			if _, err := New(srv.URL, WithToken(boot.Secret), WithCAFile(certs.ServerKey)); err == nil {
				t.Fatal("a CA file without a certificate was accepted")
			}
			// Without the CA the server is not trusted; without the
			// client certificate a mutual TLS server refuses.
			plain, _ := New(srv.URL, WithToken(boot.Secret))
			if _, err := plain.Namespaces(ctx); err == nil || !strings.Contains(err.Error(), "certificate") {
				t.Fatalf("without the CA: %v", err)
			} else if strings.Contains(err.Error(), boot.Secret) {
				t.Fatal("the error holds the token")
			}
			if mutual {
				nocert, _ := New(srv.URL, WithCAFile(certs.CAFile), WithToken(boot.Secret))
				if _, err := nocert.Namespaces(ctx); err == nil {
					t.Fatal("a mutual TLS server answered a client without a certificate")
				}
			}
		})
	}
}
