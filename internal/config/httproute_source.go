package config

import (
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// HTTPMatchRequest sourceLabels and sourceNamespace: the calling
// workload. As Istio does, they are matched against the proxy a route is
// published to (in the mesh, the caller's own sidecar or proxyless
// client): the push publishes them with the route and each subscriber is
// sent only the routes its node's labels and namespace match
// (internal/xds sourcematch.go).
func init() {
	allow(&networking.HTTPMatchRequest{}, "source_labels", "source_namespace")
}

// validateSourceMatch checks a match's sourceLabels keys and
// sourceNamespace at p.
func validateSourceMatch(c errs, p string, m *networking.HTTPMatchRequest) {
	for k, v := range m.SourceLabels {
		if !label.ValidKey(k) {
			c.add(mapKey(join(p, "sourceLabels"), k), ErrInvalid, "not a metadata key: 1..128 of [A-Za-z0-9._/-]")
		}
		if len(v) > 4096 {
			c.add(mapKey(join(p, "sourceLabels"), k), ErrInvalid, "value longer than 4096 bytes")
		}
	}
	if ns := m.SourceNamespace; ns != "" && !naming.ValidLabel(ns) {
		c.add(join(p, "sourceNamespace"), ErrInvalid, "%q: want a DNS label (1..63 of [a-z0-9-])", ns)
	}
}

// SourceMatches reports whether a match applies to a proxy of labels
// lbls in namespace ns, as Istio's sourceMatchHTTP: a match naming
// gateways is decided by them, otherwise its sourceLabels must be a subset
// of lbls and its sourceNamespace, if any, ns.
func SourceMatches(m *networking.HTTPMatchRequest, lbls map[string]string, ns string) bool {
	if m == nil || len(m.Gateways) > 0 {
		return true
	}
	for k, v := range m.SourceLabels {
		if got, ok := lbls[k]; !ok || got != v {
			return false
		}
	}
	return m.SourceNamespace == "" || m.SourceNamespace == ns
}
