package kube

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

// TestBatchMerged: slices written together make the write that writing
// them one after the other would leave: an address moved from one slice to
// another is put and not deleted (the registry applies deletes after puts),
// and an id two slices put is put once, as the later one has it.
func TestBatchMerged(t *testing.T) {
	in := func(id, addr string) *instance.Instance { return &instance.Instance{ID: id, Host: addr} }
	moved := in("k8s-b", "10.0.0.2")
	tests := []struct {
		name    string
		plans   []slicePlan
		wantPut []string // id@address
		wantDel []string
	}{
		{
			name: "disjoint",
			plans: []slicePlan{
				{key: "ns/a", put: []*instance.Instance{in("k8s-a", "10.0.0.1")}, del: []string{"k8s-x"}},
				{key: "ns/b", put: []*instance.Instance{in("k8s-c", "10.0.0.3")}, del: []string{"k8s-y"}},
			},
			wantPut: []string{"k8s-a@10.0.0.1", "k8s-c@10.0.0.3"},
			wantDel: []string{"k8s-x", "k8s-y"},
		},
		{
			name: "moved from the first slice to the second",
			plans: []slicePlan{
				{key: "ns/a", del: []string{"k8s-b"}},
				{key: "ns/b", put: []*instance.Instance{moved}},
			},
			wantPut: []string{"k8s-b@10.0.0.2"},
		},
		{
			name: "put by both, the later wins",
			plans: []slicePlan{
				{key: "ns/a", put: []*instance.Instance{in("k8s-b", "10.0.0.2"), in("k8s-a", "10.0.0.1")}},
				{key: "ns/b", put: []*instance.Instance{in("k8s-b", "10.0.9.9")}},
			},
			wantPut: []string{"k8s-b@10.0.9.9", "k8s-a@10.0.0.1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b batch
			for _, p := range tt.plans {
				b.add(p)
			}
			put, del := b.merged()
			var got []string
			for _, p := range put {
				got = append(got, p.ID+"@"+p.Host)
			}
			if !slices.Equal(got, tt.wantPut) {
				t.Errorf("put %v, want %v", got, tt.wantPut)
			}
			if !slices.Equal(del, tt.wantDel) {
				t.Errorf("del %v, want %v", del, tt.wantDel)
			}
		})
	}
}

// TestBatchPendingMoves: a slice planned after another in the same batch
// sees the ids the first one took or removed (batch.from), as it would see
// them in s.from had the first been written alone.
func TestBatchPendingMoves(t *testing.T) {
	var b batch
	b.add(slicePlan{key: "ns/a", del: []string{"k8s-x"}, next: map[string]*instance.Instance{"k8s-b": {ID: "k8s-b"}}})
	if k, ok := b.from["k8s-b"]; !ok || k != "ns/a" {
		t.Errorf("from[k8s-b] = %q, %v; want ns/a", k, ok)
	}
	if k, ok := b.from["k8s-x"]; !ok || k != "" {
		t.Errorf("from[k8s-x] = %q, %v; want removed", k, ok)
	}
	if b.size != 1 || b.writing() != 1 {
		t.Errorf("size %d, writing %d; want 1, 1", b.size, b.writing())
	}
	b.reset()
	if len(b.plans) != 0 || b.from != nil {
		t.Error("reset left plans")
	}
}

type noObjects struct{}

func (noObjects) pod(string, string) *corev1.Pod { return nil }
func (noObjects) node(string) *corev1.Node       { return nil }

// BenchmarkSliceWrites: what a slice change costs the registry written
// alone (one commit and fsync each, as the sync did) and 20 at a time (one
// commit for the slices pending together): 200 services of 10 endpoints,
// each op one slice gaining an endpoint. The registry is real, on the
// embedded store.
func BenchmarkSliceWrites(b *testing.B) {
	for _, per := range []int{1, 20} {
		b.Run(fmt.Sprintf("slices-per-write=%d", per), func(b *testing.B) {
			st, err := embedded.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			reg, err := registry.Open(st, registry.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { reg.Close(); st.Close() }()
			ctx := context.Background()
			const services = 200
			var eps [services][]discoveryv1.Endpoint
			sliceAt := func(i int) []*instance.Instance {
				return convert(slice("bench", fmt.Sprintf("svc-%03d", i), fmt.Sprintf("svc-%03d", i), eps[i]...), noObjects{})
			}
			for i := range services {
				for j := range 10 {
					eps[i] = append(eps[i], endpoint(fmt.Sprintf("10.%d.%d.%d", i/200, i%200, j+1), "", true, true, false))
				}
				if _, err := reg.Sync(ctx, Owner, sliceAt(i), nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for n := 0; n < b.N; n += per {
				var put []*instance.Instance
				for k := n; k < min(n+per, b.N); k++ {
					i := k % services
					eps[i] = append(eps[i], endpoint(fmt.Sprintf("10.%d.%d.%d", 100+k/62500, k/250%250, k%250+1), "", true, true, false))
					put = append(put, sliceAt(i)[len(eps[i])-1])
				}
				if _, err := reg.Sync(ctx, Owner, put, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
