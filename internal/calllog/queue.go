package calllog

import "sync"

// chunkLen is the records of one queue chunk (some 70 KiB).
const chunkLen = 256

// queue hands the calls' records to the writer: a call copies its record
// into the current chunk under a mutex; the writer takes the chunks at
// each drain (when a chunk fills, and before each flush), encodes their
// records into its pending entries (66 bytes each, the names replaced by
// dictionary ids) and gives the chunks back at once, so a call copies its
// record into memory used moments before. A channel of Records copied each
// record twice into cold memory (into the next slot of a 16 MiB ring, then
// out to a pending list of 10 MiB a second at 37,000 calls/s, written only
// at the flush): with the runtime's channel lock, the hand-off was 4% of
// the gateway's CPU under load, profiled (issue 48).
type queue struct {
	mu     sync.Mutex
	cur    []Record   // being filled; nil: take one from free
	full   [][]Record // filled, for the writer
	free   [][]Record // given back by the writer
	queued int        // records put since the writer's last take
	max    int        // put refuses beyond this many
	// ready is signalled when a chunk fills: a wake-up of the writer per
	// chunk, none while no call comes (a drain every 10 ms woke an idle
	// gateway 100 times a second: 1% of a core on KVM).
	ready chan struct{}
}

// put queues a copy of *r; false when the queue is full.
func (q *queue) put(r *Record) bool {
	q.mu.Lock()
	if q.queued >= q.max {
		q.mu.Unlock()
		return false
	}
	if len(q.cur) == cap(q.cur) {
		if q.cur != nil {
			q.full = append(q.full, q.cur)
		}
		if n := len(q.free); n > 0 {
			q.cur, q.free = q.free[n-1], q.free[:n-1]
		} else {
			q.cur = make([]Record, 0, min(chunkLen, q.max))
		}
	}
	q.cur = append(q.cur, *r)
	q.queued++
	full := len(q.cur) == cap(q.cur)
	q.mu.Unlock()
	if full {
		select {
		case q.ready <- struct{}{}:
		default: // (signalled already)
		}
	}
	return true
}

// take appends to held the chunks of the records put since the last take.
func (q *queue) take(held [][]Record) [][]Record {
	q.mu.Lock()
	held = append(held, q.full...)
	clear(q.full)
	q.full = q.full[:0]
	if len(q.cur) > 0 {
		held = append(held, q.cur)
		q.cur = nil
	}
	q.queued = 0
	q.mu.Unlock()
	return held
}

// giveBack returns chunks taken, their records no longer needed (they are
// cleared: their strings are not kept alive).
func (q *queue) giveBack(chunks [][]Record) {
	for i, c := range chunks {
		clear(c)
		chunks[i] = c[:0]
	}
	q.mu.Lock()
	q.free = append(q.free, chunks...)
	q.mu.Unlock()
	clear(chunks)
}
