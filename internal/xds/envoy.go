package xds

import (
	"bytes"
	"fmt"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// The Envoy variant of a resource. The translators write the mesh's mutual
// TLS as proxyless gRPC reads it: certificate provider instances (gRFC A29),
// which Envoy does not implement (it rejects an ISTIO_MUTUAL cluster: "SAN-
// based verification of peer certificates without trusted CA is insecure",
// and a listener gets no certificate). Envoy reads them by SDS, under
// Istio's names, on the ADS stream: the workload's certificate and key
// "default" and the roots "ROOTCA" (workload.go serves them). The cache
// makes the variant from the encoding (Apply), once per version, so every
// publisher (the push engine, the Gateways' publisher) gets it for free.

// TLSInspector is the listener filter that reads a connection's TLS
// ClientHello (SNI, ALPN) before a filter chain is chosen: Envoy matches a
// chain's server_names or transport_protocol "tls" only with it.
const TLSInspector = "envoy.filters.listener.tls_inspector"

// providerMarkers are the encodings of the CertificateProviderPluginInstances
// the translators write (instance_name, field 1, then certificate_name,
// field 2): a resource without one has no variant, and is not decoded.
// (The instance name alone is no mark: every cluster's metadata is under
// the key "sextant".)
var providerMarkers = [][]byte{providerMarker(CertificateName), providerMarker(RootCertName)}

// providerPrefix is what every marker starts with (instance_name, then the
// certificate_name's tag): hasProvider scans a resource once for it.
var providerPrefix = func() []byte {
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendString(b, CertificateProvider)
	return protowire.AppendTag(b, 2, protowire.BytesType)
}()

func providerMarker(cert string) []byte {
	return protowire.AppendString(bytes.Clone(providerPrefix), cert)
}

// hasProvider reports whether value holds a provider marker, in one pass
// over it: it runs on every cluster and listener published.
func hasProvider(value []byte) bool {
	for {
		i := bytes.Index(value, providerPrefix)
		if i < 0 {
			return false
		}
		for _, m := range providerMarkers {
			if bytes.HasPrefix(value[i:], m) {
				return true
			}
		}
		value = value[i+1:]
	}
}

// mayVary reports whether a resource of type t can differ for Envoy nodes
// (envoyVariant can return one): checked once per resource, not per
// flavour.
func mayVary(t Type, value []byte) bool {
	switch t {
	case TypeCluster:
		return hasProvider(value)
	case TypeListener:
		return bytes.Contains(value, []byte("tls")) || hasProvider(value)
	}
	return false
}

// Field numbers of envoy.config.cluster.v3.Cluster holding transport sockets.
const (
	clusterTransportSocket        = 24
	clusterTransportSocketMatches = 43
)

// socketVariants remembers the rewritten encoding of the transport
// sockets seen last: the clusters of one namespace and policy share one
// socket, so a full recomputation rewrites each once, not per cluster.
var socketVariants = &socketMemo{m: map[string][]byte{}}

type socketMemo struct {
	mu sync.Mutex
	m  map[string][]byte // field number and encoding -> rewritten encoding; empty: unchanged
}

// maxSocketVariants bounds the memo; past it, it starts again.
const maxSocketVariants = 1024

// of returns the rewritten encoding of body, a transport socket (field
// clusterTransportSocket) or a transport socket match, or nil when Envoy
// gets it as it is.
func (sm *socketMemo) of(f Flavour, num protowire.Number, body []byte) ([]byte, error) {
	key := string(rune(f)) + string(rune(num)) + string(body)
	sm.mu.Lock()
	b, ok := sm.m[key]
	sm.mu.Unlock()
	if ok {
		if len(b) == 0 {
			return nil, nil
		}
		return b, nil
	}
	ts, tm := &corev3.TransportSocket{}, &clusterv3.Cluster_TransportSocketMatch{}
	var msg proto.Message = ts
	if num == clusterTransportSocketMatches {
		msg = tm
	}
	if err := proto.Unmarshal(body, msg); err != nil {
		return nil, err
	}
	if num == clusterTransportSocketMatches {
		ts = tm.TransportSocket
	}
	b = []byte{}
	if envoySocket(ts, sdsSource(f)) {
		var err error
		if b, err = deterministic.Marshal(msg); err != nil {
			return nil, err
		}
	}
	sm.mu.Lock()
	if len(sm.m) >= maxSocketVariants {
		clear(sm.m)
	}
	sm.m[key] = b
	sm.mu.Unlock()
	if len(b) == 0 {
		return nil, nil
	}
	return b, nil
}

// clusterVariant rewrites the transport sockets of an encoded cluster and
// copies every other field as it is: the deterministic encoding keeps
// fields in number order, and so does the copy.
func clusterVariant(f Flavour, value []byte) ([]byte, bool, error) {
	out := make([]byte, 0, len(value)+64)
	changed := false
	for rest := value; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return nil, false, protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, rest[n:])
		if m < 0 {
			return nil, false, protowire.ParseError(m)
		}
		field := rest[:n+m]
		rest = rest[n+m:]
		if typ != protowire.BytesType || (num != clusterTransportSocket && num != clusterTransportSocketMatches) {
			out = append(out, field...)
			continue
		}
		body, _ := protowire.ConsumeBytes(field[n:])
		b, err := socketVariants.of(f, num, body)
		if err != nil {
			return nil, false, err
		}
		if b == nil {
			out = append(out, field...)
			continue
		}
		changed = true
		out = protowire.AppendTag(out, num, protowire.BytesType)
		out = protowire.AppendBytes(out, b)
	}
	return out, changed, nil
}

