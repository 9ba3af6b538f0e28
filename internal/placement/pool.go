package placement

import (
	"runtime"
	"sync"
)

// parallelFrom is the work size (nodes) from which a loop is split over the
// pool: below it the hand-off costs more than it saves.
const parallelFrom = 8192

// pool is a fixed set of goroutines that run the chunks of one loop at a
// time for the writer (the goroutine holding the writer lock), which runs
// the first chunk itself. Reused goroutines keep their grown stacks (the
// seed's morestack cost). Close stops them.
type pool struct {
	work chan func()
	stop chan struct{}
	wg   sync.WaitGroup
	n    int // goroutines, plus the caller
	from int // parallelFrom, lowered by tests
}

func newPool(workers int) *pool {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	p := &pool{work: make(chan func()), stop: make(chan struct{}), n: workers, from: parallelFrom}
	for range workers - 1 {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for {
				select {
				case f := <-p.work:
					f()
				case <-p.stop:
					return
				}
			}
		}()
	}
	return p
}

// parts is how many chunks run splits a loop of n (by units of weight
// nodes each) into.
func (p *pool) parts(n, weight int) int {
	if p == nil || n*weight < p.from {
		return 1
	}
	return p.n
}

// run calls fn over [0, n) split into parts contiguous chunks (from
// p.parts), in parallel, and returns when every chunk is done.
func (p *pool) run(n, parts int, fn func(chunk, lo, hi int)) {
	if parts == 1 {
		fn(0, 0, n)
		return
	}
	var wg sync.WaitGroup
	size := (n + parts - 1) / parts
	for c := 1; c < parts; c++ {
		lo, hi := min(c*size, n), min((c+1)*size, n)
		wg.Add(1)
		p.work <- func() {
			defer wg.Done()
			fn(c, lo, hi)
		}
	}
	fn(0, 0, min(size, n))
	wg.Wait()
}

func (p *pool) close() {
	if p == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
}
