package calllog

import "testing"

// TestQueue: records come out in the order put, across chunks; put
// refuses beyond max until the writer takes; chunks given back are reused
// and hold nothing of the records before.
func TestQueue(t *testing.T) {
	q := queue{max: chunkLen*2 + 10}
	var held [][]Record
	for round := range 3 {
		n := 0
		for i := range q.max + 5 {
			if q.put(&Record{Start: int64(i), Service: "s"}) {
				n++
			}
		}
		if n != q.max {
			t.Fatalf("round %d: %d put of %d, want %d (the rest refused)", round, n, q.max+5, q.max)
		}
		held = q.take(held)
		var got []int64
		for _, c := range held {
			for _, r := range c {
				got = append(got, r.Start)
			}
		}
		if len(got) != q.max {
			t.Fatalf("round %d: took %d records, want %d", round, len(got), q.max)
		}
		for i, s := range got {
			if s != int64(i) {
				t.Fatalf("round %d: record %d is %d: out of order", round, i, s)
			}
		}
		if len(held) != 3 {
			t.Fatalf("round %d: %d chunks, want 3", round, len(held))
		}
		kept := held[0][:1]
		q.giveBack(held)
		if kept[0].Service != "" {
			t.Fatalf("round %d: a chunk given back still holds %+v", round, kept[0])
		}
		held = held[:0]
		if round > 0 && len(q.free) != 3 {
			t.Fatalf("round %d: %d free chunks, want the 3 reused", round, len(q.free))
		}
	}
}