// agentSource is where FlavourEnvoyAgent reads its workload secrets: the
// bootstrap's cluster of the local agent's socket.
var agentSource = &corev3.ConfigSource{
	ConfigSourceSpecifier: &corev3.ConfigSource_ApiConfigSource{ApiConfigSource: &corev3.ApiConfigSource{
		ApiType: corev3.ApiConfigSource_GRPC, TransportApiVersion: corev3.ApiVersion_V3, SetNodeOnFirstMessageOnly: true,
		GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: AgentSDSCluster}}}},
	}},
	ResourceApiVersion: corev3.ApiVersion_V3,
}

// sdsSource is where nodes of flavour f read the workload secrets.
func sdsSource(f Flavour) *corev3.ConfigSource {
	if f == FlavourEnvoyAgent {
		return agentSource
	}
	return adsSource
}

// envoyVariant returns the variant of value, a resource of type t, that
// nodes of flavour f (an Envoy flavour) get, and false when they get
// value itself.
func envoyVariant(f Flavour, t Type, value []byte) ([]byte, bool, error) {
	switch t {
	case TypeCluster:
		if !hasProvider(value) {
			return nil, false, nil
		}
		b, ok, err := clusterVariant(f, value)
		if err != nil {
			return nil, false, fmt.Errorf("xds: envoy variant of cluster: %w", err)
		}
		return b, ok, nil
	case TypeListener:
		hasProvider := hasProvider(value)
		if !hasProvider && !bytes.Contains(value, []byte("tls")) {
			return nil, false, nil // neither TLS nor a match that needs the inspector
		}
		l := &listenerv3.Listener{}
		if err := proto.Unmarshal(value, l); err != nil {
			return nil, false, fmt.Errorf("xds: envoy variant of listener: %w", err)
		}
		changed := false
		if hasProvider {
			for _, fc := range append(l.FilterChains, l.DefaultFilterChain) {
				if fc != nil {
					changed = envoySocket(fc.TransportSocket, sdsSource(f)) || changed
				}
			}
		}
		changed = ensureTLSInspector(l) || changed
		if !changed {
			return nil, false, nil
		}
		b, err := Encode(l)
		return b, err == nil, err
	}
	return nil, false, nil
}

