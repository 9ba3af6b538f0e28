package bench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/sextant-mesh/sextant/internal/callstore"
)

// CallstoreConfig drives RunCallstore: the race's three phases (put,
// Messages queries, AvgValue queries) against a fresh store.
type CallstoreConfig struct {
	Dir        string // must be empty or absent; removed after unless Keep
	Keep       bool
	Workload   string // "demo" (a = t = counter) or "random" (a uniform in [0, 2^48))
	Records    int64  // records to put (even counters are put twice: counters = 2/3 of this)
	Writers    int
	Readers    int
	MsgQueries int // Messages queries in phase 2
	AvgQueries int // AvgValue queries in phase 3
	Seed       uint64
	Options    callstore.Options
	Progress   io.Writer // progress bars; nil: none
}

// CallstoreResult is the JSON object the bench prints.
type CallstoreResult struct {
	Workload      string  `json:"workload"`
	Records       int64   `json:"records"`
	Writers       int     `json:"writers"`
	Readers       int     `json:"readers"`
	GOMAXPROCS    int     `json:"gomaxprocs"`
	PutSeconds    float64 `json:"put_seconds"`
	PutPerSec     float64 `json:"put_per_sec"`
	MsgQueries    int     `json:"messages_queries"`
	MsgRecords    int64   `json:"messages_records"`
	MsgSeconds    float64 `json:"messages_seconds"`
	MsgPerSec     float64 `json:"messages_per_sec"`
	AvgQueries    int     `json:"avg_queries"`
	AvgRecords    int64   `json:"avg_records"`
	AvgSeconds    float64 `json:"avg_seconds"`
	AvgPerSec     float64 `json:"avg_per_sec"`
	Score         float64 `json:"score"`
	Verified      bool    `json:"verified"`
	MsgMismatches int64   `json:"messages_mismatches"`
	AvgMismatches int64   `json:"avg_mismatches"`
	DiskBytes     int64   `json:"disk_bytes"`
	MaxRSSBytes   int64   `json:"max_rss_bytes"`
	ReopenSeconds float64 `json:"reopen_seconds"`
	PutCPU        float64 `json:"put_cpu_seconds"`
	MsgCPU        float64 `json:"messages_cpu_seconds"`
	AvgCPU        float64 `json:"avg_cpu_seconds"`
	Runs          int     `json:"runs"`
	Buckets       int     `json:"buckets"`
}

const (
	demoSpan   = 100_000
	randomAMax = 1 << 48
)

// csWorkload maps a counter to its record and draws query windows.
type csWorkload struct {
	random   bool
	counters int64
}

func (w csWorkload) a(c int64) int64 {
	if !w.random {
		return c
	}
	return int64(splitmix(uint64(c)) & (randomAMax - 1))
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func csBody(c, a int64) [callstore.BodySize]byte {
	var b [callstore.BodySize]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(c))
	binary.LittleEndian.PutUint64(b[8:], uint64(a))
	binary.LittleEndian.PutUint64(b[16:], splitmix(uint64(c)^0xabc))
	binary.LittleEndian.PutUint64(b[24:], uint64(c)*3)
	b[32], b[33] = byte(c), byte(a)
	return b
}

type csQuery struct{ aMin, aMax, tMin, tMax int64 }

// query draws a window. demo: the race tester's (aMin random, aMax = aMin +
// span, tMin in [aMin, aMax), tMax = tMin + random(span)); random: t window
// as in demo, a window [aMin, aMin + random(2^47)] in [0, 2^48).
func (w csWorkload) query(r *rand.Rand) csQuery {
	if !w.random {
		aMin := r.Int64N(w.counters)
		tMin := aMin + r.Int64N(demoSpan)
		return csQuery{aMin, aMin + demoSpan, tMin, tMin + r.Int64N(demoSpan)}
	}
	tMin := r.Int64N(w.counters)
	aMin := r.Int64N(randomAMax)
	return csQuery{aMin, aMin + r.Int64N(randomAMax/2), tMin, tMin + r.Int64N(demoSpan)}
}

// expect returns how many records match q and the integer part of their
// mean a (a >= 0 here; the sum can pass 2^63, so it is kept in 128 bits).
func (w csWorkload) expect(q csQuery) (n, mean int64) {
	var sHi, sLo uint64
	lo, hi := q.tMin, min(q.tMax, w.counters-1)
	if !w.random {
		lo, hi = max(lo, q.aMin), min(hi, q.aMax)
	}
	for c := lo; c <= hi; c++ {
		a := w.a(c)
		if a < q.aMin || a > q.aMax {
			continue
		}
		k := int64(1 + (1 - c&1)) // even counters twice
		n += k
		for range k {
			var carry uint64
			sLo, carry = bits.Add64(sLo, uint64(a), 0)
			sHi += carry
		}
	}
	if n == 0 {
		return 0, 0
	}
	q1, r := bits.Div64(0, sHi, uint64(n))
	q0, _ := bits.Div64(r, sLo, uint64(n))
	_ = q1 // zero: a mean of int64s fits in 64 bits
	return n, int64(q0)
}

