package xds

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/config"
)

// TestClusterEncoder: the spliced encoding of every kind of cluster is the
// bytes of marshalling Cluster(name, p), for a fresh encoder and for one
// whose templates were made by other clusters.
func TestClusterEncoder(t *testing.T) {
	od := &networking.OutlierDetection{Consecutive_5XxErrors: wrapperspb.UInt32(7), Interval: durationpb.New(time.Second)}
	tls := &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL, SubjectAltNames: []string{"spiffe://x/y"}}
	policies := []config.Policy{
		{},
		{LoadBalancer: config.PolicyRoundRobin, ConnectTimeout: time.Second},
		{LoadBalancer: config.PolicyLeastRequest, IdleTimeout: time.Minute, HTTP2: true},
		{LoadBalancer: config.PolicyRandom, Outlier: od},
		{LoadBalancer: "adaptive", TLS: tls},
		{LoadBalancer: "peak_ewma", HTTP2: true, TLS: tls, Outlier: od},
		{LoadBalancer: config.PolicyRingHash, RingSize: 2048, Hash: config.HashKey{Header: "x-user"}},
		{LoadBalancer: config.PolicyMaglev, Hash: config.HashKey{SourceIP: true}, Outlier: od},
		{IdleTimeout: time.Minute, Circuit: config.Circuit{MaxConnections: 1, MaxPendingRequests: 1, MaxRequestsPerConnection: 1}},
		{HTTP2: true, Circuit: config.Circuit{MaxRequests: 100, MaxRetries: 3, MaxConcurrentStreams: 10,
			MaxConnectionDuration: time.Hour, Keepalive: true, KeepaliveProbes: 3, KeepaliveTime: time.Minute,
			RetryBudget: true, RetryBudgetPercent: 12.5, RetryBudgetMin: 2}},
	}
	names := []string{"default/orders", "default/orders/blue", "prod/orders/blue:8080", "prod/a.b:9090", "x/y/z-1", "noslash", "default/orders/"}
	shared := &ClusterEncoder{}
	for _, p := range policies {
		for _, name := range names {
			want, err := Encode(Cluster(name, p))
			if err != nil {
				t.Fatal(err)
			}
			for _, ce := range []*ClusterEncoder{{}, shared} {
				got, err := ce.Encode(name, p)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%q %+v: spliced %x\nmarshalled %x", name, p, got, want)
				}
			}
		}
	}
	if n := len(shared.templates); n != maxTemplates {
		t.Fatalf("%d templates kept, want at most %d", n, maxTemplates)
	}
}

// BenchmarkClusterEncode: a cluster marshalled from its message, and
// spliced into its policy's template.
func BenchmarkClusterEncode(b *testing.B) {
	p := config.Policy{Outlier: &networking.OutlierDetection{Consecutive_5XxErrors: wrapperspb.UInt32(7)}}
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Encode(Cluster("default/orders/blue", p)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("spliced", func(b *testing.B) {
		b.ReportAllocs()
		ce := &ClusterEncoder{}
		for b.Loop() {
			if _, err := ce.Encode("default/orders/blue", p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
