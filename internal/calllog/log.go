package calllog

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/callstore"
)

// Options configure a Log; zero values are defaults.
type Options struct {
	// Dir holds the partitions. Required.
	Dir string
	// SegmentSpan starts a new segment of a service after this long
	// (default 1h); SegmentBytes after this many bytes (default
	// MaxBytes/16, at least 1 MiB). Retention deletes whole segments.
	SegmentSpan  time.Duration
	SegmentBytes int64
	// MaxAge deletes segments whose newest record is older (default 7 days).
	MaxAge time.Duration
	// MaxBytes deletes the oldest sealed segments, over all services, while
	// the log is larger (default 10 GiB). Segments being written are never
	// deleted, so the log can exceed it by up to one segment per service.
	MaxBytes int64
	// FlushInterval makes recorded calls visible to queries at least this
	// often (default 1s); SyncInterval makes them durable (default 10s).
	FlushInterval, SyncInterval time.Duration
	// QueueSize bounds the calls waiting for the writer (default 65536);
	// Record drops calls beyond it rather than slow the proxy.
	QueueSize int
	// DictLimit bounds a partition's dictionary (default 65536 names): a
	// record's request string (its path, host, method, principal, subject
	// and peer IP come from the caller) is a new name only while the
	// dictionary holds fewer; beyond it less of the request is kept
	// (partition.requestID), the dropped fields recorded as not kept
	// (Call.NotKept), never as empty. The dictionary lives as long as its
	// partition, so once full only requests it already holds are kept
	// whole. The config's strings (cluster, route, endpoint, subset,
	// detail) are always kept.
	DictLimit int
	// Store tunes each segment's callstore (default: 16384-record chunks,
	// 1024-record buckets, 1024-record writer batches).
	Store callstore.Options
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// Logger receives background errors; nil discards.
	Logger *slog.Logger
}

func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		return o, errors.New("calllog: Dir is required")
	}
	if o.SegmentSpan <= 0 {
		o.SegmentSpan = time.Hour
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 7 * 24 * time.Hour
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 10 << 30
	}
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = max(o.MaxBytes/16, 1<<20)
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = time.Second
	}
	if o.SyncInterval <= 0 {
		o.SyncInterval = 10 * time.Second
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 1 << 16
	}
	if o.DictLimit <= 0 {
		o.DictLimit = 1 << 16
	}
	if o.Store.ChunkRecords == 0 {
		o.Store.ChunkRecords = 1 << 14
	}
	if o.Store.BucketRecords == 0 {
		o.Store.BucketRecords = 1 << 10
	}
	if o.Store.WriterBatch == 0 {
		o.Store.WriterBatch = 1 << 10
	}
	if o.Store.MaxBufferedRecords == 0 {
		o.Store.MaxBufferedRecords = 1 << 17
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Store.Logger = o.Logger
	return o, nil
}

// Log is the call log. Record may be called from any goroutine; queries
// too. Open starts one goroutine, the writer, which Close stops.
//
// Lock order: Log.mu, then dict.mu. The writer goroutine owns each
// partition's pending records, active writer and dictionary file; mu guards
// the partition map and segment lists, which queries read.
type Log struct {
	opts Options
	q    queue
	req  chan chan error
	done chan struct{}
	wg   sync.WaitGroup

	// Writer goroutine only: the queue's chunks drain took, and the
	// partition of the last record added.
	held [][]Record
	last *partition

	written, dropped atomic.Uint64

	mu     sync.Mutex
	parts  map[string]*partition
	closed bool
	err    error // first background error
}

type partition struct {
	service string
	dir     string
	dict    *dict
	segs    []*segment // by start; the last may be active

	// Writer goroutine only.
	active    *segment
	w         *callstore.Writer
	lastT     int64
	pending   []entry // encoded by drain, for flush to write
	encodeErr error   // the first encoding that failed since the last flush
	unsynced  bool
	reqBuf    []byte  // requestID's
	lastReq   request // requestID's last request, as asked,
	lastID    uint32  // and its id
	lastDict  *dict   // in this dictionary (nil: none yet)
	names     nameCache
	order     []int32  // flush's: pending's indices in start order
	keys      []uint64 // inOrder's
}

