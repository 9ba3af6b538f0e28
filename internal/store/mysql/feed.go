package mysql

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/store"
)

// recentFeed holds the recent commits this process knows the changes of
// without reading the change table: its own, with the writer's objects,
// and the other servers' that their announcements carried (wake.go). A
// commit at revisions first..last is taken as is by a follower at
// revision first-1: the sequence lock orders every commit, so everything
// up to first-1 was committed before it. Commits are kept by revision,
// whatever order they arrive in, each once; a follower that finds a gap
// before the next one it holds reads the change table for the gap.
type recentFeed struct {
	mu      sync.Mutex
	commits []recentCommit // ascending, never overlapping
	ops     int
	bytes   int
	wake    chan struct{} // closed and replaced at each add
	closed  bool
	// nudges counts the announcements without changes: a follower that
	// sees it move reads the change table before it waits again.
	nudges atomic.Int64
}

type recentCommit struct {
	changes []store.Change // whole revisions, consecutive
	ops     int
	bytes   int // of keys and values
}

func (c recentCommit) first() int64 { return c.changes[0].Revision }
func (c recentCommit) last() int64  { return c.changes[len(c.changes)-1].Revision }

// maxRecentOps and maxRecentBytes (of keys and values) bound what
// recentFeed keeps; a follower further behind reads the change table
// instead.
const (
	maxRecentOps   = 1 << 16
	maxRecentBytes = 64 << 20
)

func (l *recentFeed) init() { l.wake = make(chan struct{}) }

// add keeps one commit's changes (consecutive revisions) and wakes the
// followers; it reports false, and keeps nothing, when the feed holds any
// of these revisions already (a duplicated or replayed announcement).
func (l *recentFeed) add(changes []store.Change) bool {
	if len(changes) == 0 {
		return false
	}
	c := recentCommit{changes: changes}
	for _, ch := range changes {
		c.ops += len(ch.Ops)
		for _, op := range ch.Ops {
			c.bytes += len(op.Key) + len(op.Value)
		}
	}
	first, last := c.first(), c.last()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	// Most adds are the newest commit: append without a search.
	i := len(l.commits)
	if i > 0 && l.commits[i-1].last() >= first {
		i = sort.Search(len(l.commits), func(i int) bool { return l.commits[i].first() > first })
		if (i > 0 && l.commits[i-1].last() >= first) || (i < len(l.commits) && l.commits[i].first() <= last) {
			return false
		}
	}
	l.commits = slices.Insert(l.commits, i, c)
	l.ops += c.ops
	l.bytes += c.bytes
	drop := 0
	for (l.ops > maxRecentOps || l.bytes > maxRecentBytes) && drop < len(l.commits)-1 {
		l.ops -= l.commits[drop].ops
		l.bytes -= l.commits[drop].bytes
		drop++
	}
	if drop > 0 {
		l.commits = append([]recentCommit(nil), l.commits[drop:]...)
	}
	close(l.wake)
	l.wake = make(chan struct{})
	return true
}

// nudge wakes the waiting followers without a commit to add: another
// server announced one without its changes, which they read from the
// change table.
func (l *recentFeed) nudge() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.nudges.Add(1) // before the close: a woken follower sees it
		close(l.wake)
		l.wake = make(chan struct{})
	}
}

func (l *recentFeed) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.wake)
	}
}

// after returns the held changes that follow pos without a gap, or none
// and the first held revision above pos (0: none), and the channel the
// next add closes.
func (l *recentFeed) after(pos int64) ([]store.Change, int64, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := sort.Search(len(l.commits), func(i int) bool { return l.commits[i].last() > pos })
	if i == len(l.commits) {
		return nil, 0, l.wake
	}
	c := l.commits[i]
	if c.first() > pos+1 {
		return nil, c.first(), l.wake
	}
	j := sort.Search(len(c.changes), func(j int) bool { return c.changes[j].Revision > pos })
	out := c.changes[j:len(c.changes):len(c.changes)]
	// Later commits that continue without a gap go along.
	for _, n := range l.commits[i+1:] {
		if n.first() != out[len(out)-1].Revision+1 {
			break
		}
		out = append(out[:len(out):len(out)], n.changes...)
	}
	return out, 0, l.wake
}

