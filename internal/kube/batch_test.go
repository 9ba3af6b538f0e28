package kube

import (
	"slices"
	"testing"

	"github.com/sextant-mesh/sextant/internal/instance"
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
	if b.size != 0 || b.writing() != 1 {
		t.Errorf("size %d, writing %d; want 0, 1", b.size, b.writing())
	}
	b.reset()
	if len(b.plans) != 0 || b.from != nil {
		t.Error("reset left plans")
	}
}
