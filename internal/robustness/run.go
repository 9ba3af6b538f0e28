package robustness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Link is a server's connection to its database that a fault can cut or
// stall (mysqltest.Proxy). Its methods may be called from any goroutine
// and do not block.
type Link interface {
	Cut()
	Stall()
	Restore()
}

// Fault is one kind of fault a run injects.
type Fault uint8

const (
	KillRestart  Fault = iota // kill -9 one server, start it again on the same data
	DBCut                     // close every server's database connections for a moment
	DBStall                   // hold every byte to and from the database for a moment
	SlowFollower              // stall one server's database link: it falls behind the others
)

func (f Fault) String() string {
	return [...]string{"kill-restart", "db-cut", "db-stall", "slow-follower"}[f]
}

// Scenario is a run: servers, what they may suffer, and the load.
type Scenario struct {
	Servers  []*Server
	Links    []Link // per server; nil without a database
	Faults   []Fault
	Clients  int
	Services int
	IDs      int // per service
	Duration time.Duration
	Seed     uint64
	// Timeout bounds one request.
	Timeout time.Duration
	// Embedded: the servers keep their store in their own process (see
	// Client.DiesWithStore).
	Embedded bool
	// Prefix starts every id and service name of the run, so that runs on
	// the same servers have histories of their own (a soak is many runs).
	Prefix string
}

// Result is what a run recorded.
type Result struct {
	History *History
	Final   []map[string]Seen // per server, once every server caught up
	Faults  []string          // what was injected, when
	Ops     int
}

const barrierService = "robustness-barrier"

