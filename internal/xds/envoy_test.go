package xds

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/netip"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1"
	security "istio.io/api/security/v1beta1"

	"github.com/sextant-mesh/sextant/internal/ca"
	"github.com/sextant-mesh/sextant/internal/config"
)

func TestNodeFlavour(t *testing.T) {
	md := func(kv ...string) *structpb.Struct {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		s, _ := structpb.NewStruct(m)
		return s
	}
	for _, c := range []struct {
		name string
		node *corev3.Node
		want Flavour
	}{
		{"empty", &corev3.Node{}, FlavourGRPC},
		{"grpc-go", &corev3.Node{Id: "web-1", UserAgentName: "gRPC Go", ClientFeatures: []string{"envoy.lb.does_not_support_overprovisioning", "xds.config.resource-in-sotw"}}, FlavourGRPC},
		{"sextant gateway", &corev3.Node{Id: "gw", UserAgentName: "sextant-gateway"}, FlavourGRPC},
		{"envoy", &corev3.Node{Id: "e", UserAgentName: "envoy"}, FlavourEnvoy},
		{"envoy by feature", &corev3.Node{Id: "e", ClientFeatures: []string{"envoy.lrs.supports_send_all_clusters"}}, FlavourEnvoy},
		{"istio sidecar id", &corev3.Node{Id: "sidecar~10.0.0.5~web-1.shop~shop.svc.cluster.local"}, FlavourEnvoy},
		{"istio router id", &corev3.Node{Id: "router~10.0.0.9~gw-1.edge~edge.svc.cluster.local"}, FlavourEnvoy},
		{"istio metadata", &corev3.Node{Id: "x", Metadata: md("ISTIO_VERSION", "1.24.0")}, FlavourEnvoy},
		{"istio proxyless", &corev3.Node{Id: "sidecar~10.0.0.5~web-1.shop~shop.svc.cluster.local", UserAgentName: "gRPC Go", Metadata: md("GENERATOR", "grpc")}, FlavourGRPC},
		{"envoy with a local agent", &corev3.Node{Id: "sidecar~10.0.0.5~web-1.shop~shop.svc.cluster.local", Metadata: md("SEXTANT_SDS", "agent")}, FlavourEnvoyAgent},
		{"grpc ignores the agent mark", &corev3.Node{Id: "web-1", UserAgentName: "gRPC Go", Metadata: md("SEXTANT_SDS", "agent")}, FlavourGRPC},
		{"generator beats envoy id", &corev3.Node{Id: "sidecar~10.0.0.5~web-1.shop~shop.svc.cluster.local", Metadata: md("GENERATOR", "grpc")}, FlavourGRPC},
	} {
		if got := NodeFlavour(c.node); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	n := &corev3.Node{Id: "sidecar~10.0.0.5~web-1.shop~shop.svc.cluster.local"}
	if ns, sa := NodeNamespace(n), NodeServiceAccount(n); ns != "shop" || sa != "default" {
		t.Errorf("namespace %q, service account %q", ns, sa)
	}
	n.Metadata = md("NAMESPACE", "orders", "SERVICE_ACCOUNT", "api")
	if ns, sa := NodeNamespace(n), NodeServiceAccount(n); ns != "orders" || sa != "api" {
		t.Errorf("with metadata: namespace %q, service account %q", ns, sa)
	}
}

func TestParseIstioNodeID(t *testing.T) {
	for id, want := range map[string]string{
		"sidecar~10.0.0.5~web-1.shop~shop.svc.cluster.local": "sidecar 10.0.0.5 web-1 shop",
		"router~10.0.0.9~gw~edge.svc.cluster.local":          "router 10.0.0.9 gw edge",
		"sidecar~~web-1.shop~shop.svc.cluster.local":         "",
		"ingress~10.0.0.5~web-1.shop~shop.svc.cluster.local": "",
		"sidecar~10.0.0.5~web-1.shop":                        "",
		"web-1":                                              "",
	} {
		n, ok := ParseIstioNodeID(id)
		got := ""
		if ok {
			got = n.Type + " " + n.IP + " " + n.Pod + " " + n.Namespace
		}
		if got != want {
			t.Errorf("%q: %q, want %q", id, got, want)
		}
	}
}

// FuzzParseIstioNodeID: node ids come from any client.
func FuzzParseIstioNodeID(f *testing.F) {
	f.Add("sidecar~10.0.0.5~web-1.shop~shop.svc.cluster.local")
	f.Add("router~~~")
	f.Fuzz(func(t *testing.T, id string) {
		n, ok := ParseIstioNodeID(id)
		if ok && (n.IP == "" || (n.Type != "sidecar" && n.Type != "router")) {
			t.Fatalf("%q: %+v", id, n)
		}
	})
}

// authorityIssuer issues from a real authority, as the server's
// identity service does (cmd/sextant's sdsIssuer).
type authorityIssuer struct{ a *ca.Authority }

func (i authorityIssuer) IssueWorkload(_ context.Context, ns, sa string) (WorkloadCert, error) {
	is, key, err := i.a.SignNewKey(ca.ID{TrustDomain: i.a.TrustDomain(), Namespace: ns, Account: sa}, 0)
	if err != nil {
		return WorkloadCert{}, err
	}
	return WorkloadCert{ID: is.ID.String(), ChainPEM: is.ChainPEM, KeyPEM: key, NotAfter: is.Leaf.NotAfter}, nil
}

func (i authorityIssuer) Bundle(context.Context) ([]byte, error) { return i.a.Bundle(), nil }

func sotwStream(t *testing.T, conn discoverygrpc.AggregatedDiscoveryServiceClient, ctx context.Context) discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	s, err := conn.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEnvoyNodeGetsSDSVariant: over one server and cache, an Envoy node
// (an Istio sidecar id) gets an ISTIO_MUTUAL cluster and a PERMISSIVE
// server listener naming the SDS secrets default and ROOTCA (no
// certificate provider instance, a trusted CA beside the SAN matchers, a
// TLS inspector before the chains matching transport_protocol), and those
// secrets: its identity's certificate, verified by the roots; a grpc-go
// node gets the same resources with gRFC A29 providers, unchanged.
func TestEnvoyNodeGetsSDSVariant(t *testing.T) {
	auth, err := ca.Generate(ca.Options{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	c := NewCache()
	mtls := config.Policy{TLS: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL}}
	if _, err := c.Apply(TypeCluster, []Resource{cluster("shop/orders", mtls), cluster("shop/plain", config.Policy{})}, nil, "1", time.Now()); err != nil {
		t.Fatal(err)
	}
	lname := ServerListenerPrefix + "10.0.0.5:8080"
	if _, err := c.Apply(TypeListener, []Resource{{Name: lname, Version: "1",
		Message: ServerListener(lname, netip.MustParseAddrPort("10.0.0.5:8080"), security.PeerAuthentication_MutualTLS_PERMISSIVE, nil)}}, nil, "1", time.Now()); err != nil {
		t.Fatal(err)
	}
	_, conn := startADSWith(t, c, ServerOptions{Workloads: authorityIssuer{auth}})
	client := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	md, _ := structpb.NewStruct(map[string]any{"SERVICE_ACCOUNT": "api"})
	envoy := &corev3.Node{Id: "sidecar~10.0.0.5~web-1.shop~shop.svc.cluster.local", UserAgentName: "envoy", Metadata: md}
	es := sotwStream(t, client, ctx)
	if err := es.Send(&discoveryv3.DiscoveryRequest{Node: envoy, TypeUrl: TypeCluster.URL()}); err != nil {
		t.Fatal(err)
	}
	r := recv(t, es)
	var sdsNames []string
	for _, a := range r.Resources {
		cl := &clusterv3.Cluster{}
		if err := a.UnmarshalTo(cl); err != nil {
			t.Fatal(err)
		}
		if cl.Name != "shop/orders" {
			if cl.TransportSocket != nil {
				t.Errorf("%s: a transport socket without TLS: %v", cl.Name, cl.TransportSocket)
			}
			continue
		}
		u := &tlsv3.UpstreamTlsContext{}
		if err := cl.TransportSocket.GetTypedConfig().UnmarshalTo(u); err != nil {
			t.Fatal(err)
		}
		cc := u.CommonTlsContext
		if cc.TlsCertificateProviderInstance != nil || len(cc.TlsCertificateSdsSecretConfigs) != 1 {
			t.Fatalf("envoy's cluster certificate: %v", cc)
		}
		comb := cc.GetCombinedValidationContext()
		if comb == nil || comb.DefaultValidationContext.GetCaCertificateProviderInstance() != nil || len(comb.DefaultValidationContext.GetMatchTypedSubjectAltNames()) != 1 {
			t.Fatalf("envoy's cluster validation: %v", cc.ValidationContextType)
		}
		sdsNames = append(sdsNames, cc.TlsCertificateSdsSecretConfigs[0].Name, comb.ValidationContextSdsSecretConfig.GetName())
	}
	if len(sdsNames) != 2 || sdsNames[0] != CertificateName || sdsNames[1] != RootCertName {
		t.Fatalf("SDS names of the cluster: %v", sdsNames)
	}
	es.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeCluster.URL(), VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})

	if err := es.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeListener.URL(), ResourceNames: []string{lname}}); err != nil {
		t.Fatal(err)
	}
	r = recv(t, es)
	l := &listenerv3.Listener{}
	if len(r.Resources) != 1 || r.Resources[0].UnmarshalTo(l) != nil {
		t.Fatalf("listener: %v", r)
	}
	if !HasTLSInspector(l) || !NeedsTLSInspector(l) {
		t.Errorf("PERMISSIVE listener for envoy without %s: %v", TLSInspector, l.ListenerFilters)
	}
	d := &tlsv3.DownstreamTlsContext{}
	if err := l.FilterChains[0].TransportSocket.GetTypedConfig().UnmarshalTo(d); err != nil {
		t.Fatal(err)
	}
	if d.CommonTlsContext.TlsCertificateProviderInstance != nil || d.CommonTlsContext.TlsCertificateSdsSecretConfigs[0].GetName() != CertificateName {
		t.Errorf("envoy's listener certificate: %v", d.CommonTlsContext)
	}
	es.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeListener.URL(), ResourceNames: []string{lname}, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})

	if err := es.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeSecret.URL(), ResourceNames: []string{CertificateName, RootCertName}}); err != nil {
		t.Fatal(err)
	}
	secrets := map[string]*tlsv3.Secret{}
	for len(secrets) < 2 {
		r = recv(t, es)
		for _, a := range r.Resources {
			s := &tlsv3.Secret{}
			if err := a.UnmarshalTo(s); err != nil {
				t.Fatal(err)
			}
			secrets[s.Name] = s
		}
		es.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeSecret.URL(), ResourceNames: []string{CertificateName, RootCertName}, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
	}
	tc := secrets[CertificateName].GetTlsCertificate()
	pair, err := tls.X509KeyPair(tc.GetCertificateChain().GetInlineBytes(), tc.GetPrivateKey().GetInlineBytes())
	if err != nil {
		t.Fatalf("default: %v", err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://cluster.local/ns/shop/sa/api" {
		t.Errorf("default's identity: %v", leaf.URIs)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(secrets[RootCertName].GetValidationContext().GetTrustedCa().GetInlineBytes()) {
		t.Fatal("ROOTCA holds no certificate")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("default does not verify with ROOTCA: %v", err)
	}

	// A grpc-go node of the same cache: A29, as before.
	gs := sotwStream(t, client, ctx)
	if err := gs.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "web-2", UserAgentName: "gRPC Go"}, TypeUrl: TypeCluster.URL(), ResourceNames: []string{"shop/orders"}}); err != nil {
		t.Fatal(err)
	}
	r = recv(t, gs)
	cl := &clusterv3.Cluster{}
	if err := r.Resources[0].UnmarshalTo(cl); err != nil {
		t.Fatal(err)
	}
	u := &tlsv3.UpstreamTlsContext{}
	if err := cl.TransportSocket.GetTypedConfig().UnmarshalTo(u); err != nil {
		t.Fatal(err)
	}
	if u.CommonTlsContext.TlsCertificateProviderInstance.GetInstanceName() != CertificateProvider ||
		u.CommonTlsContext.GetValidationContext().GetCaCertificateProviderInstance().GetCertificateName() != RootCertName {
		t.Errorf("grpc-go's cluster: %v", u.CommonTlsContext)
	}
	// A grpc-go node naming "default" gets nothing: no key for it.
	if err := gs.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeSecret.URL(), ResourceNames: []string{CertificateName}}); err != nil {
		t.Fatal(err)
	}
	if v, _, ok := c.GetFor(FlavourGRPC, TypeSecret, CertificateName); ok {
		t.Errorf("a secret published under the bare name default: %d bytes", len(v))
	}
}

