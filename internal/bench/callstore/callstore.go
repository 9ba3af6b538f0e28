// Package callstore is the call-log store's load generator, "sextant bench
// callstore": the message-store race's three phases (put, Messages queries,
// AvgValue queries) against a fresh store in a directory it owns for the
// run, every answer checked against the workload's expected one. It owns
// that directory and nothing else; the store is internal/callstore.
package callstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/bench/report"
	"github.com/sextant-mesh/sextant/internal/callstore"
)

// Config drives Run: the race's three phases (put, Messages queries,
// AvgValue queries) against a fresh store.
type Config struct {
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

// Result is the JSON object the bench prints.
type Result struct {
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

// Run runs the three phases and writes one JSON object to out.
func Run(ctx context.Context, cfg Config, out io.Writer) (Result, error) {
	res := Result{Workload: cfg.Workload, Writers: cfg.Writers, Readers: cfg.Readers, GOMAXPROCS: runtime.GOMAXPROCS(0)}
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
	wl := workload{random: cfg.Workload == "random", counters: cfg.Records * 2 / 3}
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
	cpu0 := report.ProcessCPU()
	d, err := put(ctx, s, wl, cfg)
	res.PutCPU = report.ProcessCPU() - cpu0
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
	queries := func(n int, seedOff uint64) []window {
		r := rand.New(rand.NewPCG(cfg.Seed, seedOff))
		qs := make([]window, n)
		for i := range qs {
			qs[i] = wl.query(r)
		}
		return qs
	}

	msgQs := queries(cfg.MsgQueries, 2)
	counts := make([]int64, len(msgQs))
	cpu0 = report.ProcessCPU()
	d, err = queryPhase(ctx, cfg, "messages", len(msgQs), func(dst []callstore.Message, i int) ([]callstore.Message, error) {
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
	res.MsgQueries, res.MsgSeconds, res.MsgCPU = len(msgQs), d.Seconds(), report.ProcessCPU()-cpu0
	for _, c := range counts {
		res.MsgRecords += c
	}

	avgQs := queries(cfg.AvgQueries, 3)
	avgs := make([]int64, len(avgQs))
	cpu0 = report.ProcessCPU()
	d, err = queryPhase(ctx, cfg, "avg", len(avgQs), func(dst []callstore.Message, i int) ([]callstore.Message, error) {
		q := avgQs[i]
		v, err := s.AvgValue(q.aMin, q.aMax, q.tMin, q.tMax)
		avgs[i] = v
		return dst, err
	})
	if err != nil {
		return res, err
	}
	res.AvgQueries, res.AvgSeconds, res.AvgCPU = len(avgQs), d.Seconds(), report.ProcessCPU()-cpu0

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
	res.MaxRSSBytes = report.MaxRSS()
	err = s.Close()
	s = nil
	if err != nil {
		return res, err
	}
	return res, report.Print(out, res)
}

// parallel runs work(0..n-1) on n goroutines under a bar showing done out
// of total, and returns the wall time until all returned and the first
// error (else ctx's). The hot loops only bump done.
func parallel(ctx context.Context, cfg Config, name string, total int64, done *atomic.Int64, n int, work func(i int) error) (time.Duration, error) {
	bar := report.NewPollBar(ctx, cfg.Progress, name, total, done.Load)
	defer bar.Finish()
	errs := make([]error, n)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = work(i) })
	}
	wg.Wait()
	d := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return d, err
		}
	}
	return d, ctx.Err()
}

// put runs phase 1: writers take counters from a shared counter in blocks,
// so their t interleave as in the race tester; then Sync, timed with them.
func put(ctx context.Context, s *callstore.Store, wl workload, cfg Config) (time.Duration, error) {
	const block = 64
	ws := make([]*callstore.Writer, cfg.Writers)
	for i := range ws {
		w, err := s.Writer()
		if err != nil {
			for _, w := range ws[:i] {
				w.Close()
			}
			return 0, err
		}
		ws[i] = w
	}
	var next, done atomic.Int64
	d, err := parallel(ctx, cfg, "put", wl.counters, &done, len(ws), func(i int) error {
		w := ws[i]
		defer w.Close()
		for ctx.Err() == nil {
			c0 := next.Add(block) - block
			if c0 >= wl.counters {
				return nil
			}
			for c := c0; c < min(c0+block, wl.counters); c++ {
				a := wl.a(c)
				b := body(c, a)
				err := w.Put(c, a, b)
				if err == nil && c&1 == 0 {
					err = w.Put(c, a, b)
				}
				if err != nil {
					return err
				}
			}
			done.Add(block)
		}
		return nil
	})
	if err != nil {
		return d, err
	}
	start := time.Now()
	err = s.Sync()
	return d + time.Since(start), err
}

// queryPhase runs n queries over cfg.Readers goroutines and times them.
func queryPhase(ctx context.Context, cfg Config, name string, n int,
	do func(dst []callstore.Message, i int) ([]callstore.Message, error)) (time.Duration, error) {
	var next, done atomic.Int64
	return parallel(ctx, cfg, name, int64(n), &done, cfg.Readers, func(int) error {
		var dst []callstore.Message
		for ctx.Err() == nil {
			i := int(next.Add(1) - 1)
			if i >= n {
				return nil
			}
			var err error
			if dst, err = do(dst, i); err != nil {
				return err
			}
			done.Add(1)
		}
		return nil
	})
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