// RunCallstore runs the three phases and writes one JSON object to out.
func RunCallstore(ctx context.Context, cfg CallstoreConfig, out io.Writer) (CallstoreResult, error) {
	res := CallstoreResult{Workload: cfg.Workload, Writers: cfg.Writers, Readers: cfg.Readers, GOMAXPROCS: runtime.GOMAXPROCS(0)}
	if cfg.Workload != "demo" && cfg.Workload != "random" {
		return res, fmt.Errorf("bench: workload %q: want demo or random", cfg.Workload)
	}
	if cfg.Records < 3 || cfg.Writers < 1 || cfg.Readers < 1 || cfg.MsgQueries < 0 || cfg.AvgQueries < 0 {
		return res, errors.New("bench: records >= 3, writers >= 1, readers >= 1 required")
	}
	if ents, err := os.ReadDir(cfg.Dir); err == nil && len(ents) > 0 {
		return res, fmt.Errorf("bench: %s is not empty", cfg.Dir)
	}
	if !cfg.Keep {
		defer os.RemoveAll(cfg.Dir)
	}
	wl := csWorkload{random: cfg.Workload == "random", counters: cfg.Records * 2 / 3}
	res.Records = wl.counters + (wl.counters+1)/2

	s, err := callstore.Open(cfg.Dir, cfg.Options)
	if err != nil {
		return res, err
	}
	defer func() {
		if s != nil {
			s.Close()
		}
	}()
	cpu0 := cpuSeconds()
	d, err := csPut(ctx, s, wl, cfg)
	res.PutCPU = cpuSeconds() - cpu0
	if err != nil {
		return res, err
	}
	res.PutSeconds = d.Seconds()
	res.PutPerSec = float64(res.Records) / d.Seconds()

	// Reopen: data must survive Close, and restart time is a figure too.
	if err := s.Close(); err != nil {
		return res, err
	}
	s = nil
	start := time.Now()
	if s, err = callstore.Open(cfg.Dir, cfg.Options); err != nil {
		return res, err
	}
	res.ReopenSeconds = time.Since(start).Seconds()
	st := s.Stats()
	res.Runs, res.Buckets = st.Runs, st.Buckets
	if got := int64(st.Records); got != res.Records {
		return res, fmt.Errorf("bench: store has %d records after reopen, put %d", got, res.Records)
	}

	var mismatches atomic.Int64
	queries := func(n int, seedOff uint64) []csQuery {
		r := rand.New(rand.NewPCG(cfg.Seed, seedOff))
		qs := make([]csQuery, n)
		for i := range qs {
			qs[i] = wl.query(r)
		}
		return qs
	}

	msgQs := queries(cfg.MsgQueries, 2)
	counts := make([]int64, len(msgQs))
	cpu0 = cpuSeconds()
	d, err = csPhase(ctx, cfg, "messages", len(msgQs), func(dst []callstore.Message, i int) ([]callstore.Message, error) {
		q := msgQs[i]
		got, err := s.AppendMessages(dst[:0], q.aMin, q.aMax, q.tMin, q.tMax)
		if err != nil {
			return dst, err
		}
		if !checkMessages(wl, q, got) {
			mismatches.Add(1)
		}
		counts[i] = int64(len(got))
		return got, nil
	})
	if err != nil {
		return res, err
	}
	res.MsgQueries, res.MsgSeconds, res.MsgCPU = len(msgQs), d.Seconds(), cpuSeconds()-cpu0
	for _, c := range counts {
		res.MsgRecords += c
	}

	avgQs := queries(cfg.AvgQueries, 3)
	avgs := make([]int64, len(avgQs))
	cpu0 = cpuSeconds()
	d, err = csPhase(ctx, cfg, "avg", len(avgQs), func(dst []callstore.Message, i int) ([]callstore.Message, error) {
		q := avgQs[i]
		v, err := s.AvgValue(q.aMin, q.aMax, q.tMin, q.tMax)
		avgs[i] = v
		return dst, err
	})
	if err != nil {
		return res, err
	}
	res.AvgQueries, res.AvgSeconds, res.AvgCPU = len(avgQs), d.Seconds(), cpuSeconds()-cpu0

	// Check every answer against the expected one, outside the timed phases.
	var wg sync.WaitGroup
	var avgRecords, avgMismatches atomic.Int64
	for p := range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := p; i < len(msgQs); i += runtime.GOMAXPROCS(0) {
				if n, _ := wl.expect(msgQs[i]); n != counts[i] {
					mismatches.Add(1)
				}
			}
			for i := p; i < len(avgQs); i += runtime.GOMAXPROCS(0) {
				n, want := wl.expect(avgQs[i])
				avgRecords.Add(n)
				if want != avgs[i] {
					avgMismatches.Add(1)
				}
			}
		})
	}
	wg.Wait()
	res.AvgRecords = avgRecords.Load()
	res.MsgMismatches, res.AvgMismatches = mismatches.Load(), avgMismatches.Load()
	res.Verified = res.MsgMismatches == 0 && res.AvgMismatches == 0
	if res.MsgSeconds > 0 {
		res.MsgPerSec = float64(res.MsgRecords) / res.MsgSeconds
	}
	if res.AvgSeconds > 0 {
		res.AvgPerSec = float64(res.AvgRecords) / res.AvgSeconds
	}
	res.Score = (res.PutPerSec + res.MsgPerSec + res.AvgPerSec) / 1000
	res.DiskBytes = dirBytes(cfg.Dir)
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		res.MaxRSSBytes = ru.Maxrss * 1024
	}
	err = s.Close()
	s = nil
	if err != nil {
		return res, err
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return res, enc.Encode(res)
}

