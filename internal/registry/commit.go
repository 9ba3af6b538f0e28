package registry

import (
	"context"
	"time"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/store"
)

// commitLoop owns the write path. It takes every request queued while the
// previous commit ran and writes them as one durable commit: no timer holds
// a lone request back, and concurrent requests share one fsync.
func (r *Registry) commitLoop(ctx context.Context) {
	batch := make([]*request, 0, r.opts.MaxCommit)
	for {
		select {
		case req := <-r.reqs:
			batch = append(batch[:0], req)
		case <-ctx.Done():
			r.failQueued()
			return
		}
	drain:
		for len(batch) < r.opts.MaxCommit {
			select {
			case req := <-r.reqs:
				batch = append(batch, req)
			default:
				break drain
			}
		}
		r.commit(batch)
	}
}

func (r *Registry) failQueued() {
	close(r.stopped)
	for {
		select {
		case req := <-r.reqs:
			req.err = ErrClosed
			close(req.done)
		default:
			return
		}
	}
}

// overlay is the state a batch sees: the catalog plus the batch's earlier
// requests. A nil value is an instance deleted earlier in the batch.
type overlay struct {
	cat *catalog.Catalog
	m   map[string]*catalog.Instance
}

func (o *overlay) get(id string) *catalog.Instance {
	if in, ok := o.m[id]; ok {
		return in
	}
	return o.cat.Get(id)
}

// pendingTxn is a request's share of a commit.
type pendingTxn struct {
	req     *request
	changes []catalog.Change
}

func (r *Registry) commit(batch []*request) {
	now := r.opts.Now()
	ov := overlay{cat: r.cat, m: make(map[string]*catalog.Instance)}
	var (
		txns    []store.Txn
		pending []pendingTxn
		sync    bool
		buf     []byte
	)
	for _, req := range batch {
		var ops []store.Op
		var chs []catalog.Change
		switch req.kind {
		case kindRegister:
			var rev int64
			for _, in := range req.instances {
				cur := ov.get(in.ID)
				if cur != nil && cur.Healthy && cur.SameSpec(in) {
					// Unchanged: counts as a heartbeat, wakes no one.
					if cur.TTLSeconds > 0 {
						cur.Live.Deadline.Store(now.Add(time.Duration(ttlGraceFactor*cur.TTLSeconds) * time.Second).UnixNano())
					}
					rev = max(rev, cur.Revision)
					continue
				}
				in.Healthy = true
				in.UpdatedAt = now
				in.CreatedAt = now
				in.Live = new(catalog.Liveness)
				if cur != nil {
					in.CreatedAt = cur.CreatedAt
					in.Live = cur.Live
					if cur.Key() != in.Key() {
						chs = append(chs, catalog.Change{Key: cur.Key(), ID: cur.ID})
					}
				}
				start := len(buf)
				buf = in.AppendBinary(buf)
				ops = append(ops, store.Op{ID: in.ID, Value: buf[start:len(buf):len(buf)]})
				chs = append(chs, catalog.Change{Key: in.Key(), ID: in.ID, Instance: in})
				ov.m[in.ID] = in
			}
			req.rev = rev
		case kindDeregister:
			for _, id := range req.ids {
				cur := ov.get(id)
				if cur == nil {
					req.notFound = append(req.notFound, id)
					continue
				}
				ops = append(ops, store.Op{ID: id})
				chs = append(chs, catalog.Change{Key: cur.Key(), ID: id})
				ov.m[id] = nil
			}
			req.rev = r.cat.Revision()
		case kindHealth:
			for _, f := range req.flips {
				cur := ov.get(f.inst.ID)
				if cur != f.inst || cur.Healthy == f.healthy {
					continue // replaced or already flipped since it was seen
				}
				if !f.healthy && cur.Live.Deadline.Load() > now.UnixNano() {
					continue // a heartbeat arrived in between
				}
				n := cur.Clone()
				n.Healthy = f.healthy
				chs = append(chs, catalog.Change{Key: n.Key(), ID: n.ID, Instance: n})
				ov.m[n.ID] = n
			}
		}
		if len(chs) == 0 {
			continue
		}
		sync = sync || len(ops) > 0
		txns = append(txns, store.Txn{Ops: ops})
		pending = append(pending, pendingTxn{req: req, changes: chs})
	}
	if len(txns) > 0 {
		start := time.Now()
		first, err := r.st.Commit(txns, sync)
		r.commitLatency.Observe(time.Since(start).Seconds())
		if err != nil {
			r.log.Error("commit failed", "requests", len(batch), "err", err)
			for _, req := range batch {
				req.err = err
				close(req.done)
			}
			return
		}
		var all []catalog.Change
		for i, p := range pending {
			rev := first + int64(i)
			p.req.rev = rev
			for j := range p.changes {
				p.changes[j].Revision = rev
				if in := p.changes[j].Instance; in != nil {
					in.Revision = rev
				}
			}
			all = append(all, p.changes...)
		}
		r.cat.Apply(first+int64(len(txns))-1, all)
		for _, p := range pending {
			for _, ch := range p.changes {
				in := ch.Instance
				switch {
				case in == nil || in.TTLSeconds == 0:
				case p.req.kind == kindRegister:
					r.arm(in, now) // a register is a heartbeat
				case in.Healthy:
					r.ttl.push(in.ID, in.Live, in.Live.Deadline.Load()) // revived by a heartbeat
				}
			}
		}
	}
	r.commitSize.Observe(float64(len(batch)))
	for _, req := range batch {
		close(req.done)
	}
}
