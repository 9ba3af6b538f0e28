package xds

import (
	"fmt"
	"testing"
	"time"

	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/config"
)

// BenchmarkApplyVariants: publishing 256 clusters into a fresh cache,
// with the Envoy variants (now) and without (the code before), in one
// run: plain clusters cost a scan for the provider's name; ISTIO_MUTUAL
// ones a decode, rewrite and encode more.
//
//	go test -run '^$' -bench BenchmarkApplyVariants -benchmem -count 5 ./internal/xds
func BenchmarkApplyVariants(b *testing.B) {
	for _, kind := range []struct {
		name string
		p    config.Policy
	}{
		{"plain", config.Policy{}},
		{"istio_mutual", config.Policy{TLS: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL}}},
	} {
		set := make([]Resource, 256)
		for i := range set {
			name := fmt.Sprintf("ns%d/svc%d", i%8, i)
			b, err := Encode(Cluster(name, kind.p))
			if err != nil {
				panic(err)
			}
			set[i] = Resource{Name: name, Version: "1", Value: b}
		}
		for _, mode := range []struct {
			name       string
			noVariants bool
		}{{"before", true}, {"variants", false}} {
			b.Run(kind.name+"/"+mode.name, func(b *testing.B) {
				b.ReportAllocs()
				now := time.Now()
				for b.Loop() {
					c := NewCache()
					c.noVariants = mode.noVariants
					if _, err := c.Apply(TypeCluster, set, nil, "1", now); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
