package gateway

import (
	"crypto/x509"

	"github.com/sextant-mesh/sextant/internal/calllog"
)

// Istio's metrics of a sidecar: each proxy of a call reports its own
// half, as Istio's sidecars do. A call the sidecar received for its app
// (cluster InboundCluster) is reported by the destination: the source is
// the caller's certificate, the destination principal the sidecar's own.
// A call the app sent out is reported by the source: the source is the
// sidecar's own workload (its SPIFFE id), the destination principal the
// server's certificate (calllog.Record.Upstream). The gateway, which
// stands for both proxies of a call, reports both (istiometrics.go).

const (
	dirInbound  = 1 // reporter destination
	dirOutbound = 2 // reporter source
)

// istioReporterOf is the one reporter of a sidecar's series of direction
// dir; "" for the gateway's.
func istioReporterOf(dir uint8) string {
	switch dir {
	case dirInbound:
		return "destination"
	case dirOutbound:
		return "source"
	}
	return ""
}

// sidecarKey makes k a sidecar's: its direction and the identities of
// its two ends.
func (m *istioMetrics) sidecarKey(k *istioKey, r *calllog.Record) {
	var self string
	if p := m.self.Load(); p != nil {
		self = *p
	}
	if r.Cluster == InboundCluster {
		k.dir, k.peer = dirInbound, self
		return
	}
	// The app's connection to its sidecar is plaintext on loopback: the
	// source is the sidecar's workload; the mesh's TLS is the upstream leg.
	k.dir, k.principal, k.peer, k.mtls = dirOutbound, self, r.Upstream, r.Upstream != ""
}

// setIstioSelf records the sidecar's SPIFFE id (the identity's first URI
// SAN) for its metrics' labels. Any goroutine.
func (m *istioMetrics) setIstioSelf(leaf *x509.Certificate) {
	if m == nil || !m.sidecar || leaf == nil || len(leaf.URIs) == 0 {
		return
	}
	id := leaf.URIs[0].String()
	m.self.Store(&id)
}