// Open opens (or creates) the log in opts.Dir and starts its writer.
func Open(opts Options) (*Log, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("calllog: %w", err)
	}
	l := &Log{opts: opts, q: queue{max: opts.QueueSize, ready: make(chan struct{}, 1)}, req: make(chan chan error),
		done: make(chan struct{}), parts: map[string]*partition{}}
	if err := l.load(); err != nil {
		l.closeAll()
		return nil, err
	}
	l.wg.Add(1)
	go l.run()
	return l, nil
}

// openPartition creates or opens a service's directory and dictionary.
func (l *Log) openPartition(service string) (*partition, error) {
	dir := filepath.Join(l.opts.Dir, url.PathEscape(service))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("calllog: %w", err)
	}
	d, err := openDict(filepath.Join(dir, "names.log"))
	if err != nil {
		return nil, err
	}
	return &partition{service: service, dir: dir, dict: d, lastT: math.MinInt64}, nil
}

// Record queues one call. Any goroutine; it never blocks: when the queue
// is full the call is dropped and counted (Counts).
func (l *Log) Record(r Record) {
	if !l.q.put(&r) {
		l.dropped.Add(1)
	}
}

// Counts returns how many calls were written and dropped so far.
func (l *Log) Counts() (written, dropped uint64) { return l.written.Load(), l.dropped.Load() }

// Flush makes every call recorded before it visible to queries (not
// necessarily durable). Any goroutine; it waits for the writer.
func (l *Log) Flush() error {
	ch := make(chan error, 1)
	select {
	case l.req <- ch:
		return <-ch
	case <-l.done:
		return errors.New("calllog: closed")
	}
}

// Close writes and syncs what is queued and closes every segment.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	close(l.done)
	l.wg.Wait()
	return l.closeAll()
}

