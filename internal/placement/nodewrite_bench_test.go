package placement

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// bigCluster loads n nodes labelled like scheduler_perf's (a unique
// hostname each, 3 zones, 50 racks).
func bigCluster(b *testing.B, n int) *Scheduler {
	b.Helper()
	nodes := make([]*Node, n)
	for i := range nodes {
		name := fmt.Sprintf("node-%06d", i)
		rec, err := CompileNode(mkNode(name, "4", "32Gi", "110", corev1.LabelHostname, name,
			corev1.LabelTopologyZone, fmt.Sprint("zone-", i%3), "rack", fmt.Sprint("rack-", i%50)), "")
		if err != nil {
			b.Fatal(err)
		}
		rec.Seq = uint64(i + 1)
		nodes[i] = rec
	}
	s := New(Config{})
	if err := s.Load(1, nodes, nil); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkDeleteNode50000 deletes one node per Txn from a 50,000-node
// cluster, as the registry's write path does: decide in a Txn, abort it,
// apply the committed record.
func BenchmarkDeleteNode50000(b *testing.B) {
	s := bigCluster(b, 50000)
	defer s.Close()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		name := fmt.Sprintf("node-%06d", i%50000)
		i++
		tx := s.Begin()
		if _, err := tx.DeleteNode(name); err != nil {
			b.Fatal(err)
		}
		ops := append([]Op(nil), tx.Ops()...)
		tx.Abort()
		if err := s.Apply(int64(i+1), ops); err != nil {
			b.Fatal(err)
		}
		if i == 50000 {
			b.StopTimer()
			s.Close()
			s = bigCluster(b, 50000)
			b.StartTimer()
		}
	}
}

// BenchmarkUpsertNode50000 replaces one node's labels per Txn on a
// 50,000-node cluster (decide, abort, apply).
func BenchmarkUpsertNode50000(b *testing.B) {
	s := bigCluster(b, 50000)
	defer s.Close()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		name := fmt.Sprintf("node-%06d", i%50000)
		i++
		rec, _ := CompileNode(mkNode(name, "4", "32Gi", "110", corev1.LabelHostname, name, "gen", fmt.Sprint(i)), "")
		tx := s.Begin()
		tx.UpsertNodes([]*Node{rec})
		ops := append([]Op(nil), tx.Ops()...)
		tx.Abort()
		if err := s.Apply(int64(i+1), ops); err != nil {
			b.Fatal(err)
		}
	}
}
