package xds

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ackedCount is how many ACKs of type typ the acked-latency histogram
// observed, and their sum.
func ackedCount(t *testing.T, reg *prometheus.Registry, typ string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sextant_push_acked_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "type" && l.GetValue() == typ {
					return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return 0, 0
}

// TestRepeatedNonceIsNoSecondACK: a client's later requests carry the
// nonce of the last response of their type (a subscription change, after
// a reconnect of the gateway's client): only the first answer to a
// response is an ACK, counted once in sextant_push_acked_seconds, not again
// with the time since that response's change.
func TestRepeatedNonceIsNoSecondACK(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := NewCache()
	c.Apply(TypeEndpoint, []Resource{endpoints("a", 80), endpoints("b", 81)}, nil, "1", time.Now())
	srv := NewServer(c, ServerOptions{Metrics: NewMetrics(reg)})
	sub := &subscriber{c: c, wake: make(chan struct{}, 1), ackWait: srv.ackWait}
	c.addSubscriber(sub)
	defer c.removeSubscriber(sub)
	srv.onRequest(sub, request{typeURL: TypeEndpoint.URL(), names: []string{"a"}})
	build := func() response {
		sub.mu.Lock()
		defer sub.mu.Unlock()
		r, ok := sub.build(TypeEndpoint, time.Now())
		if !ok {
			t.Fatal("no response")
		}
		return r
	}
	first := build()
	srv.onRequest(sub, request{typeURL: TypeEndpoint.URL(), names: []string{"a"}, nonce: first.nonce})
	// A change committed 20 ms ago, sent and ACKed.
	c.Apply(TypeEndpoint, []Resource{{Name: "a", Version: "2", Message: endpoints("a", 82).Message}}, nil, "2", time.Now().Add(-20*time.Millisecond))
	r := build()
	srv.onRequest(sub, request{typeURL: TypeEndpoint.URL(), names: []string{"a"}, nonce: r.nonce})
	n, sum := ackedCount(t, reg, "endpoints")
	if n != 1 || sum < 0.02 {
		t.Fatalf("after the ACK: %d observations, sum %v s; want 1 of at least 20 ms", n, sum)
	}
	// Later, the client names b too, with the same nonce.
	time.Sleep(50 * time.Millisecond)
	srv.onRequest(sub, request{typeURL: TypeEndpoint.URL(), names: []string{"a", "b"}, nonce: r.nonce})
	if n2, sum2 := ackedCount(t, reg, "endpoints"); n2 != n || sum2 != sum {
		t.Fatalf("a request repeating the nonce was counted as an ACK again: %d observations, sum %v s", n2, sum2)
	}
}
