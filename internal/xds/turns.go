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
)

// turns hands out the right to send a large response. Lock order:
// subscriber.mu, then turns.mu.
type turns struct {
	hold    time.Duration // maxTurn
	mu      sync.Mutex
	free    int
	waiting []*subscriber // FIFO; a subscriber is in it at most once
}

// turn is one granted right; it ends when the client answers the response
// sent with it, after maxTurn, or when its subscriber is gone.
type turn struct {
	tu    *turns
	done  atomic.Bool
	timer *time.Timer
}

// newTurns: two turns a core keep the cores busy while clients answer.
func newTurns() *turns { return &turns{hold: maxTurn, free: 2 * runtime.GOMAXPROCS(0)} }

// newTurn starts a turn's clock. Called with tu.mu held.
func (tu *turns) newTurn() *turn {
	t := &turn{tu: tu}
	t.timer = time.AfterFunc(tu.hold, t.expire)
	return t
}

// release ends the turn; it is safe to call more than once.
func (t *turn) release() {
	if t == nil || !t.done.CompareAndSwap(false, true) {
		return
	}
	t.timer.Stop()
	t.tu.put()
}

// expire ends the turn at maxTurn (on the timer's goroutine, which must not
// read t.timer: it may run before newTurn has set it).
func (t *turn) expire() {
	if t.done.CompareAndSwap(false, true) {
		t.tu.put()
	}
}

// take returns sub's turn: one granted to it while it waited, or a free
// one. With none, sub waits in line (it is poked when granted one) and take
// returns nil. A turn granted but expired before sub came for it (its send
// goroutine did not run within maxTurn, on a loaded machine) puts sub back
// at the head of the line, not the tail: at the tail, behind 199 others
// under endpoint churn, a DestinationRule change waited seconds.
func (tu *turns) take(sub *subscriber) *turn {
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
	if tu.free > 0 {
		tu.free--
		return tu.newTurn()
	}
	if !sub.inLine && !sub.gone {
		sub.inLine = true
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

// put gives a turn back: to the first subscriber in line, or to the pool.
func (tu *turns) put() {
	tu.mu.Lock()
	for len(tu.waiting) > 0 {
		s := tu.waiting[0]
		tu.waiting[0] = nil
		tu.waiting = tu.waiting[1:]
		s.inLine = false
		if s.gone {
			continue
		}
		s.granted = tu.newTurn()
		tu.mu.Unlock()
		s.poke()
		return
	}
	tu.free++
	tu.mu.Unlock()
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
