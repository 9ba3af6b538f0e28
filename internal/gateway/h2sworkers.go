package gateway

import (
	"net/http"
	"sync"
	"time"
)

// h2sWorkers runs an h2Server's stream handlers on goroutines that outlive
// one stream. A new goroutine's stack starts small and is grown (copied)
// to a handler's depth on every call (runtime.newstack under routeCall:
// 5% of BenchmarkGRPCUnary's CPU, client and server included); a worker's
// stays grown between calls. At most h2sIdleWorkers wait idle; the oldest is
// stopped once idle for h2sWorkerIdle (checked as workers park, so no
// goroutine watches them), and Shutdown stops them all.
type h2sWorkers struct {
	mu      sync.Mutex
	idle    []*h2sWorker // the most recently parked last
	closed  bool
	started int // workers started, for tests
}

const (
	h2sIdleWorkers = 256
	h2sWorkerIdle  = 10 * time.Second
)

type h2sWorker struct {
	jobs  chan h2sJob // one at a time; closed to stop the worker
	since time.Time   // parked at
}

type h2sJob struct {
	st  *h2sStream
	req *http.Request
}

// run runs st's handler with req on an idle worker, or a new one.
func (p *h2sWorkers) run(st *h2sStream, req *http.Request) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.jobs <- h2sJob{st: st, req: req} // buffered: the worker is waiting or about to
		return
	}
	p.started++
	p.mu.Unlock()
	w := &h2sWorker{jobs: make(chan h2sJob, 1)}
	go w.loop(p, h2sJob{st: st, req: req})
}

func (w *h2sWorker) loop(p *h2sWorkers, j h2sJob) {
	for {
		j.st.run(j.req)
		if !p.park(w) {
			return
		}
		var ok bool
		if j, ok = <-w.jobs; !ok {
			return
		}
	}
}

// park makes w idle; false: w is to stop (the pool is closed or full).
// It stops the oldest idle worker if that one idled past h2sWorkerIdle.
func (p *h2sWorkers) park(w *h2sWorker) bool {
	now := time.Now()
	p.mu.Lock()
	if p.closed || len(p.idle) >= h2sIdleWorkers {
		p.mu.Unlock()
		return false
	}
	var stale *h2sWorker
	if len(p.idle) > 0 && now.Sub(p.idle[0].since) > h2sWorkerIdle {
		stale = p.idle[0]
		p.idle = append(p.idle[:0], p.idle[1:]...)
	}
	w.since = now
	p.idle = append(p.idle, w)
	p.mu.Unlock()
	if stale != nil {
		close(stale.jobs)
	}
	return true
}

// close stops the idle workers, and the others as they finish.
func (p *h2sWorkers) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, w := range idle {
		close(w.jobs)
	}
}
