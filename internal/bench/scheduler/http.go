package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sextant-mesh/sextant/client"
)

// HTTPConfig drives RunHTTP: placements end to end, through a server's
// HTTP API, its group commit and its store.
type HTTPConfig struct {
	Server  string // base URL of a running server
	Nodes   int    // nodes created for the run (labelled with the run's id)
	Pods    int    // pods placed
	Clients int    // concurrent HTTP clients
	Batch   int    // pods per request (a List when > 1)
	Keep    bool   // leave the nodes and placements on the server
}

// HTTPFigures are the end-to-end figures.
type HTTPFigures struct {
	Server          string  `json:"server"`
	Run             string  `json:"run"`
	Nodes           int     `json:"nodes"`
	Pods            int     `json:"pods"`
	Clients         int     `json:"clients"`
	Batch           int     `json:"batch"`
	Placed          int64   `json:"placed"`
	Unschedulable   int64   `json:"unschedulable"`
	Seconds         float64 `json:"seconds"`
	PlacementsPerS  float64 `json:"placements_per_s"`
	RequestsPerS    float64 `json:"requests_per_s"`
	P50Ms           float64 `json:"p50_request_ms"`
	P99Ms           float64 `json:"p99_request_ms"`
	ServerCPU       float64 `json:"server_cpu_seconds"`          // the server's process_cpu_seconds_total over the placing; -1 if it has none
	PerServerCPU    float64 `json:"placements_per_server_cpu_s"` // robust to other load on the machine
	NodesSeconds    float64 `json:"create_nodes_seconds"`
	CleanupSeconds  float64 `json:"cleanup_seconds,omitempty"`
	OverCommitted   int     `json:"over_committed_nodes"` // checked after the run: must be 0
	ServerPlacedNow int     `json:"server_placements_of_run"`
}

// RunHTTP creates cfg.Nodes nodes labelled with a run id, places cfg.Pods
// scheduler_perf default pods (100m, 500Mi) restricted to them by a
// nodeSelector from cfg.Clients concurrent clients, cfg.Batch per request,
// checks that no node is over-committed, and deletes the nodes (which
// releases the placements) unless cfg.Keep.
func RunHTTP(ctx context.Context, cfg HTTPConfig, bar *progressbar.ProgressBar) (*HTTPFigures, error) {
	c, err := client.New(cfg.Server, client.WithUserAgent("sextant-bench/1"))
	if err != nil {
		return nil, err
	}
	run := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	f := &HTTPFigures{Server: cfg.Server, Run: run, Nodes: cfg.Nodes, Pods: cfg.Pods, Clients: cfg.Clients, Batch: cfg.Batch}
	nodeName := func(i int) string { return fmt.Sprintf("bench-%s-%06d", run, i) }
	const runLabel = "bench.sextant.io/run"

	// Nodes, in Lists of 1,000.
	t0 := time.Now()
	for lo := 0; lo < cfg.Nodes; lo += 1000 {
		var items []*corev1.Node
		for i := lo; i < min(lo+1000, cfg.Nodes); i++ {
			n := Node(i)
			n.Name = nodeName(i)
			n.Labels[corev1.LabelHostname] = n.Name
			n.Labels[runLabel] = run
			items = append(items, n)
		}
		body, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
		if _, err := c.ApplyNodes(ctx, body); err != nil {
			return nil, fmt.Errorf("bench: create nodes: %w", err)
		}
	}
	f.NodesSeconds = time.Since(t0).Seconds()

	// Request bodies, built before the clock starts.
	var bodies [][]byte
	for lo := 0; lo < cfg.Pods; lo += cfg.Batch {
		var pods []*corev1.Pod
		for i := lo; i < min(lo+cfg.Batch, cfg.Pods); i++ {
			p := Pod("basic", i)
			p.Namespace = "bench-" + run
			p.Spec.NodeSelector = map[string]string{runLabel: run}
			pods = append(pods, p)
		}
		var body []byte
		if len(pods) == 1 {
			body, _ = json.Marshal(pods[0])
		} else {
			body, _ = json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": pods})
		}
		bodies = append(bodies, body)
	}

	var (
		next    atomic.Int64
		placed  atomic.Int64
		unsched atomic.Int64
		mu      sync.Mutex
		lat     = make([]time.Duration, 0, len(bodies))
		firstE  error
		wg      sync.WaitGroup
	)
	cpu0 := serverCPU(ctx, c)
	start := time.Now()
	for range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(bodies) {
					break
				}
				t := time.Now()
				res, err := c.Place(ctx, bodies[i], false)
				mine = append(mine, time.Since(t))
				if err != nil {
					mu.Lock()
					if firstE == nil {
						firstE = err
					}
					mu.Unlock()
					return
				}
				for _, r := range res.Results {
					if r.Node != "" {
						placed.Add(1)
					} else {
						unsched.Add(1)
					}
				}
				if bar != nil {
					_ = bar.Add(len(res.Results))
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	f.Seconds = time.Since(start).Seconds()
	if cpu1 := serverCPU(ctx, c); cpu0 >= 0 && cpu1 >= 0 {
		f.ServerCPU = cpu1 - cpu0
	} else {
		f.ServerCPU = -1
	}
	if firstE != nil {
		return nil, fmt.Errorf("bench: place: %w", firstE)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	f.Placed, f.Unschedulable = placed.Load(), unsched.Load()
	f.PlacementsPerS = float64(f.Placed+f.Unschedulable) / f.Seconds
	f.RequestsPerS = float64(len(bodies)) / f.Seconds
	if f.ServerCPU > 0 {
		f.PerServerCPU = float64(f.Placed+f.Unschedulable) / f.ServerCPU
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		f.P50Ms = float64(lat[len(lat)/2]) / 1e6
		f.P99Ms = float64(lat[min(len(lat)*99/100, len(lat)-1)]) / 1e6
	}

	// No node of the run holds more than it has.
	opts := client.NodeListOptions{Selector: runLabel + "=" + run, Limit: 10000}
	for first := true; first || opts.PageToken != ""; first = false {
		page, err := c.ListNodes(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, it := range page.Items {
			f.ServerPlacedNow += it.Placements
			if over(it.Requested["cpu"], it.Node.Status.Allocatable["cpu"]) || over(it.Requested["memory"], it.Node.Status.Allocatable["memory"]) {
				f.OverCommitted++
			}
		}
		opts.PageToken = page.NextPageToken
	}

	if !cfg.Keep {
		t1 := time.Now()
		var cwg sync.WaitGroup
		var nextNode atomic.Int64
		errs := make(chan error, cfg.Clients)
		for range cfg.Clients {
			cwg.Add(1)
			go func() {
				defer cwg.Done()
				for {
					i := int(nextNode.Add(1)) - 1
					if i >= cfg.Nodes {
						return
					}
					if _, err := c.DeleteNode(ctx, nodeName(i)); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		cwg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return nil, fmt.Errorf("bench: cleanup: %w", err)
		}
		f.CleanupSeconds = time.Since(t1).Seconds()
	}
	return f, nil
}

// serverCPU reads the server's process_cpu_seconds_total from /metrics,
// or -1.
func serverCPU(ctx context.Context, c *client.Client) float64 {
	req, err := http.NewRequestWithContext(ctx, "GET", c.BaseURL()+"/metrics", nil)
	if err != nil {
		return -1
	}
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "process_cpu_seconds_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// over reports whether quantity a exceeds b.
func over(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	qa, err1 := resource.ParseQuantity(a)
	qb, err2 := resource.ParseQuantity(b)
	return err1 == nil && err2 == nil && qa.Cmp(qb) > 0
}
