package registry

import (
	"context"
	"strconv"
)

// batch runs the scenario: BatchSize instances per register from BatchConns
// connections, one service per connection, until Duration passes or
// MaxInstances are registered.
func (r *run) batch(ctx context.Context) (*Throughput, error) {
	res, err := r.registerLoad(ctx, "batch", "bat", r.cfg.BatchConns, r.cfg.BatchSize,
		func(g int) string { return "batch-" + strconv.Itoa(g) })
	if res != nil {
		res.Unit, res.PerRequest, res.Target = "instances", r.cfg.BatchSize, 200_000
	}
	return res, err
}
