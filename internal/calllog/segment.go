package calllog

import (
	"cmp"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/callstore"
)

// segment is one callstore of a partition, covering a span of time.
type segment struct {
	dir        string
	start      int64
	minT, maxT int64        // record t bounds; maxT is MaxInt64 while unknown
	bytes      atomic.Int64 // size on disk as last measured: written by the writer, read by Bytes under l.mu
	sealed     bool

	// Guarded by Log.mu.
	store   *callstore.Store
	refs    int
	lastUse time.Time
	deleted bool
}

// maxOpenSealed bounds the sealed segments kept open for queries.
const maxOpenSealed = 8

// load finds the partitions and segments already on disk; every segment
// found is sealed (a new one is started on the first write).
func (l *Log) load() error {
	ents, err := os.ReadDir(l.opts.Dir)
	if err != nil {
		return fmt.Errorf("calllog: %w", err)
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		svc, err := url.PathUnescape(e.Name())
		if err != nil {
			continue
		}
		p, err := l.openPartition(svc)
		if err != nil {
			return err
		}
		segs, err := os.ReadDir(p.dir)
		if err != nil {
			return fmt.Errorf("calllog: %w", err)
		}
		for _, s := range segs {
			start, ok := strings.CutPrefix(s.Name(), "seg-")
			if !s.IsDir() || !ok {
				continue
			}
			n, err := strconv.ParseInt(start, 10, 64)
			if err != nil {
				continue
			}
			sg := &segment{dir: filepath.Join(p.dir, s.Name()), start: n, minT: math.MinInt64, maxT: math.MaxInt64, sealed: true}
			if b, err := os.ReadFile(filepath.Join(sg.dir, "bounds")); err == nil {
				fmt.Sscan(string(b), &sg.minT, &sg.maxT)
			}
			sg.bytes.Store(dirBytes(sg.dir))
			p.segs = append(p.segs, sg)
		}
		slices.SortFunc(p.segs, func(a, b *segment) int { return cmp.Compare(a.start, b.start) })
		l.parts[svc] = p
	}
	return nil
}

// startSegment opens a new segment for writing. Writer goroutine.
func (l *Log) startSegment(p *partition, now time.Time) error {
	start := now.UnixNano()
	if n := len(p.segs); n > 0 && p.segs[n-1].start >= start {
		start = p.segs[n-1].start + 1
	}
	sg := &segment{dir: filepath.Join(p.dir, "seg-"+strconv.FormatInt(start, 10)), start: start,
		minT: math.MaxInt64, maxT: math.MaxInt64}
	st, err := callstore.Open(sg.dir, l.opts.Store)
	if err != nil {
		os.RemoveAll(sg.dir) // what it made of it (a full disk: tried again at each flush)
		return fmt.Errorf("calllog: %s: %w", p.service, err)
	}
	w, err := st.Writer()
	if err != nil {
		st.Close()
		os.RemoveAll(sg.dir)
		return fmt.Errorf("calllog: %s: %w", p.service, err)
	}
	sg.store = st
	l.mu.Lock()
	p.segs = append(p.segs, sg)
	l.mu.Unlock()
	p.active, p.w, p.lastT = sg, w, math.MinInt64
	return nil
}

// seal closes the active segment for writing and records its bounds.
func (l *Log) seal(p *partition) error {
	sg := p.active
	if err := p.w.Close(); err != nil {
		return fmt.Errorf("calllog: %w", err)
	}
	p.w = nil
	if err := sg.store.Sync(); err != nil {
		return fmt.Errorf("calllog: %w", err) // still active: failed retires it
	}
	p.active = nil
	p.unsynced = false
	sg.maxT = p.lastT
	if sg.minT == math.MaxInt64 {
		sg.minT, sg.maxT = sg.start, sg.start
	}
	b := fmt.Sprintf("%d %d\n", sg.minT, sg.maxT)
	if err := os.WriteFile(filepath.Join(sg.dir, "bounds"), []byte(b), 0o600); err != nil {
		return fmt.Errorf("calllog: %w", err)
	}
	sg.bytes.Store(dirBytes(sg.dir))
	l.mu.Lock()
	sg.sealed = true
	sg.lastUse = l.opts.Now()
	l.evictLocked()
	l.mu.Unlock()
	return nil
}

// retain deletes sealed segments older than MaxAge, then the oldest sealed
// segments while the log is larger than MaxBytes. Writer goroutine.
func (l *Log) retain() error {
	cutoff := l.opts.Now().Add(-l.opts.MaxAge).UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	var total int64
	var sealed []*segment
	owner := map[*segment]*partition{}
	for _, p := range l.parts {
		for _, s := range p.segs {
			total += s.bytes.Load()
			if s.sealed {
				sealed = append(sealed, s)
				owner[s] = p
			}
		}
	}
	slices.SortFunc(sealed, func(a, b *segment) int { return cmp.Compare(a.maxT, b.maxT) })
	var first error
	for _, s := range sealed {
		if s.maxT >= cutoff && total <= l.opts.MaxBytes {
			break
		}
		total -= s.bytes.Load()
		p := owner[s]
		p.segs = slices.DeleteFunc(p.segs, func(x *segment) bool { return x == s })
		s.deleted = true
		if s.refs == 0 {
			if err := l.removeLocked(s); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// removeLocked closes and deletes a segment; Log.mu is held.
func (l *Log) removeLocked(s *segment) error {
	if s.store != nil {
		s.store.Close()
		s.store = nil
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("calllog: retention: %w", err)
	}
	return nil
}

// evictLocked closes the least recently used sealed segments beyond
// maxOpenSealed that no query holds.
func (l *Log) evictLocked() {
	var open []*segment
	for _, p := range l.parts {
		for _, s := range p.segs {
			if s.sealed && s.store != nil && s.refs == 0 {
				open = append(open, s)
			}
		}
	}
	if len(open) <= maxOpenSealed {
		return
	}
	slices.SortFunc(open, func(a, b *segment) int { return a.lastUse.Compare(b.lastUse) })
	for _, s := range open[:len(open)-maxOpenSealed] {
		s.store.Close()
		s.store = nil
	}
}

// dirBytes is the size of the files in dir.
func dirBytes(dir string) int64 {
	var n int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && !e.IsDir() {
			n += fi.Size()
		}
	}
	return n
}