func (l *Log) closeAll() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first error
	for _, p := range l.parts {
		if p.w != nil {
			if err := p.w.Close(); err != nil && first == nil {
				first = err
			}
		}
		for _, s := range p.segs {
			if s.store != nil {
				if err := s.store.Close(); err != nil && first == nil {
					first = err
				}
				s.store = nil
			}
		}
		if err := p.dict.close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// run is the writer goroutine.
func (l *Log) run() {
	defer l.wg.Done()
	flush := time.NewTicker(l.opts.FlushInterval)
	defer flush.Stop()
	// The writer takes queued calls when a chunk of them is full (the
	// queue's ready) and before each flush: a call wakes it once per
	// chunk, not per record (a futex call per record at proxy rates), and
	// an idle gateway not at all.
	lastSync, lastRetention := l.opts.Now(), time.Time{}
	for {
		select {
		case <-l.q.ready:
			l.drain()
		case <-flush.C:
			l.drain()
			now := l.opts.Now()
			durable := now.Sub(lastSync) >= l.opts.SyncInterval
			if durable {
				lastSync = now
			}
			l.note(l.flushAll(durable))
			if now.Sub(lastRetention) >= min(l.opts.FlushInterval*10, time.Minute) {
				lastRetention = now
				l.note(l.retain())
			}
		case ch := <-l.req:
			l.drain()
			ch <- l.flushAll(false)
		case <-l.done:
			l.drain()
			l.note(l.flushAll(true))
			return
		}
	}
}

func (l *Log) note(err error) {
	if err == nil {
		return
	}
	l.opts.Logger.Error("calllog: background write failed", "err", err)
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.mu.Unlock()
}

func (l *Log) drain() {
	l.held = l.q.take(l.held)
	for _, c := range l.held {
		for i := range c {
			l.add(&c[i])
		}
	}
	// Encoded: the chunks go back to the queue while they are still in
	// the cache (the calls copy their next records into them).
	l.q.giveBack(l.held)
	l.held = l.held[:0]
}

func (l *Log) add(r *Record) {
	p := l.last
	if p == nil || p.service != r.Service {
		l.mu.Lock()
		p = l.parts[r.Service]
		l.mu.Unlock()
	}
	if p == nil {
		var err error
		if p, err = l.openPartition(r.Service); err != nil {
			l.note(err)
			l.dropped.Add(1)
			return
		}
		l.mu.Lock()
		l.parts[r.Service] = p
		l.mu.Unlock()
	}
	l.last = p
	e, err := l.encode(p, r)
	if err != nil {
		// A dictionary that takes no more appends (a full disk) fails
		// the partition's pending calls as a failed flush does; the next
		// flush reports it, once.
		if p.encodeErr == nil {
			p.encodeErr = err
			l.failed(p)
		}
		l.dropped.Add(1)
		return
	}
	p.pending = append(p.pending, e)
}

// flushAll writes every partition's pending calls in start order and makes
// them visible (durable: synced). Writer goroutine.
func (l *Log) flushAll(durable bool) error {
	l.mu.Lock()
	parts := make([]*partition, 0, len(l.parts))
	for _, p := range l.parts {
		parts = append(parts, p)
	}
	l.mu.Unlock()
	var first error
	for _, p := range parts {
		if err := p.encodeErr; err != nil {
			p.encodeErr = nil
			if first == nil {
				first = err
			}
		}
		if err := l.flush(p, durable); err != nil {
			l.failed(p)
			if first == nil {
				first = err
			}
		}
	}
	return first
}

func (l *Log) flush(p *partition, durable bool) error {
	if len(p.pending) == 0 && !(durable && p.unsynced) {
		return nil
	}
	now := l.opts.Now()
	if p.active != nil && (now.UnixNano()-p.active.start >= int64(l.opts.SegmentSpan) || p.active.bytes.Load() >= l.opts.SegmentBytes) {
		if err := l.seal(p); err != nil {
			return err
		}
	}
	if p.active == nil && len(p.pending) > 0 {
		if err := l.startSegment(p, now); err != nil {
			return err
		}
	}
	recs := p.pending
	ord := p.inOrder()
	var late []entry
	seg := p.active
	for _, i := range ord {
		e := &recs[i]
		if e.t < p.lastT {
			late = append(late, *e) // started before calls already written
			continue
		}
		if err := p.w.Put(e.t, e.a, e.body); err != nil {
			return fmt.Errorf("calllog: %s: %w", p.service, err)
		}
		p.lastT = e.t
	}
	if len(late) > 0 {
		// A short-lived writer for calls that ended after later-started
		// calls were written: the store keeps them as a separate run.
		lw, err := seg.store.Writer()
		if err != nil {
			return fmt.Errorf("calllog: %w", err)
		}
		for j := range late {
			if err := lw.Put(late[j].t, late[j].a, late[j].body); err != nil {
				lw.Close()
				return fmt.Errorf("calllog: %s: %w", p.service, err)
			}
		}
		if err := lw.Close(); err != nil {
			return fmt.Errorf("calllog: %w", err)
		}
	}
	if len(recs) > 0 {
		seg.minT = min(seg.minT, recs[ord[0]].t)
		if len(late) > 0 {
			seg.minT = min(seg.minT, late[0].t)
		}
		p.unsynced = true
	}
	if err := p.dict.sync(); err != nil {
		return err
	}
	var err error
	if durable {
		err = seg.store.Sync()
		p.unsynced = false
	} else {
		err = seg.store.Flush()
	}
	if err != nil {
		return fmt.Errorf("calllog: %s: %w", p.service, err)
	}
	p.pending = recs[:0] // kept until here: a failed flush counts them dropped (failed)
	l.written.Add(uint64(len(recs)))
	seg.bytes.Store(dirBytes(seg.dir))
	return nil
}

// entry is a call as the store keeps it: its start, latency in
// microseconds and body, the names in it replaced by p's dictionary ids.
type entry struct {
	t, a int64
	body [callstore.BodySize]byte
}

// inOrder lists p's pending entries' indices in start order, ties in
// the order they came. Not the entries themselves: an entry is 66 bytes,
// which sorting would move at every swap. Writer goroutine.
func (p *partition) inOrder() []int32 {
	recs := p.pending
	ord := p.order[:0]
	if len(recs) == 0 {
		return ord
	}
	lo, hi := recs[0].t, recs[0].t
	for i := range recs {
		lo, hi = min(lo, recs[i].t), max(hi, recs[i].t)
	}
	if len(recs) <= 1<<orderIndexBits && uint64(hi)-uint64(lo) < 1<<(64-orderIndexBits) {
		// As keys of one integer each, start then index, sorted
		// without a comparison function: a flush's starts span less
		// than 4.8 hours (in ns). Four times faster than the function
		// (profiled: the sort was 1% of a loaded gateway's CPU).
		keys := p.keys[:0]
		for i := range recs {
			keys = append(keys, (uint64(recs[i].t)-uint64(lo))<<orderIndexBits|uint64(i))
		}
		slices.Sort(keys)
		for _, k := range keys {
			ord = append(ord, int32(k&(1<<orderIndexBits-1)))
		}
		p.keys, p.order = keys, ord
		return ord
	}
	for i := range recs {
		ord = append(ord, int32(i))
	}
	slices.SortFunc(ord, func(a, b int32) int {
		if c := cmp.Compare(recs[a].t, recs[b].t); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	p.order = ord
	return ord
}

// orderIndexBits is the bits of inOrder's keys an index takes.
const orderIndexBits = 20

// encode makes r p's entry (new names appended to its dictionary).
// Writer goroutine.
func (l *Log) encode(p *partition, r *Record) (entry, error) {
	b := body{reason: r.Reason, status: r.Status, retries: r.Retries, grpc: r.GRPCStatus, bytesIn: r.BytesIn, bytesOut: r.BytesOut, trace: r.TraceID}
	var err error
	if b.endpoint, err = p.names.id(p.dict, r.Endpoint); err != nil {
		return entry{}, err
	}
	if b.subset, err = p.names.id(p.dict, r.Subset); err != nil {
		return entry{}, err
	}
	if b.cluster, err = p.names.id(p.dict, r.Cluster); err != nil {
		return entry{}, err
	}
	if b.route, err = p.names.id(p.dict, r.Route); err != nil {
		return entry{}, err
	}
	q := request{detail: r.Detail, principal: r.Principal, subject: r.Subject, method: r.Method, path: r.Path,
		host: r.Host, port: r.Port, peer: r.PeerIP, conn: r.Conn, upstream: r.Upstream}
	if b.detail, err = p.requestID(&q, l.opts.DictLimit); err != nil {
		return entry{}, err
	}
	return entry{t: r.Start, a: r.Latency.Microseconds(), body: b.encode()}, nil
}

// requestID is q's dictionary id. A string the dictionary does not hold
// is taken only below limit names; else less of the call is kept, a step
// at a time (request), down to what is always kept: the detail, port and
// connection flags (few, and set by Sextant, not by callers) and a
// standard method. Writer goroutine.
func (p *partition) requestID(q *request, limit int) (uint32, error) {
	// Calls in a row are mostly one request again (a client's, to one
	// path): its id without encoding and hashing it (issue 48).
	if p.lastDict == p.dict && *q == p.lastReq {
		return p.lastID, nil
	}
	asked := *q
	id, err := p.newRequestID(q, limit)
	if err == nil {
		p.lastReq, p.lastID, p.lastDict = asked, id, p.dict
	}
	return id, err
}

func (p *partition) newRequestID(q *request, limit int) (uint32, error) {
	for _, m := range [...]dropMask{0, dropPeer, dropPath, dropPrincipal | dropSubject | dropHost} {
		q.drop(m)
		p.reqBuf = q.encode(p.reqBuf[:0])
		if id, ok := p.dict.heldBytes(p.reqBuf); ok {
			return id, nil
		}
		if p.dict.heldLen() < limit {
			return p.dict.id(string(p.reqBuf))
		}
	}
	if !standardMethod(q.method) {
		q.drop(dropMethod)
		p.reqBuf = q.encode(p.reqBuf[:0])
	}
	return p.dict.id(string(p.reqBuf))
}

// standardMethod: RFC 9110's methods and PATCH, the ones a request string
// stripped of every caller-chosen value may keep beyond the limit.
func standardMethod(m string) bool {
	switch m {
	case "", "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH":
		return true
	}
	return false
}

// Services lists the services with records, sorted.
func (l *Log) Services() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.parts))
	for s := range l.parts {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Bytes is the log's size on disk as last measured.
func (l *Log) Bytes() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, p := range l.parts {
		for _, s := range p.segs {
			n += s.bytes.Load()
		}
	}
	return n
}
