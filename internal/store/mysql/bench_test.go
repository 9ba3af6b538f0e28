package mysql

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/mysql/mysqltest"
)

// benchInstance is an instance as the registry benchmark registers it: 16
// metadata pairs of 10-byte keys and values.
func benchInstance(i int) *instance.Instance {
	md := map[string]string{}
	for k := range 16 {
		md[fmt.Sprintf("key%07d", k)] = fmt.Sprintf("val%07d", (i+k)%1000)
	}
	return &instance.Instance{ID: fmt.Sprintf("inst-%09d", i), Namespace: "bench", Service: fmt.Sprintf("svc%d", i%100),
		Host: "10.0.0.1", Port: 1 + i%60000, Weight: 100, Healthy: true, Metadata: label.FromMap(md),
		CreatedAt: time.Unix(0, int64(i)), UpdatedAt: time.Unix(0, int64(i))}
}

func instanceTxns(from, n int) []store.Txn {
	txns := make([]store.Txn, n)
	for i := range n {
		in := benchInstance(from + i)
		txns[i] = store.Txn{Ops: []store.Op{{Kind: store.Instances, Key: in.ID, Value: in.AppendBinary(nil), Object: in}}}
	}
	return txns
}

// BenchmarkCommit: one commit of a batch of single-instance requests, as
// the registry's group commit sends it (ns/op per commit).
func BenchmarkCommit(b *testing.B) {
	for _, batch := range []int{1, 16, 128, 512} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			s := open(b, mysqltest.URL(b, ""), Options{})
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				if _, err := s.Commit(instanceTxns(n, batch), true); err != nil {
					b.Fatal(err)
				}
				n += batch
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "instances/s")
		})
	}
}

// BenchmarkLoad: reading back every instance, as a joining server does.
func BenchmarkLoad(b *testing.B) {
	const total = 20000
	s := open(b, mysqltest.URL(b, ""), Options{})
	for i := 0; i < total; i += 1000 {
		if _, err := s.Commit(instanceTxns(i, 1000), true); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		if _, err := s.Load([]store.Kind{store.Instances}, func(store.Record) error { n++; return nil }); err != nil || n != total {
			b.Fatal(n, err)
		}
	}
	b.ReportMetric(float64(total*b.N)/b.Elapsed().Seconds(), "instances/s")
}

// BenchmarkChangeRead: one read of one revision from the change table, as
// a follower does at each announcement, with a cancellable context (the
// driver hands the query to its cancel watcher and back) and without
// (fetch's since issue 46). p50 and p99 of the reads beside ns/op: the
// hand-offs cost most when the machine is loaded.
func BenchmarkChangeRead(b *testing.B) {
	s := open(b, mysqltest.URL(b, ""), Options{})
	res, err := s.Commit(instanceTxns(0, 1), true)
	if err != nil || res[0].Err != nil {
		b.Fatal(err, res)
	}
	rev := res[0].Revision
	const q = "SELECT revision, seq, kind, rkey, value, committed_ns FROM sx_change WHERE revision > ? AND revision <= ? ORDER BY revision, seq LIMIT ?"
	for _, mode := range []string{"cancel", "none"} {
		b.Run("ctx="+mode, func(b *testing.B) {
			b.ReportAllocs()
			var took []time.Duration
			for b.Loop() {
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
				if mode == "none" {
					ctx = context.WithoutCancel(ctx)
				}
				changes, _, err := s.readChanges(ctx, q, rev-1, rev, fetchRows)
				cancel()
				if err != nil || len(changes) != 1 {
					b.Fatalf("read %d changes: %v", len(changes), err)
				}
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-us")
			b.ReportMetric(float64(took[(len(took)-1)*99/100].Microseconds()), "p99-us")
		})
	}
}
