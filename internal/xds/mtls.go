package xds

import (
	"regexp"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1"
)

// The mesh's mutual TLS as clients are told it (docs/security.md,
// "Mutual TLS over xDS"). Certificates and roots are never sent over xDS
// to proxyless clients: a cluster names the certificate provider instance
// of the client's bootstrap that holds them (gRFC A29), which
// "sextant identity agent" keeps fresh.
const (
	// CertificateProvider is the instance name a client's xDS bootstrap
	// gives its certificate provider (grpc-go: "certificate_providers").
	CertificateProvider = "sextant"
	// CertificateName and RootCertName are the names asked of it.
	CertificateName = "default"
	RootCertName    = "ROOTCA"
	// TLSTransportSocket is Envoy's name of the TLS transport socket.
	TLSTransportSocket = "envoy.transport_sockets.tls"
)

// clusterTLS is the transport socket of a cluster of the service in
// namespace ns under tls (ISTIO_MUTUAL): the client's certificate and the
// mesh's roots from the certificate provider, and the server's identity
// checked against subjectAltNames, or, when none are given, any service
// account of the service's namespace.
func clusterTLS(ns string, tls *networking.ClientTLSSettings) *corev3.TransportSocket {
	var sans []*matcherv3.StringMatcher
	for _, san := range tls.SubjectAltNames {
		sans = append(sans, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: san}})
	}
	if len(sans) == 0 {
		// The trust domain is checked by the chain (only the mesh's roots
		// are trusted); the path by the matcher.
		sans = append(sans, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{
			SafeRegex: &matcherv3.RegexMatcher{Regex: `^spiffe://[^/]+/ns/` + regexp.QuoteMeta(ns) + `/sa/[^/]+$`}}})
	}
	ctx := &tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{InstanceName: CertificateProvider, CertificateName: CertificateName},
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			CaCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{InstanceName: CertificateProvider, CertificateName: RootCertName},
			// The field grpc-go reads (Envoy reads it too, deprecated for
			// match_typed_subject_alt_names, which grpc-go ignores).
			MatchSubjectAltNames: sans,
		}},
		AlpnProtocols: []string{"h2"},
	}}
	a, _ := anypb.New(ctx)
	return &corev3.TransportSocket{Name: TLSTransportSocket, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: a}}
}

// setClusterTLS adds the transport socket of tls to c, a cluster named by
// ClusterName; credentials (SIMPLE, MUTUAL) are secrets of namespace
// credNS; h2: its endpoints speak HTTP/2 (ALPN h2).
func setClusterTLS(c *clusterv3.Cluster, tls *networking.ClientTLSSettings, credNS string, h2 bool) {
	ns, _, _ := strings.Cut(c.Name, "/")
	switch tls.GetMode() {
	case networking.ClientTLSSettings_ISTIO_MUTUAL:
		c.TransportSocket = clusterTLS(ns, tls)
	case networking.ClientTLSSettings_SIMPLE, networking.ClientTLSSettings_MUTUAL:
		if credNS == "" {
			credNS = ns
		}
		c.TransportSocket = credentialTLS(credNS, tls, h2)
	}
}
