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

// TestQueueReady: the writer is signalled when a chunk fills, not before,
// and a signal not yet taken does not block the calls.
func TestQueueReady(t *testing.T) {
	q := queue{max: chunkLen * 4, ready: make(chan struct{}, 1)}
	signalled := func() bool {
		select {
		case <-q.ready:
			return true
		default:
			return false
		}
	}
	for i := range chunkLen - 1 {
		q.put(&Record{Start: int64(i)})
	}
	if signalled() {
		t.Fatal("signalled before a chunk filled")
	}
	q.put(&Record{})
	if !signalled() {
		t.Fatal("a full chunk did not signal the writer")
	}
	for range chunkLen * 2 { // two more chunks, the signal not taken between
		q.put(&Record{})
	}
	if !signalled() || signalled() {
		t.Fatal("want one signal pending for the chunks filled since the last taken")
	}
}