// checkMessages checks a Messages answer record by record: in the window,
// a and body derived from t, sorted by t, each even counter twice.
func checkMessages(wl csWorkload, q csQuery, got []callstore.Message) bool {
	prev := int64(-1)
	seen := 0
	for i := range got {
		m := &got[i]
		if m.T < q.tMin || m.T > q.tMax || m.A < q.aMin || m.A > q.aMax || m.A != wl.a(m.T) ||
			binary.LittleEndian.Uint64(m.Body[:]) != uint64(m.T) || m.Body[33] != byte(m.A) {
			return false
		}
		// The whole body of every 16th record (the check would otherwise
		// cost as much as the query it checks).
		if i%16 == 0 && m.Body != csBody(m.T, m.A) {
			return false
		}
		switch {
		case m.T < prev:
			return false
		case m.T == prev:
			seen++
		default:
			seen = 1
		}
		if seen > 1+int(1-m.T&1) {
			return false
		}
		prev = m.T
	}
	return true
}

// csPut runs phase 1: writers take counters from a shared counter in
// blocks, so their t interleave as in the race tester; then Sync.
func csPut(ctx context.Context, s *callstore.Store, wl csWorkload, cfg CallstoreConfig) (time.Duration, error) {
	const block = 64
	var next, done atomic.Int64
	stop := make(chan struct{})
	bar := newBar(cfg.Progress, "put", wl.counters, &done, stop)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Writers)
	for range cfg.Writers {
		w, err := s.Writer()
		if err != nil {
			return 0, err
		}
		wg.Go(func() {
			defer w.Close()
			for ctx.Err() == nil {
				c0 := next.Add(block) - block
				if c0 >= wl.counters {
					return
				}
				for c := c0; c < min(c0+block, wl.counters); c++ {
					a := wl.a(c)
					b := csBody(c, a)
					err := w.Put(c, a, b)
					if err == nil && c&1 == 0 {
						err = w.Put(c, a, b)
					}
					if err != nil {
						errs <- err
						return
					}
				}
				done.Add(block)
			}
		})
	}
	wg.Wait()
	err := s.Sync()
	d := time.Since(start)
	close(stop)
	bar.Wait()
	close(errs)
	if e := <-errs; e != nil {
		return d, e
	}
	if ctx.Err() != nil {
		return d, ctx.Err()
	}
	return d, err
}

// csPhase runs n queries over cfg.Readers goroutines and times them.
func csPhase(ctx context.Context, cfg CallstoreConfig, name string, n int,
	do func(dst []callstore.Message, i int) ([]callstore.Message, error)) (time.Duration, error) {
	var next, done atomic.Int64
	stop := make(chan struct{})
	bar := newBar(cfg.Progress, name, int64(n), &done, stop)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Readers)
	for range cfg.Readers {
		wg.Go(func() {
			var dst []callstore.Message
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				var err error
				if dst, err = do(dst, i); err != nil {
					errs <- err
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	close(stop)
	bar.Wait()
	close(errs)
	if e := <-errs; e != nil {
		return d, e
	}
	return d, ctx.Err()
}

// barWaiter stops a progress goroutine.
type barWaiter struct{ wg sync.WaitGroup }

func (b *barWaiter) Wait() { b.wg.Wait() }

// newBar shows done/total on w until stop closes; the hot loops only bump
// an atomic counter.
func newBar(w io.Writer, name string, total int64, done *atomic.Int64, stop <-chan struct{}) *barWaiter {
	bw := &barWaiter{}
	if w == nil {
		return bw
	}
	bar := progressbar.NewOptions64(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(name),
		progressbar.OptionShowCount(), progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
	bw.wg.Go(func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				bar.Set64(min(done.Load(), total))
				bar.Finish()
				return
			case <-t.C:
				bar.Set64(min(done.Load(), total))
			}
		}
	})
	return bw
}

func dirBytes(dir string) int64 {
	var n int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if st, err := os.Stat(filepath.Join(dir, e.Name())); err == nil {
			n += st.Size()
		}
	}
	return n
}

// cpuSeconds is the user+system CPU time of this process: on a shared
// machine it tells how much of the wall time the bench actually ran.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
