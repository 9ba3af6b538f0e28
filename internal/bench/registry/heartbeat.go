package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/sextant-mesh/sextant/client"
)

// heartbeat runs the scenario: HeartbeatIDs ids per request over a preloaded
// pool of HeartbeatPool instances, from HeartbeatConns connections.
func (r *run) heartbeat(ctx context.Context) (*Throughput, error) {
	pool, per := r.cfg.HeartbeatPool, r.cfg.HeartbeatIDs
	prefix := "hb-"
	// A TTL long enough that no instance turns unhealthy during the run.
	if err := r.preload(ctx, "heartbeat preload", "hb-", prefix, pool, 3600); err != nil {
		return nil, fmt.Errorf("preload: %w", err)
	}
	var (
		bodies [][]byte
		counts []int // ids in each body; the last may be short
	)
	for base := 0; base < pool; base += per {
		ids := make([]string, 0, per)
		for i := base; i < min(base+per, pool); i++ {
			ids = append(ids, instanceID(prefix, int64(i)))
		}
		bodies = append(bodies, client.AppendIDsBody(nil, ids...))
		counts = append(counts, len(ids))
	}
	// Check once that the ids exist, so the figure is about real heartbeats.
	var nf struct {
		NotFound []string `json:"not_found"`
	}
	chk := r.caller()
	defer chk.close()
	if _, err := chk.send(ctx, http.MethodPost, r.base+"/v1/heartbeats", bodies[0]); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(chk.buf, &nf); err != nil || len(nf.NotFound) > 0 {
		return nil, fmt.Errorf("heartbeat check: %d ids not found (%v)", len(nf.NotFound), err)
	}
	target := r.base + "/v1/heartbeats"
	var next atomic.Int64
	res, err := r.loop(ctx, "heartbeat", r.cfg.HeartbeatConns, func(ctx context.Context, g int, c *caller) (int, bool, error) {
		i := int(next.Add(1)) % len(bodies)
		_, err := c.send(ctx, http.MethodPost, target, bodies[i])
		return counts[i], false, err
	})
	if res != nil {
		res.Unit, res.PerRequest, res.Target = "ids", per, 1_000_000
	}
	return res, err
}