// Follow returns a feed of every change committed after revision since,
// by any server. A position older than the history the database keeps
// answers ErrCompacted from Next.
func (s *Store) Follow(since int64) (store.Feed, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	if since < 0 {
		return nil, fmt.Errorf("mysql: follow from revision %d", since)
	}
	return &feed{s: s, pos: since}, nil
}

type feed struct {
	s      *Store
	pos    int64
	closed bool
	// caught is when the feed last read the change table and found
	// nothing after pos (zero: not since it last found changes), and
	// nudges the store's count of announcements without changes then.
	caught time.Time
	nudges int64
}

// fetchRows bounds the rows one read of the change table returns.
const fetchRows = 8192

// Next returns the next committed changes: straight from memory when
// they follow the position without a gap (this process's commits, and the
// others' that their announcements carried), else from the change table.
// It waits for the next local commit, another server's announcement of one
// (wake.go) or the next poll.
// An unreachable database answers an error wrapping store.ErrUnavailable;
// the feed keeps its position, so Next may be called again.
func (f *feed) Next(ctx context.Context) ([]store.Change, error) {
	s := f.s
	timer := time.NewTimer(s.opts.Poll)
	defer timer.Stop()
	for {
		if f.closed || s.closed.Load() {
			return nil, store.ErrClosed
		}
		held, nextHeld, wake := s.recent.after(f.pos)
		if len(held) > 0 {
			f.pos = held[len(held)-1].Revision
			return held, nil
		}
		// With announcements, a feed that read the change table up to
		// date less than a poll ago and has been told of nothing since
		// waits for the rest of the poll rather than read again: each
		// commit announced either arrives with its changes (held), or
		// says it did not (a nudge), or leaves a gap before a later one
		// that did. So a follower woken by a datagram is not caught in a
		// read when the next one comes.
		poll := s.opts.Poll
		if s.wake != nil && nextHeld == 0 && !f.caught.IsZero() && s.recent.nudges.Load() == f.nudges {
			poll -= time.Since(f.caught)
		}
		if poll >= s.opts.Poll || poll <= 0 {
			// A gap before the next held commit (an announcement lost or
			// not yet arrived, or one too big to carry its changes), a
			// nudge, the poll, or no announcements: read.
			upto := int64(math.MaxInt64)
			if nextHeld > 0 {
				upto = nextHeld - 1
			}
			start, nudges := time.Now(), s.recent.nudges.Load()
			changes, err := s.fetch(ctx, f.pos, upto)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err() // the caller's deadline, not the database's fault
				}
				return nil, err
			}
			if len(changes) > 0 {
				f.pos = changes[len(changes)-1].Revision
				f.caught = time.Time{} // there may be more
				return changes, nil
			}
			f.caught, f.nudges, poll = start, nudges, s.opts.Poll
		}
		timer.Reset(poll)
		select {
		case <-wake:
		case <-timer.C:
		case <-s.done:
			return nil, store.ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (f *feed) Close() { f.closed = true }

// fetch reads the whole revisions after pos, up to upto, that follow pos
// without a gap. A gap at pos+1 is compaction if the floor says so, else a
// commit not yet visible: read again at the next poll.
func (s *Store) fetch(ctx context.Context, pos, upto int64) ([]store.Change, error) {
	// The reads run without a cancellable context: with one, the driver
	// hands each query to its connection's cancel watcher and back (two
	// goroutine rendezvous, watchCancel and finish), each a scheduling
	// delay on the path of every cross-server wake-up when the machine is
	// loaded (issue 46: a third of the follower's scheduling delay in a
	// trace). A hung database still ends a read: the connection's read
	// timeout (Open: opts.Timeout + 5s) bounds it.
	ctx = context.WithoutCancel(ctx)
	start := time.Now()
	changes, full, err := s.readChanges(ctx, "SELECT revision, seq, kind, rkey, value, committed_ns FROM sx_change WHERE revision > ? AND revision <= ? ORDER BY revision, seq LIMIT ?", pos, upto, fetchRows)
	if err != nil {
		return nil, err
	}
	s.touch()
	if len(changes) == 0 {
		s.rtt.Observe(time.Since(start).Seconds())
		return nil, nil
	}
	s.reads.Inc()
	if full {
		// The last revision may be cut: drop it, unless it is the only one.
		last := changes[len(changes)-1].Revision
		if changes[0].Revision != last {
			for changes[len(changes)-1].Revision == last {
				changes = changes[:len(changes)-1]
			}
		} else if changes, _, err = s.readChanges(ctx, "SELECT revision, seq, kind, rkey, value, committed_ns FROM sx_change WHERE revision = ? ORDER BY seq", last); err != nil {
			return nil, err
		}
	}
	if changes[0].Revision != pos+1 {
		var floor int64
		if err := s.db.QueryRowContext(ctx, "SELECT revision FROM sx_compaction WHERE id = 1").Scan(&floor); err != nil {
			return nil, unavailable("read the compaction floor", err)
		}
		if floor > pos {
			return nil, fmt.Errorf("%w: changes after revision %d are no longer held (the database keeps revisions after %d)", store.ErrCompacted, pos, floor)
		}
		return nil, nil
	}
	for i := 1; i < len(changes); i++ {
		if changes[i].Revision != changes[i-1].Revision+1 {
			return changes[:i], nil
		}
	}
	return changes, nil
}

// readChanges runs a query over sx_change and groups its rows by revision;
// full reports whether it returned fetchRows rows.
func (s *Store) readChanges(ctx context.Context, query string, args ...any) ([]store.Change, bool, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, false, unavailable("read the change stream", err)
	}
	defer rows.Close()
	var (
		out       []store.Change
		n         int
		rev       int64
		seq       int
		kind, key []byte
		value     []byte
		committed int64
	)
	for rows.Next() {
		value = nil
		if err := rows.Scan(&rev, &seq, &kind, &key, &value, &committed); err != nil {
			return nil, false, fmt.Errorf("mysql: read the change stream: %w", err)
		}
		n++
		if len(kind) != 1 || !store.Kind(kind[0]).Valid() {
			return nil, false, fmt.Errorf("mysql: change row %d.%d has kind %q", rev, seq, kind)
		}
		op := store.Op{Kind: store.Kind(kind[0]), Key: string(key)}
		if value != nil {
			op.Value = value // Scan into []byte copies
		}
		if len(out) == 0 || out[len(out)-1].Revision != rev {
			out = append(out, store.Change{Revision: rev, Time: committed})
		}
		c := &out[len(out)-1]
		c.Ops = append(c.Ops, op)
	}
	if err := rows.Err(); err != nil {
		return nil, false, unavailable("read the change stream", err)
	}
	return out, n == fetchRows, nil
}