// TestWorkloadCertNeedsIdentityGrant: with a SecretAccess, an Envoy node
// gets "default" only when its stream may have the identity
// (IdentityAccess); ROOTCA always.
func TestWorkloadCertNeedsIdentityGrant(t *testing.T) {
	auth, err := ca.Generate(ca.Options{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	g := &identityGrants{grants: grants{allowed: map[string]bool{}, changed: make(chan struct{})}}
	c := NewCache()
	_, conn := startADSWith(t, c, ServerOptions{Workloads: authorityIssuer{auth}, SecretAccess: func(context.Context) SecretAccess { return g }})
	client := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	es := sotwStream(t, client, ctx)
	node := &corev3.Node{Id: "sidecar~10.0.0.5~web-1.shop~shop.svc.cluster.local"}
	if err := es.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: TypeSecret.URL(), ResourceNames: []string{CertificateName, RootCertName}}); err != nil {
		t.Fatal(err)
	}
	r := recv(t, es)
	if got := names(t, r); len(got) != 1 || got[0] != RootCertName {
		t.Fatalf("without identity:write: %v", got)
	}
	if _, _, ok := c.Get(TypeSecret, certKey("shop", "default")); ok {
		t.Error("a certificate was issued for a stream that may not have it")
	}
	es.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeSecret.URL(), ResourceNames: []string{CertificateName, RootCertName}, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
	g.grantIdentity("shop")
	r = recv(t, es)
	if got := names(t, r); len(got) != 1 || got[0] != CertificateName {
		t.Fatalf("after the grant: %v", got)
	}
	// Reported once SendMsg has returned, which may be after the client
	// read it.
	deadline := time.Now().Add(10 * time.Second)
	for len(g.sentList()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if sent := g.sentList(); len(sent) != 1 || sent[0] != node.Id+":"+CertificateName {
		t.Errorf("audited sends: %v", sent)
	}
}

// identityGrants adds IdentityAccess to grants.
type identityGrants struct {
	grants
	identity map[string]bool
}

func (g *identityGrants) AllowsIdentity(ns string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.identity[ns]
}

func (g *identityGrants) grantIdentity(ns string) {
	g.mu.Lock()
	if g.identity == nil {
		g.identity = map[string]bool{}
	}
	g.identity[ns] = true
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
}

// TestAgentVariant: a node reading its certificate from a local agent gets
// clusters whose SDS secrets come by the bootstrap's cluster sds-grpc,
// not ADS; plain clusters have no variant at all.
func TestAgentVariant(t *testing.T) {
	mtls, err := Encode(Cluster("shop/orders", config.Policy{TLS: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL}}))
	if err != nil {
		t.Fatal(err)
	}
	b, ok, err := envoyVariant(FlavourEnvoyAgent, TypeCluster, mtls)
	if err != nil || !ok {
		t.Fatalf("no variant: %v", err)
	}
	c := &clusterv3.Cluster{}
	if err := proto.Unmarshal(b, c); err != nil {
		t.Fatal(err)
	}
	u := &tlsv3.UpstreamTlsContext{}
	if err := c.TransportSocket.GetTypedConfig().UnmarshalTo(u); err != nil {
		t.Fatal(err)
	}
	for _, sc := range []*tlsv3.SdsSecretConfig{u.CommonTlsContext.TlsCertificateSdsSecretConfigs[0], u.CommonTlsContext.GetCombinedValidationContext().GetValidationContextSdsSecretConfig()} {
		if got := sc.GetSdsConfig().GetApiConfigSource().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName(); got != AgentSDSCluster {
			t.Errorf("%s from %q, want %s", sc.GetName(), got, AgentSDSCluster)
		}
	}
	if c.Name != "shop/orders" || c.GetEdsClusterConfig().GetServiceName() != "shop/orders" {
		t.Errorf("the rest of the cluster changed: %v", c)
	}
	plain, _ := Encode(Cluster("shop/plain", config.Policy{}))
	if _, ok, _ := envoyVariant(FlavourEnvoyAgent, TypeCluster, plain); ok {
		t.Error("a plain cluster got a variant")
	}
}
