package gateway

import (
	"crypto/x509"
	"net/url"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/calllog"
)

// TestIstioSidecarReporters: a sidecar reports each call once, as the
// proxy it was for it: a call in for its app as the destination (the
// caller's SPIFFE id the source, its own the destination principal), a
// call out from its app as the source (its own workload the source, the
// server's certificate the destination principal), as Istio's sidecars
// do, so that Kiali draws the edge from both ends.
func TestIstioSidecarReporters(t *testing.T) {
	m := newIstioMetrics(nil, nil, 0)
	m.sidecar = true
	u, _ := url.Parse("spiffe://cluster.local/ns/shop/sa/orders")
	m.setIstioSelf(&x509.Certificate{URIs: []*url.URL{u}})
	m.Record(calllog.Record{Cluster: InboundCluster, Service: "shop/orders", Status: 200, Latency: time.Millisecond,
		Principal: "spiffe://cluster.local/ns/shop/sa/web", Conn: calllog.ConnTLS | calllog.ConnPeerCert})
	m.Record(calllog.Record{Cluster: "shop/payments", Service: "shop/payments", Status: 503, Latency: time.Millisecond,
		Upstream: "spiffe://cluster.local/ns/pay/sa/payments"})
	reqs := gatherIstio(t, m)["istio_requests_total"]
	if reqs == nil || len(reqs.Metric) != 2 {
		t.Fatalf("istio_requests_total: %v, want one series per call, each with its one reporter", reqs)
	}
	want := map[string]map[string]string{
		"destination": {"source_workload": "web", "source_principal": "spiffe://cluster.local/ns/shop/sa/web",
			"destination_service_name": "orders", "destination_principal": "spiffe://cluster.local/ns/shop/sa/orders",
			"connection_security_policy": "mutual_tls", "response_code": "200"},
		"source": {"source_workload": "orders", "source_workload_namespace": "shop", "source_principal": "spiffe://cluster.local/ns/shop/sa/orders",
			"destination_service_name": "payments", "destination_principal": "spiffe://cluster.local/ns/pay/sa/payments",
			"connection_security_policy": "unknown", "response_code": "503"},
	}
	for _, mt := range reqs.Metric {
		l := labelsOf(mt)
		w, ok := want[l["reporter"]]
		if !ok {
			t.Fatalf("reporter %q", l["reporter"])
		}
		for k, v := range w {
			if l[k] != v {
				t.Errorf("reporter %s: %s = %q, want %q", l["reporter"], k, l[k], v)
			}
		}
		delete(want, l["reporter"])
	}
	if len(want) != 0 {
		t.Errorf("no series of reporter %v", want)
	}
}