// compactLoop keeps the change table to the last History revisions.
// Every server runs it; deletes of the same rows are idempotent. The floor
// moves before the rows go, so a follower that finds a gap knows why.
func (s *Store) compactLoop() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		if err := s.compact(); err != nil && !s.closed.Load() {
			s.log.Warn("compacting the change stream failed", "err", err)
		}
	}
}

// compact deletes change rows older than the kept history.
func (s *Store) compact() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	var head, floor int64
	if err := s.db.QueryRowContext(ctx, "SELECT s.revision, c.revision FROM sx_sequence s, sx_compaction c WHERE s.id = 1 AND c.id = 1").Scan(&head, &floor); err != nil {
		return unavailable("read the compaction floor", err)
	}
	target := head - s.opts.History
	// Compact in steps of at least 1% of the history: fewer, larger deletes.
	if target <= floor || target-floor < max(1, s.opts.History/100) {
		return nil
	}
	if _, err := s.db.ExecContext(ctx, "UPDATE sx_compaction SET revision = GREATEST(revision, ?) WHERE id = 1", target); err != nil {
		return unavailable("move the compaction floor", err)
	}
	for {
		res, err := s.db.ExecContext(ctx, "DELETE FROM sx_change WHERE revision <= ? ORDER BY revision LIMIT 10000", target)
		if err != nil {
			return unavailable("delete old changes", err)
		}
		if n, _ := res.RowsAffected(); n < 10000 {
			return nil
		}
		select {
		case <-s.done:
			return nil
		default:
		}
	}
}

// CompactNow runs one compaction pass at once (tests and tools).
func (s *Store) CompactNow() error { return s.compact() }
