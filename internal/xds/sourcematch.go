package xds

import (
	"bytes"
	"maps"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/config"
)

// Per-subscriber routes by source (HTTPMatchRequest sourceLabels and
// sourceNamespace). Istio matches them against the proxy the routes are
// built for, the calling workload's own, and leaves out the routes whose
// source does not match it. The push engine builds one RouteConfiguration
// per service for every subscriber, so a source-matched route carries its
// source in the "sextant.io/source" filter metadata, and each subscriber
// is sent a variant without the routes its node (metadata LABELS and
// NAMESPACE, as Istio's proxies send them) does not match, and without
// that metadata. A node without labels matches only sources without
// sourceLabels, as in Istio.

// sourceMetadataKey is the route's filter metadata naming its source.
const sourceMetadataKey = "sextant.io/source"

var sourceMetadataBytes = []byte(sourceMetadataKey)

// sourceMatched reports whether m selects its source.
func sourceMatched(m *networking.HTTPMatchRequest) bool {
	return m != nil && len(m.Gateways) == 0 && (len(m.SourceLabels) > 0 || m.SourceNamespace != "")
}

// markSource writes match m's source into route r's metadata.
func markSource(r *routev3.Route, m *networking.HTTPMatchRequest) {
	if !sourceMatched(m) {
		return
	}
	// One field, a list (namespace, then "key=value" sorted): a
	// Struct's map is encoded in no fixed order, and the cache tells
	// versions apart by their bytes.
	vals := []*structpb.Value{structpb.NewStringValue(m.SourceNamespace)}
	for _, k := range slices.Sorted(maps.Keys(m.SourceLabels)) {
		vals = append(vals, structpb.NewStringValue(k+"="+m.SourceLabels[k]))
	}
	if r.Metadata == nil {
		r.Metadata = &corev3.Metadata{}
	}
	if r.Metadata.FilterMetadata == nil {
		r.Metadata.FilterMetadata = map[string]*structpb.Struct{}
	}
	r.Metadata.FilterMetadata[sourceMetadataKey] = &structpb.Struct{Fields: map[string]*structpb.Value{
		"match": structpb.NewListValue(&structpb.ListValue{Values: vals}),
	}}
}

// mayHaveSource reports whether an encoded route configuration may hold
// source-matched routes (a false positive costs one decode per version).
func mayHaveSource(t Type, value []byte) bool {
	return t == TypeRoute && bytes.Contains(value, sourceMetadataBytes)
}

// nodeSource is who a node says it is, for source matches: its labels
// (metadata LABELS) and namespace.
type nodeSource struct {
	labels map[string]string
	ns     string
	key    string // labels and namespace, canonical: the memo's key
}

func newNodeSource(n *corev3.Node, ns string) nodeSource {
	ls := map[string]string{}
	for k, v := range n.GetMetadata().GetFields()["LABELS"].GetStructValue().GetFields() {
		if s, ok := v.GetKind().(*structpb.Value_StringValue); ok {
			ls[k] = s.StringValue
		}
	}
	var b strings.Builder
	b.WriteString(ns)
	for _, k := range slices.Sorted(maps.Keys(ls)) {
		b.WriteString("\x00" + k + "\x00" + ls[k])
	}
	return nodeSource{labels: ls, ns: ns, key: b.String()}
}

// sourceVariants: route configurations as a node of one labels+namespace
// key gets them.
var sourceVariants = newVariantMemo[string]()

// sourceVariant is route configuration e without the routes whose source
// src does not match, and without their source metadata.
func sourceVariant(e *entry, src nodeSource) *entry {
	var rc routev3.RouteConfiguration
	if err := proto.Unmarshal(e.value, &rc); err != nil {
		return e
	}
	changed := false
	for _, vh := range rc.VirtualHosts {
		kept := vh.Routes[:0]
		for _, r := range vh.Routes {
			md := r.GetMetadata().GetFilterMetadata()[sourceMetadataKey]
			if md == nil {
				kept = append(kept, r)
				continue
			}
			changed = true
			delete(r.Metadata.FilterMetadata, sourceMetadataKey)
			if len(r.Metadata.FilterMetadata) == 0 && r.Metadata.TypedFilterMetadata == nil {
				r.Metadata = nil
			}
			m := &networking.HTTPMatchRequest{SourceLabels: map[string]string{}}
			for i, v := range md.Fields["match"].GetListValue().GetValues() {
				if i == 0 {
					m.SourceNamespace = v.GetStringValue()
					continue
				}
				k, val, _ := strings.Cut(v.GetStringValue(), "=")
				m.SourceLabels[k] = val
			}
			if config.SourceMatches(m, src.labels, src.ns) {
				kept = append(kept, r)
			}
		}
		vh.Routes = kept
	}
	if !changed {
		return e
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&rc)
	if err != nil {
		return e
	}
	base := e.version
	if i := strings.LastIndexByte(base, '-'); i >= 0 {
		base = base[:i]
	}
	return newEntry(TypeRoute, &Resource{Name: e.name, Version: base, Hidden: e.hidden}, b, e.id, e.seq, e.origin)
}
