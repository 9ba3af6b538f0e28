package gateway

import (
	"slices"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/secret/secrettest"
	"github.com/sextant-mesh/sextant/internal/xds"
	networking "istio.io/api/networking/v1"
)

func upstreamSocket(t *testing.T, u *tlsv3.UpstreamTlsContext) *core.TransportSocket {
	a, err := anypb.New(u)
	if err != nil {
		t.Fatal(err)
	}
	return &core.TransportSocket{Name: tlsSocketName, ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: a}}
}

var testADS = &core.ConfigSource{ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}}}

// TestUpstreamTLSTranslation: what an UpstreamTlsContext becomes, and what
// is refused naming the field.
func TestUpstreamTLSTranslation(t *testing.T) {
	certPEM, keyPEM := secrettest.Pair(t, time.Now().Add(time.Hour), "a.test")
	inline := func(b []byte) *core.DataSource {
		return &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: b}}
	}
	ok := &tlsv3.UpstreamTlsContext{Sni: "a.test", CommonTlsContext: &tlsv3.CommonTlsContext{
		AlpnProtocols:   []string{"istio-peer-exchange", "h2", "http/1.1"},
		TlsParams:       &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_3},
		TlsCertificates: []*tlsv3.TlsCertificate{{CertificateChain: inline(certPEM), PrivateKey: inline(keyPEM)}},
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: inline(certPEM),
			MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{SanType: tlsv3.SubjectAltNameMatcher_URI,
				Matcher: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: "spiffe://td/ns/a/"}}}}}}}}
	s, err := decodeUpstreamTLS("transport_socket", upstreamSocket(t, ok))
	if err != nil {
		t.Fatal(err)
	}
	if s.sni != "a.test" || !slices.Equal(s.alpn, []string{"h2", "http/1.1"}) || s.minVer != 0x0304 || len(s.certs) != 1 || s.ca == nil || !s.verify || len(s.sans) != 1 {
		t.Fatalf("decoded %+v", s)
	}
	cl := &cluster.Cluster{Name: "c", ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_STATIC}, TransportSocket: upstreamSocket(t, ok)}
	if cs, err := decodeCluster(cl); err != nil || strings.Contains(protojson.Format(cs.raw), "PRIVATE KEY") || !strings.Contains(protojson.Format(cs.raw), "[redacted]") {
		t.Fatalf("an inline client key is shown in /v1/config: %v", err)
	}
	conf, why := s.config(nil, false)
	if why != "" || !slices.Equal(conf.NextProtos, []string{"http/1.1"}) || conf.ServerName != "a.test" || conf.VerifyConnection == nil {
		t.Fatalf("config: %q %+v", why, conf)
	}
	if conf, _ := s.config(nil, true); !slices.Equal(conf.NextProtos, []string{"h2"}) {
		t.Fatalf("an HTTP/2 cluster offers %v", conf.NextProtos)
	}

	// Sextant's ISTIO_MUTUAL cluster: certificate provider instances read as
	// Istio's SDS names.
	c := xds.Cluster("default/orders/v1", config.Policy{TLS: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL}})
	spec, err := decodeCluster(c)
	if err != nil || spec.tls == nil {
		t.Fatalf("ISTIO_MUTUAL cluster: %v %+v", err, spec)
	}
	if got := spec.tls.secrets(); len(got) != 0 || !slices.Equal(spec.tls.certSecrets, []string{"provider:default"}) || spec.tls.caSecret != "provider:ROOTCA" {
		t.Fatalf("ISTIO_MUTUAL: SDS secrets %v, identity %v %q", got, spec.tls.certSecrets, spec.tls.caSecret)
	}
	if _, why := spec.tls.config(map[string]any{}, true); !strings.Contains(why, "the gateway's identity (default) not set") {
		t.Fatalf("not ready: %q", why)
	}

	for _, tc := range []struct {
		mod  func(*tlsv3.UpstreamTlsContext)
		want string
	}{
		{func(u *tlsv3.UpstreamTlsContext) {
			u.CommonTlsContext.TlsParams = &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_3, TlsMaximumProtocolVersion: tlsv3.TlsParameters_TLSv1_2}
		}, "tls_params"},
		{func(u *tlsv3.UpstreamTlsContext) {
			u.CommonTlsContext.TlsParams = &tlsv3.TlsParameters{CipherSuites: []string{"x"}}
		}, "cipher_suites"},
		{func(u *tlsv3.UpstreamTlsContext) {
			u.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{SanType: tlsv3.SubjectAltNameMatcher_DNS,
					Matcher: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "a"}}}}}}
		}, "without trusted_ca"},
		{func(u *tlsv3.UpstreamTlsContext) {
			u.CommonTlsContext.GetValidationContext().MatchTypedSubjectAltNames[0].SanType = tlsv3.SubjectAltNameMatcher_OTHER_NAME
		}, "san_type"},
		{func(u *tlsv3.UpstreamTlsContext) {
			u.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{
				ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: "ca"}}
		}, "sds_config"},
		{func(u *tlsv3.UpstreamTlsContext) {
			u.CommonTlsContext.GetValidationContext().TrustedCa = inline([]byte("junk"))
		}, "no PEM certificate"},
		{func(u *tlsv3.UpstreamTlsContext) {
			u.CommonTlsContext.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{{Name: "c", SdsConfig: testADS}}
		}, "at most one"},
		{func(u *tlsv3.UpstreamTlsContext) { u.AllowRenegotiation = true }, "allow_renegotiation"},
		{func(u *tlsv3.UpstreamTlsContext) {
			u.CommonTlsContext.GetValidationContext().AllowExpiredCertificate = true
		}, "allow_expired_certificate"},
	} {
		u := proto.Clone(ok).(*tlsv3.UpstreamTlsContext)
		tc.mod(u)
		if _, err := decodeUpstreamTLS("transport_socket", upstreamSocket(t, u)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error naming %q, got %v", tc.want, err)
		}
	}
}

