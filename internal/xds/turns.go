package xds

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Large state-of-the-world responses take turns across subscribers. A
// cluster list is megabytes; sent to every subscriber at once, each
// transfer shares the CPU with all the others and lasts as long as the
// whole wave, and an endpoint change behind it on the same stream waits as
// long (seed 001's lesson, on one stream). Taking turns, a few at a time,
// each transfer is short. A subscriber without a turn sends its other types
// meanwhile and is woken when one is granted to it.
const (
	// turnBytes: state-of-the-world lists this large take turns.
	turnBytes = 64 << 10
	// maxTurn bounds how long one subscriber holds a turn: a client slow to
	// read and answer keeps its transfer, not the others' turns.
	maxTurn = 20 * time.Millisecond
	// turnBytesPerCore is how many bytes of large lists may be in flight
	// per core. Turns are counted in bytes, not lists: seed 001's 2.6 MB
	// cluster list was tuned at two turns a core (docs/perf/push.md, "Large
	// lists take turns"), which this keeps, while a 240 KB list of 800
	// clusters gets about twenty. Counted in lists, 200 such lists went four
	// at a time, each held until its client answered: under endpoint churn
	// a wave took over a second and a DestinationRule change seconds.
	turnBytesPerCore = 5 << 20
)

// turns hands out the right to send a large response. Lock order:
// subscriber.mu, then turns.mu.
type turns struct {
	hold    time.Duration // maxTurn
	mu      sync.Mutex
	budget  int           // bytes that may be in flight
	free    int           // of budget
	waiting []*subscriber // FIFO; a subscriber is in it at most once
}

// turn is one granted right to send size bytes; it ends when the client
// answers the response sent with it, after maxTurn, or when its subscriber
// is gone.
type turn struct {
	tu    *turns
	size  int
	done  atomic.Bool
	timer *time.Timer
}

// newTurns: two 2.6 MB lists a core keep the cores busy while clients
// answer.
func newTurns() *turns { return newTurnsOf(maxTurn, turnBytesPerCore*runtime.GOMAXPROCS(0)) }

func newTurnsOf(hold time.Duration, budget int) *turns {
	return &turns{hold: hold, budget: budget, free: budget}
}

// newTurn starts a turn's clock. Called with tu.mu held.
func (tu *turns) newTurn(size int) *turn {
	size = min(size, tu.budget) // a list larger than the budget goes alone
	tu.free -= size
	t := &turn{tu: tu, size: size}
	t.timer = time.AfterFunc(tu.hold, t.expire)
	return t
}

// release ends the turn; it is safe to call more than once.
func (t *turn) release() {
	if t == nil || !t.done.CompareAndSwap(false, true) {
		return
	}
	t.timer.Stop()
	t.tu.put(t.size)
}

// expire ends the turn at maxTurn (on the timer's goroutine, which must not
// read t.timer: it may run before newTurn has set it).
func (t *turn) expire() {
	if t.done.CompareAndSwap(false, true) {
		t.tu.put(t.size)
	}
}

// take returns sub's turn to send size bytes: one granted to it while it
// waited, or one from the budget when nobody waits. Otherwise sub waits in
// line (it is poked when granted one) and take returns nil. A turn granted
// but expired before sub came for it (its send goroutine did not run in
// time, on a loaded machine) puts sub back at the head of the line, not the
// tail: otherwise its list starves behind every other subscriber's.
func (tu *turns) take(sub *subscriber, size int) *turn {
	tu.mu.Lock()
	defer tu.mu.Unlock()
	front := false
	if g := sub.granted; g != nil {
		sub.granted = nil
		if !g.done.Load() {
			return g
		}
		front = true
	}
	if (len(tu.waiting) == 0 || front) && tu.fits(size) {
		return tu.newTurn(size)
	}
	if !sub.inLine && !sub.gone {
		sub.inLine = true
		sub.lineBytes = size
		if front {
			tu.waiting = append(tu.waiting, nil)
			copy(tu.waiting[1:], tu.waiting)
			tu.waiting[0] = sub
		} else {
			tu.waiting = append(tu.waiting, sub)
		}
	}
	return nil
}

// fits reports whether size bytes may go now: the budget has them, or
// nothing is in flight. Called with tu.mu held.
func (tu *turns) fits(size int) bool {
	return tu.free >= min(size, tu.budget)
}

// put gives size bytes back and grants turns to the subscribers at the head
// of the line while they fit.
func (tu *turns) put(size int) {
	tu.mu.Lock()
	tu.free += size
	var grant []*subscriber
	for len(tu.waiting) > 0 {
		s := tu.waiting[0]
		if !s.gone && !tu.fits(s.lineBytes) {
			break
		}
		tu.waiting[0] = nil
		tu.waiting = tu.waiting[1:]
		s.inLine = false
		if s.gone {
			continue
		}
		s.granted = tu.newTurn(s.lineBytes)
		grant = append(grant, s)
	}
	tu.mu.Unlock()
	for _, s := range grant {
		s.poke()
	}
}

// leave takes a subscriber whose stream ended out of line and gives back
// a turn granted to it.
func (tu *turns) leave(sub *subscriber) {
	tu.mu.Lock()
	sub.gone = true
	g := sub.granted
	sub.granted = nil
	tu.mu.Unlock()
	g.release()
}
