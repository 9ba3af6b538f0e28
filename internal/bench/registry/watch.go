package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/bench/report"
)

// watch runs the scenario: the time from a register's answer to the answer
// of a blocking query parked on that service.
func (r *run) watch(ctx context.Context) (*Latency, error) {
	const prefix = "watch-"
	t := newTemplate(r.cfg.Namespace, "watch", prefix, 1, 0)
	f := r.family(prefix)
	f.n.Store(1)
	// Every round re-registers the one instance with a new metadata value, so
	// each register is a real change that must wake the watcher.
	round := bytes.Index(t.body, []byte(`"meta-key16":"v16-`))
	if round < 0 {
		return nil, errors.New("watch template lacks meta-key16")
	}
	round += len(`"meta-key16":"v16-`)
	t.set(0)
	w, reg := r.caller(), r.caller()
	defer w.close()
	defer reg.close()
	if _, err := reg.send(ctx, http.MethodPost, r.base+"/v1/instances", t.body); err != nil {
		return nil, err
	}
	first, err := r.c.Query(ctx, r.cfg.Namespace, "watch", client.QueryOptions{})
	if err != nil {
		return nil, err
	}
	index := first.Revision
	qbase := r.base + "/v1/namespaces/" + r.cfg.Namespace + "/services/watch/instances?wait=10s&index="
	bar := report.NewBar(r.cfg.Progress, "watch", int64(r.cfg.WatchRounds))
	defer bar.Finish()
	lat := make([]time.Duration, 0, r.cfg.WatchRounds)
	fromSend := make([]time.Duration, 0, r.cfg.WatchRounds)
	cpu := r.startCPU(ctx)
	for i := range r.cfg.WatchRounds {
		putDigits(t.body[round:round+6], uint64(i+1)%1_000_000)
		a, err := wake(ctx, w, qbase+strconv.FormatUint(index, 10), reg, r.base+"/v1/instances", t.body)
		if err != nil {
			return nil, err
		}
		if a.rev <= index {
			return nil, fmt.Errorf("round %d: blocking query answered revision %d, not newer than %d", i, a.rev, index)
		}
		lat = append(lat, a.afterAnswer)
		fromSend = append(fromSend, a.afterSend)
		index = a.rev
		bar.Add(1)
	}
	res := &Latency{Rounds: len(lat), TargetP99Ms: 5, CPU: cpu.Stop(ctx)}
	sum, fromSum := report.Summarize(lat), report.Summarize(fromSend)
	res.P50Ms, res.P99Ms, res.MaxMs = sum.P50Ms, sum.P99Ms, sum.MaxMs
	res.FromSendP50Ms, res.FromSendP99Ms = fromSum.P50Ms, fromSum.P99Ms
	res.Note = "p50/p99: from the register's 200 answer to the blocking query's answer (0 when the watcher was answered first); from_send: from sending the register (includes its durable commit)"
	return res, nil
}

// wakeup is how a blocking query answered a register: with which
// revision, how long after the register's answer (0 if before it) and
// how long after its sending.
type wakeup struct {
	rev                    uint64
	afterAnswer, afterSend time.Duration
}

// wake parks a blocking query, GET target on w, then sends body as a
// register through reg to path, and waits for both answers. The query's
// goroutine lives for the call.
func wake(ctx context.Context, w *caller, target string, reg *caller, path string, body []byte) (wakeup, error) {
	type answer struct {
		at  time.Time
		rev uint64
		err error
	}
	got := make(chan answer, 1)
	go func() {
		_, err := w.send(ctx, http.MethodGet, target, nil)
		at := time.Now()
		var a struct {
			Revision uint64 `json:"revision"`
		}
		if err == nil {
			err = json.Unmarshal(w.buf, &a)
		}
		got <- answer{at, a.Revision, err}
	}()
	// Give the blocking query time to park on the server; registering
	// first would answer it at once and flatter the figure.
	time.Sleep(3 * time.Millisecond)
	sent := time.Now()
	_, err := reg.send(ctx, http.MethodPost, path, body)
	done := time.Now()
	a := <-got
	if err != nil {
		return wakeup{}, err
	}
	if a.err != nil {
		return wakeup{}, a.err
	}
	return wakeup{rev: a.rev, afterAnswer: max(0, a.at.Sub(done)), afterSend: a.at.Sub(sent)}, nil
}
