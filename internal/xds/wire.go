package xds

import (
	"google.golang.org/protobuf/encoding/protowire"
)

// Type is an xDS resource type. Clusters are sent before the listeners and
// routes that name them (Envoy's make-before-break order); endpoints are
// sent first of all (see Server.sendLoop).
type Type uint8

const (
	TypeCluster Type = iota
	TypeEndpoint
	TypeListener
	TypeRoute
	// TypeSecret is SDS: a gateway's TLS certificates, asked for by name
	// on the ADS stream.
	TypeSecret
	numTypes
)

var typeURLs = [numTypes]string{
	TypeCluster:  "type.googleapis.com/envoy.config.cluster.v3.Cluster",
	TypeEndpoint: "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
	TypeListener: "type.googleapis.com/envoy.config.listener.v3.Listener",
	TypeRoute:    "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
	TypeSecret:   "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
}

var typeNames = [numTypes]string{"clusters", "endpoints", "listeners", "routes", "secrets"}

// URL returns the type's type URL.
func (t Type) URL() string { return typeURLs[t] }

func (t Type) String() string { return typeNames[t] }

// TypeOf returns the Type of a type URL, and false for others.
func TypeOf(url string) (Type, bool) {
	for t, u := range typeURLs {
		if u == url {
			return Type(t), true
		}
	}
	return 0, false
}

// Field numbers of the discovery messages assembled by hand, so that the
// encoded resources are shared rather than re-marshalled per subscriber.
const (
	anyTypeURL = 1
	anyValue   = 2

	respVersionInfo = 1 // DiscoveryResponse
	respResources   = 2
	respTypeURL     = 4
	respNonce       = 5

	deltaSystemVersion = 1 // DeltaDiscoveryResponse
	deltaResources     = 2
	deltaTypeURL       = 4
	deltaRemoved       = 6
	deltaNonce         = 5

	resVersion  = 1 // discovery.v3.Resource
	resResource = 2
	resName     = 3
)

func appendString(b []byte, field protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBytes(b []byte, field protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// encodeAny returns google.protobuf.Any{type_url, value} as field number
// `field` of an enclosing message (tag and length included).
func encodeAny(field protowire.Number, typeURL string, value []byte) []byte {
	inner := protowire.SizeTag(anyTypeURL) + protowire.SizeBytes(len(typeURL)) +
		protowire.SizeTag(anyValue) + protowire.SizeBytes(len(value))
	b := make([]byte, 0, protowire.SizeTag(field)+protowire.SizeBytes(inner))
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(inner))
	b = appendString(b, anyTypeURL, typeURL)
	return appendBytes(b, anyValue, value)
}

// encodeResource returns discovery.v3.Resource{name, version, resource} as
// field `field` of a DeltaDiscoveryResponse.
func encodeResource(field protowire.Number, name, version, typeURL string, value []byte) []byte {
	anyLen := protowire.SizeTag(anyTypeURL) + protowire.SizeBytes(len(typeURL)) +
		protowire.SizeTag(anyValue) + protowire.SizeBytes(len(value))
	inner := protowire.SizeTag(resName) + protowire.SizeBytes(len(name)) +
		protowire.SizeTag(resVersion) + protowire.SizeBytes(len(version)) +
		protowire.SizeTag(resResource) + protowire.SizeBytes(anyLen)
	b := make([]byte, 0, protowire.SizeTag(field)+protowire.SizeBytes(inner))
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(inner))
	b = appendString(b, resVersion, version)
	b = protowire.AppendTag(b, resResource, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(anyLen))
	b = appendString(b, anyTypeURL, typeURL)
	b = appendBytes(b, anyValue, value)
	return appendString(b, resName, name)
}
