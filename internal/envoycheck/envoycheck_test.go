package envoycheck

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// TestCheckFindsWhatEnvoyRejects: each rule finds its violation, and the
// fixed resource passes. The ISTIO_MUTUAL cluster as proxyless gRPC gets
// it is what Envoy rejects ("SAN-based verification ... without trusted
// CA").
func TestCheckFindsWhatEnvoyRejects(t *testing.T) {
	s := NewServed()
	c := xds.Cluster("shop/orders", config.Policy{TLS: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL}})
	s.Add(c)
	l := &listenerv3.Listener{Name: "gw", Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8443}}}},
		FilterChains: []*listenerv3.FilterChain{{FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: []string{"a.example.com"}}, Filters: []*listenerv3.Filter{{Name: "x"}}}}}
	s.Add(l)
	got := strings.Join(Check(s, Rules{Envoy: true}), "\n")
	for _, want := range []string{
		"SAN matchers without a trusted CA",
		"certificate provider instance",
		`endpoints "shop/orders" are named by an EDS cluster but not served`,
		`listener "gw" matches server_names`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no violation %q in:\n%s", want, got)
		}
	}
	// For proxyless gRPC the providers are right; the rest still counts.
	grpc := strings.Join(Check(s, Rules{}), "\n")
	if strings.Contains(grpc, "trusted CA") || !strings.Contains(grpc, "server_names") {
		t.Errorf("proxyless rules:\n%s", grpc)
	}

	// Trusted CA by SDS: the SAN rule holds once the secret is served.
	up := &tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: "default"}},
		ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
			DefaultValidationContext: &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{SanType: tlsv3.SubjectAltNameMatcher_URI,
				Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "spiffe://cluster.local/ns/shop/sa/orders"}}}}},
			ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: "ROOTCA"}}}}}
	a, _ := anypb.New(up)
	c.TransportSocket = &corev3.TransportSocket{Name: xds.TLSTransportSocket, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: a}}
	got = strings.Join(Check(s, Rules{Envoy: true}), "\n")
	if !strings.Contains(got, `secret "ROOTCA" is named (SDS) but not served`) || !strings.Contains(got, "SAN matchers without a trusted CA") {
		t.Errorf("without ROOTCA served:\n%s", got)
	}
	s.Add(&tlsv3.Secret{Name: "ROOTCA", Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
		TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: []byte("roots")}}}}})
	s.Add(&tlsv3.Secret{Name: "default", Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{}}})
	if got := strings.Join(Check(s, Rules{Envoy: true}), "\n"); strings.Contains(got, "trusted CA") || strings.Contains(got, "SDS") {
		t.Errorf("with ROOTCA served:\n%s", got)
	}
}
