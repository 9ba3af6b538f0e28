package gateway

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestH2sWorkersReused: sequential streams run on the workers of the
// streams before them, not on a new goroutine each; Shutdown stops the
// idle workers and a worker finishing after it stops too.
func TestH2sWorkersReused(t *testing.T) {
	s, addr := serveFrameH2Server(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http2.Transport{AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, a string, _ *tls.Config) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, a)
		}}}
	const calls = 40
	for i := range calls {
		res, err := client.Get("http://" + addr + "/")
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	// The last stream's worker parks after its answer went out, so maybe
	// after the client read it: wait for it (a loaded machine failed this
	// when it was read at once).
	var started, idle int
	for wait := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		s.workers.mu.Lock()
		started, idle = s.workers.started, len(s.workers.idle)
		s.workers.mu.Unlock()
		if idle > 0 || time.Now().After(wait) {
			break
		}
	}
	// A stream may open before the worker of the one before it parked.
	if started == 0 || started > calls/4 {
		t.Errorf("%d workers started for %d sequential streams, want 1 to %d", started, calls, calls/4)
	}
	if idle == 0 {
		t.Error("no idle worker after the streams ended")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	s.workers.mu.Lock()
	idle = len(s.workers.idle)
	s.workers.mu.Unlock()
	if idle != 0 {
		t.Errorf("%d idle workers after Shutdown", idle)
	}
	if s.workers.park(&h2sWorker{jobs: make(chan h2sJob, 1)}) {
		t.Error("a worker parked after Shutdown")
	}
}

// TestH2sWorkersIdleStopped: a worker idle past h2sWorkerIdle is stopped
// when another parks, and no more than h2sIdleWorkers wait.
func TestH2sWorkersIdleStopped(t *testing.T) {
	var p h2sWorkers
	old := &h2sWorker{jobs: make(chan h2sJob, 1)}
	if !p.park(old) {
		t.Fatal("park refused")
	}
	p.idle[0].since = time.Now().Add(-h2sWorkerIdle - time.Second)
	fresh := &h2sWorker{jobs: make(chan h2sJob, 1)}
	if !p.park(fresh) {
		t.Fatal("park refused")
	}
	if _, open := <-old.jobs; open {
		t.Fatal("the stale worker got a job, want its channel closed")
	}
	if len(p.idle) != 1 || p.idle[0] != fresh {
		t.Fatalf("idle %v, want the fresh worker alone", p.idle)
	}
	for len(p.idle) < h2sIdleWorkers {
		if !p.park(&h2sWorker{jobs: make(chan h2sJob, 1)}) {
			t.Fatalf("park refused at %d idle", len(p.idle))
		}
	}
	if p.park(&h2sWorker{jobs: make(chan h2sJob, 1)}) {
		t.Fatalf("a worker parked past %d idle", h2sIdleWorkers)
	}
	p.close()
	if _, open := <-fresh.jobs; open {
		t.Fatal("close left an idle worker running")
	}
}