// Run drives the scenario's load and faults against its running servers,
// then waits until every server has caught up and reads their final state.
// An error is a failure of the run itself (a server that would not restart,
// an answer no request should get), not of the history: that is Check's.
func Run(ctx context.Context, sc Scenario) (Result, error) {
	h := NewHistory()
	res := Result{History: h}
	if sc.Timeout == 0 {
		sc.Timeout = 10 * time.Second
	}
	var ids []string
	serviceOf := map[string]string{}
	for s := range sc.Services {
		for i := range sc.IDs {
			id := fmt.Sprintf("%si%d-%d", sc.Prefix, s, i)
			ids = append(ids, id)
			serviceOf[id] = fmt.Sprintf("%ssvc%d", sc.Prefix, s)
		}
	}

	var (
		errMu sync.Mutex
		errs  []error
	)
	fail := func(err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}

	// Feed readers follow every server, from where it is now, until every
	// server caught up.
	readCtx, stopReaders := context.WithCancel(ctx)
	defer stopReaders()
	readers := make([]*Client, len(sc.Servers))
	heads := make([]int64, len(sc.Servers))
	var rwg sync.WaitGroup
	for i, s := range sc.Servers {
		readers[i] = NewClient(1000+i, h, sc.Timeout)
		defer readers[i].Close()
		start := readers[i].head(ctx, s.Base())
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			heads[i] = readers[i].Follow(readCtx, i, s.Base, start)
		}()
	}

	loadCtx, stopLoad := context.WithTimeout(ctx, sc.Duration)
	defer stopLoad()
	var wg sync.WaitGroup
	for c := range sc.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := NewClient(c, h, sc.Timeout)
			cl.DiesWithStore = sc.Embedded
			defer cl.Close()
			if err := load(loadCtx, cl, sc, ids, serviceOf, rand.New(rand.NewPCG(sc.Seed, uint64(c)))); err != nil {
				fail(err)
			}
		}()
	}
	if len(sc.Faults) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := nemesis(loadCtx, ctx, sc, h, &res.Faults, rand.New(rand.NewPCG(sc.Seed, 99))); err != nil {
				fail(err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return res, err
	}

	// A barrier: a write through the first server; once every server holds
	// it, each has applied everything committed before it.
	bc := NewClient(900, h, sc.Timeout)
	defer bc.Close()
	var barrier Op
	for deadline := time.Now().Add(60 * time.Second); ; {
		o, err := bc.Register(ctx, 0, sc.Servers[0].Base(), sc.Prefix+"barrier", sc.Prefix+barrierService, fmt.Sprint("barrier-", sc.Seed), true)
		if err != nil {
			return res, err
		}
		if o.Status == OK {
			barrier = o
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return res, fmt.Errorf("robustness: the barrier write was not acknowledged within 60s (last: %s)", o)
		}
	}
	for i, s := range sc.Servers {
		for deadline := time.Now().Add(60 * time.Second); ; {
			o, err := bc.Get(ctx, i, s.Base(), sc.Prefix+"barrier", sc.Prefix+barrierService)
			if err != nil {
				return res, err
			}
			if len(o.Seen) == 1 && o.Seen[0].Rev >= barrier.Rev {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return res, fmt.Errorf("robustness: s%d did not apply the barrier (revision %d) within 60s", i, barrier.Rev)
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	stopReaders()
	rwg.Wait()
	for i, s := range sc.Servers {
		if err := drain(ctx, readers[i], i, s.Base(), heads[i], barrier.Rev); err != nil {
			return res, err
		}
	}

	// The final state of every server, as reads of the history too.
	res.Final = make([]map[string]Seen, len(sc.Servers))
	for i, s := range sc.Servers {
		res.Final[i] = map[string]Seen{}
		for sv := range sc.Services + 1 {
			service := fmt.Sprintf("%ssvc%d", sc.Prefix, sv)
			if sv == sc.Services {
				service = sc.Prefix + barrierService
			}
			o, err := bc.List(ctx, i, s.Base(), service)
			if err != nil {
				return res, err
			}
			for _, seen := range o.Seen {
				res.Final[i][seen.ID] = seen
			}
		}
		if _, ok := res.Final[i][sc.Prefix+"barrier"]; !ok {
			return res, fmt.Errorf("robustness: s%d did not answer its final lists", i)
		}
	}
	res.Ops = len(h.Ops())
	return res, nil
}

// load is one client's operations until ctx ends: registers of new values,
// identical re-registers, deregisters, gets and lists, on random servers,
// over a few ids so that clients contend.
func load(ctx context.Context, c *Client, sc Scenario, ids []string, serviceOf map[string]string, rnd *rand.Rand) error {
	last := map[string]string{} // id -> the last value this client registered
	for n := 0; ctx.Err() == nil && n < 1_000_000; n++ {
		i := rnd.IntN(len(sc.Servers))
		base := sc.Servers[i].Base()
		id := ids[rnd.IntN(len(ids))]
		svc := serviceOf[id]
		var (
			o   Op
			err error
		)
		switch k := rnd.IntN(100); {
		case k < 45:
			v, fresh := fmt.Sprintf("c%d-%d", c.ID, n), true
			if k >= 35 && last[id] != "" {
				v, fresh = last[id], false // the same fields again
			}
			last[id] = v
			o, err = c.Register(context.Background(), i, base, id, svc, v, fresh)
		case k < 60:
			o, err = c.Deregister(context.Background(), i, base, id, svc)
		case k < 85:
			_, err = c.Get(context.Background(), i, base, id, svc)
		default:
			_, err = c.List(context.Background(), i, base, svc)
		}
		if err != nil {
			return err
		}
		if o.Status == Unknown {
			// The server is down or restarting, or its database is: let it
			// come back rather than pile up writes of unknown outcome (each
			// is a fork in the check's search).
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// nemesis injects the scenario's faults until load ends, one at a time, and
// leaves every server running and every link restored. ctx bounds the
// restarts.
func nemesis(load, ctx context.Context, sc Scenario, h *History, log *[]string, rnd *rand.Rand) error {
	pause := func(d time.Duration) {
		select {
		case <-load.Done():
		case <-time.After(d):
		}
	}
	hold := func(d time.Duration) { // a fault lasts d, even past the load's end
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	for load.Err() == nil {
		pause(time.Duration(200+rnd.IntN(400)) * time.Millisecond)
		if load.Err() != nil {
			break
		}
		f := sc.Faults[rnd.IntN(len(sc.Faults))]
		i := rnd.IntN(len(sc.Servers))
		*log = append(*log, fmt.Sprintf("%.3fms %s s%d", float64(h.Now())/1e6, f, i))
		switch f {
		case KillRestart:
			sc.Servers[i].Kill()
			rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			err := sc.Servers[i].Start(rctx)
			cancel()
			if err != nil {
				return err
			}
		case DBCut, DBStall:
			for _, l := range sc.Links {
				if f == DBCut {
					l.Cut()
				} else {
					l.Stall()
				}
			}
			hold(time.Duration(200+rnd.IntN(400)) * time.Millisecond)
			for _, l := range sc.Links {
				l.Restore()
			}
		case SlowFollower:
			sc.Links[i].Stall()
			hold(time.Duration(300+rnd.IntN(700)) * time.Millisecond)
			sc.Links[i].Restore()
		}
	}
	return nil
}

// drain reads a server's feed from since until it has caught up to rev.
func drain(ctx context.Context, c *Client, server int, base string, since, rev int64) error {
	for deadline := time.Now().Add(60 * time.Second); ; {
		p, ok, err := c.page(ctx, server, base, since, true)
		if err != nil {
			return err
		}
		if ok && !p.Reset {
			since = p.Rev
			if since >= rev && !p.More {
				return nil
			}
			continue
		}
		if ok && p.Reset {
			since = c.head(ctx, base)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("robustness: the change feed of s%d did not reach revision %d within 60s", server, rev)
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}