// NeedsTLSInspector reports whether a listener's filter chains match on
// what only the TLS inspector reads: server_names, transport_protocol
// "tls", or application_protocols.
func NeedsTLSInspector(l *listenerv3.Listener) bool {
	for _, fc := range l.FilterChains {
		m := fc.GetFilterChainMatch()
		if len(m.GetServerNames()) > 0 || m.GetTransportProtocol() == "tls" || len(m.GetApplicationProtocols()) > 0 {
			return true
		}
	}
	return false
}

// HasTLSInspector reports whether l carries the TLS inspector.
func HasTLSInspector(l *listenerv3.Listener) bool {
	for _, f := range l.ListenerFilters {
		if f.GetName() == TLSInspector {
			return true
		}
	}
	return false
}

// TLSInspectorFilter is the listener filter TLSInspector.
func TLSInspectorFilter() *listenerv3.ListenerFilter {
	a := &anypb.Any{}
	_ = anypb.MarshalFrom(a, &tlsinspectorv3.TlsInspector{}, deterministic)
	return &listenerv3.ListenerFilter{Name: TLSInspector, ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: a}}
}

// ensureTLSInspector adds the TLS inspector to l if its chains need it and
// it has none, and reports whether it did.
func ensureTLSInspector(l *listenerv3.Listener) bool {
	if !NeedsTLSInspector(l) || HasTLSInspector(l) {
		return false
	}
	l.ListenerFilters = append([]*listenerv3.ListenerFilter{TLSInspectorFilter()}, l.ListenerFilters...)
	return true
}

// envoySocket rewrites a TLS transport socket's certificate provider
// instances named CertificateProvider into SDS secrets of the same
// certificate names from src, and reports whether it changed anything.
// The validation context becomes a combined one: its SAN matchers (typed,
// URI: a SPIFFE ID) beside the roots from SDS, Istio's shape.
func envoySocket(ts *corev3.TransportSocket, src *corev3.ConfigSource) bool {
	a := ts.GetTypedConfig()
	if a == nil {
		return false
	}
	var msg interface {
		proto.Message
		GetCommonTlsContext() *tlsv3.CommonTlsContext
	}
	switch a.GetTypeUrl() {
	case "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext":
		msg = &tlsv3.UpstreamTlsContext{}
	case "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext":
		msg = &tlsv3.DownstreamTlsContext{}
	default:
		return false
	}
	if err := a.UnmarshalTo(msg); err != nil {
		return false
	}
	c := msg.GetCommonTlsContext()
	if c == nil {
		return false
	}
	changed := false
	if pi := c.TlsCertificateProviderInstance; pi.GetInstanceName() == CertificateProvider {
		c.TlsCertificateProviderInstance = nil
		c.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{{Name: pi.GetCertificateName(), SdsConfig: src}}
		changed = true
	}
	if vc := c.GetValidationContext(); vc != nil && vc.CaCertificateProviderInstance.GetInstanceName() == CertificateProvider {
		roots := vc.CaCertificateProviderInstance.GetCertificateName()
		vc.CaCertificateProviderInstance = nil
		for _, m := range vc.MatchSubjectAltNames { //nolint:staticcheck // grpc-go's field, read here to give Envoy the typed one
			vc.MatchTypedSubjectAltNames = append(vc.MatchTypedSubjectAltNames, &tlsv3.SubjectAltNameMatcher{SanType: tlsv3.SubjectAltNameMatcher_URI, Matcher: m})
		}
		vc.MatchSubjectAltNames = nil //nolint:staticcheck // see above
		c.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
			DefaultValidationContext:         vc,
			ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: roots, SdsConfig: src},
		}}
		changed = true
	}
	if !changed {
		return false
	}
	if err := anypb.MarshalFrom(a, msg, deterministic); err != nil {
		return false
	}
	return true
}
