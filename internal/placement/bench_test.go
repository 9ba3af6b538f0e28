package placement

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func BenchmarkDecodePodYAML(b *testing.B) {
	body, err := os.ReadFile("testdata/pod.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodePods(body, true); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodePodList1000 is a deployment of 1,000 replicas in one body.
func BenchmarkDecodePodList1000(b *testing.B) {
	var items []*corev1.Pod
	for i := range 1000 {
		items = append(items, mkPod(fmt.Sprintf("web-%d", i), rl("cpu", "100m", "memory", "500Mi"), "app", "web"))
	}
	body, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodePods(body, false); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPlacementRecordDecode(b *testing.B) {
	w, err := CompilePod(mkPod("web-1", rl("cpu", "100m", "memory", "500Mi"), "app", "web", "tier", "front"), "")
	if err != nil {
		b.Fatal(err)
	}
	rec, _ := w.Placement("node-000001").MarshalBinary()
	b.ReportAllocs()
	for b.Loop() {
		var p Placement
		if err := p.UnmarshalBinary(rec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlace5000Spread places pods with a zone spread constraint on
// 5,000 nodes, one Txn each.
func BenchmarkPlace5000Spread(b *testing.B) {
	var nodes []*corev1.Node
	for i := range 5000 {
		nodes = append(nodes, mkNode(fmt.Sprintf("n%05d", i), "4", "32Gi", "110", "zone", fmt.Sprint(i%3)))
	}
	s := newCluster(b, nodes...)
	ws := make([]*Workload, b.N)
	for i := range ws {
		p := spread(mkPod(fmt.Sprintf("p%d", i), rl("cpu", "100m", "memory", "500Mi"), "app", "web"), "zone", 1, true, map[string]string{"app": "web"})
		ws[i] = compile(b, p)[0]
	}
	st := newStore()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range ws {
		if _, _, err := s.Place(ws[i:i+1], st.persist); err != nil {
			b.Fatal(err)
		}
	}
}
