package gateway

import (
	"testing"
	"time"

	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"

	"github.com/sextant-mesh/sextant/internal/secret/secrettest"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// fuzzTLSSeeds are a TLS listener (SNI chains, SDS certificates, a CA for
// mutual TLS) and the secrets it names.
func fuzzTLSSeeds(t testing.TB) []proto.Message {
	certPEM, keyPEM := secrettest.Pair(t, time.Now().Add(time.Hour), "a.test")
	ads := &core.ConfigSource{ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}}}
	m, _ := anypb.New(&hcm.HttpConnectionManager{RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{RouteConfigName: "r", ConfigSource: ads}}})
	d, _ := anypb.New(&tlsv3.DownstreamTlsContext{RequireClientCertificate: wrapperspb.Bool(true), CommonTlsContext: &tlsv3.CommonTlsContext{
		AlpnProtocols:                  []string{"h2", "http/1.1"},
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: "a", SdsConfig: ads}},
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{
			ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: "a-cacert", SdsConfig: ads}},
	}})
	tp, _ := anypb.New(&tcpproxy.TcpProxy{IdleTimeout: durationpb.New(time.Minute), ClusterSpecifier: &tcpproxy.TcpProxy_WeightedClusters{
		WeightedClusters: &tcpproxy.TcpProxy_WeightedCluster{Clusters: []*tcpproxy.TcpProxy_WeightedCluster_ClusterWeight{{Name: "c", Weight: 1}}}}})
	u, _ := anypb.New(&tlsv3.UpstreamTlsContext{Sni: "a.test", CommonTlsContext: &tlsv3.CommonTlsContext{
		AlpnProtocols:                  []string{"h2"},
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: "a", SdsConfig: ads}},
		ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
			DefaultValidationContext: &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
				SanType: tlsv3.SubjectAltNameMatcher_URI, Matcher: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "spiffe://td/ns/a/sa/b"}}}}},
			ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: "a-cacert", SdsConfig: ads}}},
	}})
	mesh, _ := anypb.New(&tlsv3.DownstreamTlsContext{RequireClientCertificate: wrapperspb.Bool(true), CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{InstanceName: "sextant", CertificateName: "default"},
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			CaCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{InstanceName: "sextant", CertificateName: "ROOTCA"}}}}})
	return []proto.Message{
		// The mesh's mutual TLS on the gateway's identity (ISTIO_MUTUAL).
		&listener.Listener{Name: "m", FilterChains: []*listener.FilterChain{{
			Filters:         []*listener.Filter{{Name: hcmFilterName, ConfigType: &listener.Filter_TypedConfig{TypedConfig: m}}},
			TransportSocket: &core.TransportSocket{Name: tlsSocketName, ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: mesh}},
		}}},
		&cluster.Cluster{Name: "up", ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
			TransportSocket: &core.TransportSocket{Name: tlsSocketName, ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: u}}},
		&listener.Listener{Name: "l", FilterChains: []*listener.FilterChain{{
			FilterChainMatch: &listener.FilterChainMatch{ServerNames: []string{"a.test", "*.b.test"}},
			Filters:          []*listener.Filter{{Name: hcmFilterName, ConfigType: &listener.Filter_TypedConfig{TypedConfig: m}}},
			TransportSocket:  &core.TransportSocket{Name: tlsSocketName, ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: d}},
		}}},
		// A terminating chain and a passthrough one on one port.
		&listener.Listener{Name: "p", FilterChains: []*listener.FilterChain{{
			FilterChainMatch: &listener.FilterChainMatch{ServerNames: []string{"a.test"}},
			Filters:          []*listener.Filter{{Name: hcmFilterName, ConfigType: &listener.Filter_TypedConfig{TypedConfig: m}}},
			TransportSocket:  &core.TransportSocket{Name: tlsSocketName, ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: d}},
		}, {
			FilterChainMatch: &listener.FilterChainMatch{ServerNames: []string{"p.test"}, TransportProtocol: "tls"},
			Filters:          []*listener.Filter{{Name: tcpProxyFilterName, ConfigType: &listener.Filter_TypedConfig{TypedConfig: tp}}},
		}}},
		&tlsv3.Secret{Name: "a", Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: certPEM}},
			PrivateKey:       &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: keyPEM}}}}},
		&tlsv3.Secret{Name: "a-cacert", Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: string(certPEM)}}}}},
	}
}