// TestControlPlaneUpstreamTLS: the gateway reads what Sextant's control
// plane publishes for DestinationRule tls SIMPLE and MUTUAL.
func TestControlPlaneUpstreamTLS(t *testing.T) {
	for _, tc := range []struct {
		tls     *networking.ClientTLSSettings
		http2   bool
		secrets []string
		sans    int
		verify  bool
		alpn    string
	}{
		{&networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE, CredentialName: "orders-ca", Sni: "orders.internal"}, false,
			[]string{"shop/orders-ca-cacert"}, 1, true, "http/1.1"},
		{&networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_MUTUAL, CredentialName: "client",
			SubjectAltNames: []string{"spiffe://td/ns/shop/sa/billing", "billing.internal"}}, true,
			[]string{"shop/client", "shop/client-cacert"}, 2, true, "h2"},
		{&networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE, InsecureSkipVerify: wrapperspb.Bool(true)}, false,
			nil, 0, false, "http/1.1"},
		{&networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE}, false, nil, 0, true, "http/1.1"}, // system roots
	} {
		spec, err := decodeCluster(xds.Cluster("default/orders", config.Policy{TLS: tc.tls, TLSNamespace: "shop", HTTP2: tc.http2}))
		if err != nil || spec.tls == nil || spec.unsupported != "" {
			t.Fatalf("%v: %v %+v", tc.tls, err, spec)
		}
		if got := spec.tls.secrets(); !slices.Equal(got, tc.secrets) || len(spec.tls.sans) != tc.sans || spec.tls.verify != tc.verify {
			t.Errorf("%v: secrets %v sans %d verify %v", tc.tls, got, len(spec.tls.sans), spec.tls.verify)
		}
		if spec.tls.sni != tc.tls.Sni || spec.h2c != tc.http2 {
			t.Errorf("%v: sni %q h2 %v", tc.tls, spec.tls.sni, spec.h2c)
		}
		if len(spec.tls.sans) == 2 && (spec.tls.sans[0].typ != "URI" || spec.tls.sans[1].typ != "DNS") {
			t.Errorf("SAN types %q %q", spec.tls.sans[0].typ, spec.tls.sans[1].typ)
		}
		conf, _ := spec.tls.config(map[string]any{}, spec.h2c)
		if conf != nil && conf.NextProtos[0] != tc.alpn {
			t.Errorf("%v: ALPN %v", tc.tls, conf.NextProtos)
		}
	}
}
