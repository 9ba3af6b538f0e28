package compat

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/bench/report"
)

// The KV scenarios (issue 46): puts and gets of Consul KV keys from many
// clients, beside the instance writes of the same round, and the wake-up
// of a consul-template-style watch: one blocking read parked on each of
// KVKeys keys, a put to one of them, the time until its watcher answers.

// kvPrefix holds every key the run writes; cleanup deletes the tree.
const kvPrefix = "bench-compat-kv/"

// kvKey is the name of watched key i.
func kvKey(i int) string { return kvPrefix + "keys/" + strconv.Itoa(i) }

// kvValue is a 64-byte value, as a small configuration entry.
func kvValue(round, i int) []byte {
	b := []byte(fmt.Sprintf("round=%d i=%d ", round, i))
	for len(b) < 64 {
		b = append(b, 'x')
	}
	return b
}

// prepareKV writes the keys the gets read and the watchers wait on.
func (t *target) prepareKV(ctx context.Context, keys int) error {
	for i := range keys {
		if _, err := t.do(ctx, "PUT", "/v1/kv/"+kvKey(i), kvValue(0, i)); err != nil {
			return err
		}
	}
	return nil
}

func (t *target) cleanupKV(ctx context.Context) {
	t.do(ctx, "DELETE", "/v1/kv/"+kvPrefix+"?recurse", nil)
}

// roundKV runs the KV throughput scenarios and the watch wakes once.
func (t *target) roundKV(ctx context.Context, cfg Config, round int) error {
	meter := report.StartCPU(ctx, t.cpu)
	// Each client overwrites 16 keys of its own: the table stays small.
	puts := t.loop(ctx, cfg, func(ctx context.Context, client, i int) error {
		_, err := t.do(ctx, "PUT", "/v1/kv/"+kvPrefix+"put/"+strconv.Itoa(client)+"/"+strconv.Itoa(i%16), kvValue(round, i))
		return err
	})
	putCPU := meter.Stop(ctx)
	meter = report.StartCPU(ctx, t.cpu)
	gets := t.loop(ctx, cfg, func(ctx context.Context, client, i int) error {
		_, err := t.do(ctx, "GET", "/v1/kv/"+kvKey((client*7919+i*31)%cfg.KVKeys), nil)
		return err
	})
	getCPU := meter.Stop(ctx)
	perOp(t.res.KVPutCPUus, putCPU, puts)
	perOp(t.res.KVGetCPUus, getCPU, gets)
	t.res.KVPutPerS.PerRound = append(t.res.KVPutPerS.PerRound, report.Round3(puts/cfg.Duration.Seconds()))
	t.res.KVGetPerS.PerRound = append(t.res.KVGetPerS.PerRound, report.Round3(gets/cfg.Duration.Seconds()))
	p50, p99, others, err := t.kvWakes(ctx, cfg, round)
	if err != nil {
		return err
	}
	t.res.KVWakeP50Ms.PerRound = append(t.res.KVWakeP50Ms.PerRound, p50)
	t.res.KVWakeP99Ms.PerRound = append(t.res.KVWakeP99Ms.PerRound, p99)
	t.res.KVOtherWakes += others
	return nil
}

// perOp appends the server's CPU per operation of a scenario to f.
func perOp(f *Figure, c report.CPU, n float64) {
	if f != nil && c.ServerCPUSeconds != nil && n > 0 {
		f.PerRound = append(f.PerRound, report.Round3(*c.ServerCPUSeconds*1e6/n))
	}
}

// kvWake is a watcher's answer that showed its key changed.
type kvWake struct {
	key int
	at  time.Time
}

// kvWakes parks one blocking read on each of cfg.KVKeys keys, then puts
// cfg.Wakes of them, one at a time (each a different key), and times
// each from the put's answer to its watcher's answer. It also counts the
// watchers that answered without a change of their key (woken by another
// key's write), which a consul-template would read again for nothing.
// With Config.KVWatchServer the watchers park on that server.
func (t *target) kvWakes(ctx context.Context, cfg Config, round int) (p50, p99 float64, others int64, err error) {
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	// Connections of their own: a parked read holds one each.
	hc := &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: cfg.KVKeys,
	}}
	defer hc.CloseIdleConnections()
	wakes := make(chan kvWake, cfg.KVKeys)
	var other, parked atomic.Int64
	base := t.watchAt()
	read := func(key int, index uint64) (uint64, uint64, error) {
		url := base + "/v1/kv/" + kvKey(key) + "?index=" + strconv.FormatUint(index, 10) + "&wait=2m"
		req, err := http.NewRequestWithContext(wctx, "GET", url, nil)
		if err != nil {
			return 0, 0, err
		}
		if t.token != "" {
			req.Header.Set("X-Consul-Token", t.token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		var es []struct{ ModifyIndex uint64 }
		if err := json.NewDecoder(resp.Body).Decode(&es); err != nil || len(es) != 1 {
			return 0, 0, fmt.Errorf("compat: %s: key %s: %s, %v", base, kvKey(key), resp.Status, err)
		}
		idx, _ := strconv.ParseUint(resp.Header.Get("X-Consul-Index"), 10, 64)
		return idx, es[0].ModifyIndex, nil
	}
	for k := range cfg.KVKeys {
		wg.Go(func() { // ends with wctx
			idx, mod, err := read(k, 0)
			for err == nil {
				parked.Add(1)
				var next, nmod uint64
				next, nmod, err = read(k, idx)
				if err != nil {
					break
				}
				at := time.Now()
				if nmod != mod {
					wakes <- kvWake{k, at}
				} else {
					other.Add(1)
				}
				idx, mod = next, nmod
			}
			if wctx.Err() == nil {
				t.fail(err)
			}
		})
	}
	// Every watcher parked (plus a moment for the last reads to reach
	// the server), or give up after 30s.
	for end := time.Now().Add(30 * time.Second); parked.Load() < int64(cfg.KVKeys); {
		if time.Now().After(end) {
			return 0, 0, 0, fmt.Errorf("compat: %s: %d of %d KV watchers started", t.base, parked.Load(), cfg.KVKeys)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	other.Store(0)
	n := min(cfg.Wakes, cfg.KVKeys)
	lat := make([]time.Duration, 0, n)
	for i := range n {
		key := (round*n + i*37) % cfg.KVKeys
		if _, err := t.do(ctx, "PUT", "/v1/kv/"+kvKey(key), kvValue(round+1, i)); err != nil {
			return 0, 0, 0, err
		}
		acked := time.Now()
		select {
		case w := <-wakes:
			if w.key != key {
				return 0, 0, 0, fmt.Errorf("compat: %s: a put of key %d woke the watcher of key %d with a change", t.base, key, w.key)
			}
			lat = append(lat, max(w.at.Sub(acked), 0))
		case <-time.After(30 * time.Second):
			return 0, 0, 0, fmt.Errorf("compat: %s: the watcher of key %d did not wake within 30s of its put", t.base, key)
		}
		// Let the watcher park again: its next put is another key's,
		// but a put to a key whose watcher is away would not wake it.
		time.Sleep(2 * time.Millisecond)
	}
	s := report.Summarize(lat)
	return s.P50Ms, s.P99Ms, other.Load(), nil
}
