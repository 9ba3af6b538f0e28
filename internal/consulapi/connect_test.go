package consulapi_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/ca"
	"github.com/sextant-mesh/sextant/internal/consulapi"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// oneCA is a real authority that never rotates (the server's is
// identity.Service, which needs the write engine's trackers).
type oneCA struct{ a *ca.Authority }

func (c oneCA) Authority(context.Context) (*ca.Authority, error) { return c.a, nil }
func (oneCA) Revision() int64                                    { return 7 }

// TestConnectCA: hashicorp's client reads the CA roots (agent and
// connect endpoints alike) and a service's leaf: the leaf names Consul's
// service URI, its key matches, it chains to the roots, the same leaf is
// handed out again, a blocking read with its index waits, and signing
// takes identity:write on the served namespace.
func TestConnectCA(t *testing.T) {
	auth, err := ca.Generate(ca.Options{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	s := apitest.StartWith(t, apitest.Options{ACL: acl.Options{Enabled: true}})
	api, err := consulapi.New(s.Registry, consulapi.Options{Namespace: "shop", ACL: s.Guard, Addr: "127.0.0.1:8300", Version: "test", CA: oneCA{auth}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		api.Shutdown()
		srv.CloseClientConnections()
		srv.Close()
	})
	st := &stack{Server: s, consul: srv, api: api}
	admin := st.do(t, "POST", "/v1/acl/bootstrap", `{}`, "")
	token := func(name, rule string) string {
		st.do(t, "POST", "/v1/acl/policies", `{"name":"`+name+`","rules":[`+rule+`]}`, admin)
		return st.do(t, "POST", "/v1/acl/tokens", `{"policies":["`+name+`"]}`, admin)
	}
	signer := token("signer", `{"namespace":"shop","identity":"write"}`)
	reader := token("reader", `{"namespace":"shop","instances":"write"}`)

	c := st.client(t, reader)
	roots, meta, err := c.Agent().ConnectCARoots(nil)
	if err != nil || len(roots.Roots) != 1 || roots.ActiveRootID != roots.Roots[0].ID || !roots.Roots[0].Active || meta.LastIndex != 7 {
		t.Fatalf("agent roots: %+v %+v %v", roots, meta, err)
	}
	if again, _, err := c.Connect().CARoots(nil); err != nil || again.ActiveRootID != roots.ActiveRootID || again.TrustDomain != "cluster.local" {
		t.Fatalf("connect roots: %+v %v", again, err)
	}
	if _, _, err := c.Agent().ConnectCALeaf("web", nil); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("leaf without identity:write: %v, want 403", err)
	}

	c = st.client(t, signer)
	leaf, meta, err := c.Agent().ConnectCALeaf("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Service != "web" || leaf.ServiceURI != "spiffe://cluster.local/ns/shop/dc/dc1/svc/web" || meta.LastIndex != leaf.ModifyIndex {
		t.Fatalf("leaf: %+v, index %d", leaf, meta.LastIndex)
	}
	pair, err := tls.X509KeyPair([]byte(leaf.CertPEM), []byte(leaf.PrivateKeyPEM))
	if err != nil {
		t.Fatalf("the leaf's key does not match it: %v", err)
	}
	cert, _ := x509.ParseCertificate(pair.Certificate[0])
	pool := x509.NewCertPool()
	blk, _ := pem.Decode([]byte(roots.Roots[0].RootCertPEM))
	root, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool.AddCert(root)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("the leaf does not chain to the roots answered: %v", err)
	}
	start := time.Now()
	again, meta2, err := c.Agent().ConnectCALeaf("web", &capi.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: 200 * time.Millisecond})
	if err != nil || again.SerialNumber != leaf.SerialNumber || meta2.LastIndex != meta.LastIndex || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("blocking leaf read: serial %q (was %q), index %d (was %d), after %v, %v", again.SerialNumber, leaf.SerialNumber, meta2.LastIndex, meta.LastIndex, time.Since(start), err)
	}
	if _, _, err := c.Agent().ConnectCALeaf("Web!", nil); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("leaf of a bad name: %v, want 400", err)
	}
}

// TestConnectOff: without a CA the endpoints answer Consul's words.
func TestConnectOff(t *testing.T) {
	s := newStack(t, acl.Options{}, "default")
	if _, _, err := s.client(t, "").Agent().ConnectCARoots(nil); err == nil || !strings.Contains(err.Error(), "Connect must be enabled") {
		t.Fatalf("roots without a CA: %v", err)
	}
}

// TestConnectViews: catalog/connect and health/connect list a service's
// connect-proxies and Connect-native instances, and nothing else.
func TestConnectViews(t *testing.T) {
	s := newStack(t, acl.Options{}, "default")
	c := s.client(t, "")
	ag := c.Agent()
	for _, reg := range []*capi.AgentServiceRegistration{
		{ID: "web-1", Name: "web", Address: "10.0.0.1", Port: 80},
		{ID: "web-native", Name: "web", Address: "10.0.0.2", Port: 443, Connect: &capi.AgentServiceConnect{Native: true}},
		{ID: "web-proxy", Name: "web-sidecar-proxy", Kind: capi.ServiceKindConnectProxy, Address: "10.0.0.1", Port: 21000,
			Proxy: &capi.AgentServiceConnectProxyConfig{DestinationServiceName: "web", DestinationServiceID: "web-1"}},
		{ID: "db-proxy", Name: "db-sidecar-proxy", Kind: capi.ServiceKindConnectProxy, Address: "10.0.0.3", Port: 21001,
			Proxy: &capi.AgentServiceConnectProxyConfig{DestinationServiceName: "db"}},
	} {
		if err := ag.ServiceRegister(reg); err != nil {
			t.Fatal(err)
		}
	}
	list, meta, err := c.Catalog().Connect("web", "", nil)
	if err != nil || meta.LastIndex == 0 {
		t.Fatal(err, meta)
	}
	got := map[string]bool{}
	for _, cs := range list {
		got[cs.ServiceID] = true
	}
	if len(got) != 2 || !got["web-native"] || !got["web-proxy"] {
		t.Fatalf("catalog/connect/web: %v, want web-native and web-proxy", got)
	}
	native, _, err := c.Catalog().Connect("web", "", &capi.QueryOptions{Filter: "ServiceConnect.Native == true"})
	if err != nil || len(native) != 1 || native[0].ServiceID != "web-native" {
		t.Fatalf("catalog/connect/web native only: %+v %v", native, err)
	}
	entries, _, err := c.Health().Connect("db", "", false, nil)
	if err != nil || len(entries) != 1 || entries[0].Service.ID != "db-proxy" || entries[0].Service.Proxy.DestinationServiceName != "db" {
		t.Fatalf("health/connect/db: %+v %v", entries, err)
	}
	if none, _, err := c.Health().Connect("nothing", "", false, nil); err != nil || len(none) != 0 {
		t.Fatalf("health/connect/nothing: %+v %v", none, err)
	}
}
