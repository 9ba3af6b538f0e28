package registry

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
)

// register runs the scenario: single-instance registers from Conns
// connections, each into one of 64 services, until Duration passes or
// MaxInstances are registered.
func (r *run) register(ctx context.Context) (*Throughput, error) {
	res, err := r.registerLoad(ctx, "register", "reg", r.cfg.Conns, 1,
		func(g int) string { return "reg-" + strconv.Itoa(g%64) })
	if res != nil {
		res.Unit, res.PerRequest, res.Target, res.TargetP99Ms = "instances", 1, 20_000, 50
	}
	return res, err
}

// registerLoad is the load of register and batch: conns connections, each
// registering size new instances per request into service(g) under an id
// family of its own, until Duration passes or MaxInstances are registered.
func (r *run) registerLoad(ctx context.Context, name, idPrefix string, conns, size int, service func(g int) string) (*Throughput, error) {
	fams := make([]*family, conns)
	tmpls := make([]template, conns)
	for g := range conns {
		prefix := idPrefix + "-g" + strconv.Itoa(g) + "-"
		fams[g] = r.family(prefix)
		tmpls[g] = newTemplate(r.cfg.Namespace, service(g), prefix, size, 0)
		if r.cfg.UniqueMetadata {
			tmpls[g].uniqueMetadata(g)
		}
	}
	var budget atomic.Int64
	budget.Store(int64(r.cfg.MaxInstances))
	target := r.base + "/v1/instances"
	return r.loop(ctx, name, conns, func(ctx context.Context, g int, c *caller) (int, bool, error) {
		if !reserve(&budget, size) {
			return 0, true, nil
		}
		// Count the ids before sending: a request the deadline cuts short
		// may still have been committed, and cleanup must remove it.
		tmpls[g].set(uint64(fams[g].n.Add(int64(size)) - int64(size)))
		_, err := c.send(ctx, http.MethodPost, target, tmpls[g].body)
		return size, false, err
	})
}

// reserve takes n slots of the scenario's instance budget; false when spent.
func reserve(budget *atomic.Int64, n int) bool {
	return budget.Add(-int64(n)) >= 0
}
