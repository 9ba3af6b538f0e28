package catalog

import (
	"sync"
	"sync/atomic"

	"github.com/sextant-mesh/sextant/internal/store"
)

type waitKey struct {
	kind  store.Kind
	group ServiceKey
}

// waiters holds one channel per watched group, closed on its next change.
// Memory is one small entry per watched group, however many wait.
type waiters struct {
	mu     sync.Mutex
	m      map[waitKey]chan struct{}
	active atomic.Int64
}

func (w *waiters) channel(k waitKey) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := w.m[k]
	if ch == nil {
		ch = make(chan struct{})
		w.m[k] = ch
	}
	return ch
}

func (w *waiters) notify(changes []Change) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.m) == 0 {
		return
	}
	for _, c := range changes {
		k := waitKey{c.Kind, c.Key}
		if ch := w.m[k]; ch != nil {
			close(ch)
			delete(w.m, k)
		}
	}
}

func (w *waiters) notifyAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, ch := range w.m {
		close(ch)
		delete(w.m, k)
	}
}
