package push

import (
	"context"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/naming"
)

// TestEndpointQueueIdle: config work waits while endpoint work is queued or
// being computed, at most the time it is given, and not at all when there
// is none.
func TestEndpointQueueIdle(t *testing.T) {
	var q endpointQueue
	q.init()
	ctx := context.Background()
	start := time.Now()
	q.waitIdle(ctx, time.Hour) // idle: returns at once
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("idle queue held config work %v", took)
	}
	s := naming.ServiceKey{Namespace: "default", Name: "orders"}
	q.mark(s, time.Now())
	start = time.Now()
	q.waitIdle(ctx, 30*time.Millisecond)
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Fatalf("queued endpoint work held config work only %v", took)
	}
	if _, _, ok := q.take(); !ok {
		t.Fatal("nothing to take")
	}
	// Taken but not finished: still busy until a take finds it empty.
	done := make(chan struct{})
	go func() { q.waitIdle(ctx, time.Hour); close(done) }()
	select {
	case <-done:
		t.Fatal("config work went on while endpoint work was running")
	case <-time.After(20 * time.Millisecond):
	}
	if _, _, ok := q.take(); ok {
		t.Fatal("took a second time")
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("config work still waits once endpoint work is done")
	}
}
