package balancer

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"time"
)

// A discrete-event model of the race's providers, on a fake clock, so policy
// behaviour can be tested exactly and fast (no sockets, no sleeps): each
// provider holds at most threads calls (more are rejected at once), serves
// limit of them (the rest wait in order) for an exponential service time.

type simProv struct {
	threads, limit int
	meanMs         float64
	serving        int
	queue          []*simCall
}

type simCall struct {
	client, idx int
	sent        time.Duration
}

type simEvent struct {
	at   time.Duration
	kind int // 0: call ends, 1: client sends
	call *simCall
	out  Outcome
	cli  int
}

type eventQueue []simEvent

func (q eventQueue) Len() int           { return len(q) }
func (q eventQueue) Less(i, j int) bool { return q[i].at < q[j].at }
func (q eventQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)        { *q = append(*q, x.(simEvent)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simResult struct {
	successes, rejections, sheds int
	perProv                      []int
	// bins counts successes per 100 ms of virtual time.
	bins []int
}

type simulation struct {
	provs   []*simProv
	clients int
	// change, if set, is called at each 100 ms of virtual time.
	change func(now time.Duration, provs []*simProv)
	rng    *rand.Rand
	now    time.Duration
	// q holds pending events across runs, so calls in flight at the end of
	// one run complete in the next.
	q       eventQueue
	started bool
}

func (s *simulation) clock() time.Time { return time.Unix(0, 0).Add(s.now) }

// run drives picker for dur of virtual time with clients closed-loop callers.
func (s *simulation) run(pk Picker, dur time.Duration) simResult {
	res := simResult{perProv: make([]int, len(s.provs)), bins: make([]int, int(dur/(100*time.Millisecond))+1)}
	q := &s.q
	if !s.started {
		s.started = true
		for c := range s.clients {
			heap.Push(q, simEvent{at: s.now, kind: 1, cli: c})
		}
	}
	end := s.now + dur
	nextTick := s.now
	for q.Len() > 0 {
		if (*q)[0].at > end {
			s.now = end
			break
		}
		ev := heap.Pop(q).(simEvent)
		for s.change != nil && nextTick <= ev.at {
			s.now = nextTick
			s.change(nextTick, s.provs)
			nextTick += 100 * time.Millisecond
		}
		s.now = ev.at
		switch ev.kind {
		case 1:
			idx, err := pk.Pick()
			if err != nil {
				res.sheds++
				heap.Push(q, simEvent{at: s.now + time.Millisecond, kind: 1, cli: ev.cli})
				continue
			}
			call := &simCall{client: ev.cli, idx: idx, sent: s.now}
			p := s.provs[idx]
			switch {
			case p.serving+len(p.queue) >= p.threads:
				heap.Push(q, simEvent{at: s.now + 100*time.Microsecond, call: call, out: Rejected})
			case p.serving < p.limit:
				p.serving++
				heap.Push(q, simEvent{at: s.now + s.service(p), call: call, out: Success})
			default:
				p.queue = append(p.queue, call)
			}
		case 0:
			c := ev.call
			p := s.provs[c.idx]
			if ev.out == Success {
				p.serving--
				for len(p.queue) > 0 && p.serving < p.limit {
					next := p.queue[0]
					p.queue = p.queue[1:]
					p.serving++
					heap.Push(q, simEvent{at: s.now + s.service(p), call: next, out: Success})
				}
				res.successes++
				res.perProv[c.idx]++
				res.bins[int((s.now-(end-dur))/(100*time.Millisecond))]++
			} else {
				res.rejections++
			}
			pk.Done(c.idx, s.now-c.sent, ev.out)
			heap.Push(q, simEvent{at: s.now + 200*time.Microsecond, kind: 1, cli: c.client})
		}
	}
	return res
}

func (s *simulation) service(p *simProv) time.Duration {
	ms := math.Floor(-p.meanMs*math.Log1p(-s.rng.Float64())) + 1
	return time.Duration(ms * float64(time.Millisecond))
}

// ceiling is the successes per second if every permit were always busy.
func (s *simulation) ceiling() float64 {
	c := 0.0
	for _, p := range s.provs {
		c += float64(min(p.limit, p.threads)) / (1 / (1 - math.Exp(-1/p.meanMs))) * 1000
	}
	return c
}

// raceSim is the race's first phase at scale 8: 128 callers, 127 permits.
func raceSim(seed uint64) *simulation {
	return &simulation{
		provs: []*simProv{
			{threads: 25, limit: 13, meanMs: 44.4},
			{threads: 56, limit: 51, meanMs: 62.1},
			{threads: 81, limit: 63, meanMs: 56.5},
		},
		clients: 128,
		rng:     rand.New(rand.NewPCG(seed, 1)),
	}
}

func raceEndpoints() []Endpoint {
	return []Endpoint{{ID: "small", Weight: 200}, {ID: "medium", Weight: 450}, {ID: "large", Weight: 650}}
}
