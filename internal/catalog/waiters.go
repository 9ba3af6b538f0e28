package catalog

import (
	"sync"
	"sync/atomic"

	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
)

type waitKey struct {
	kind  store.Kind
	group naming.ServiceKey
}

// waiters holds one channel per group being waited on, closed on its next
// change. An entry lives while someone waits on it: groups are named by
// clients (any service name), so an entry nobody waits on any more is
// dropped rather than kept until a change that may never come.
type waiters struct {
	mu     sync.Mutex
	m      map[waitKey]*waitEntry
	active atomic.Int64
}

type waitEntry struct {
	ch chan struct{}
	n  int // waiters holding ch
}

// acquire returns the channel of k's next change; the caller must release
// it when it stops waiting.
func (w *waiters) acquire(k waitKey) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.m[k]
	if e == nil {
		e = &waitEntry{ch: make(chan struct{})}
		w.m[k] = e
	}
	e.n++
	return e.ch
}

// release ends a wait on ch acquired for k. A channel already closed (and
// so removed) by a change is not k's entry any more: nothing to do.
func (w *waiters) release(k waitKey, ch <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.m[k]; e != nil && e.ch == ch {
		if e.n--; e.n == 0 {
			delete(w.m, k)
		}
	}
}

func (w *waiters) notify(changes []Change) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.m) == 0 {
		return
	}
	for _, c := range changes {
		k := waitKey{c.Kind, c.Key}
		if e := w.m[k]; e != nil {
			close(e.ch)
			delete(w.m, k)
		}
	}
}

func (w *waiters) notifyAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, e := range w.m {
		close(e.ch)
		delete(w.m, k)
	}
}
