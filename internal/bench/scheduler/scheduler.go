// Package scheduler is the scenario behind "sextant bench scheduler": it
// builds clusters and workloads modelled on kube-scheduler's scheduler_perf
// (SchedulingBasic, NodeAffinity, TopologySpreading, PodAntiAffinity,
// PreferredPodAffinity) and drives the in-process placement engine,
// measuring placements per second over the batch and the time of each
// decision; a start-up scenario that loads stored records, and one that
// starts a real server over a store holding them; and an end-to-end
// scenario that places through a running server's HTTP API. It owns no
// server state.
package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sextant-mesh/sextant/internal/bench/report"
	"github.com/sextant-mesh/sextant/internal/placement"
)

// Config drives Run.
type Config struct {
	Scenarios                   []string // names, or nil for all
	Nodes                       []int    // cluster sizes (default 5000 and 50000)
	Pods                        int      // workloads placed per scenario (measured)
	InitPods                    int      // placements made before measuring (0: one per node)
	Batch                       int      // workloads per Place call (a deployment's replicas)
	StartNodes, StartPlacements int
	Progress                    io.Writer // progress bars; nil: none

	// Binary is the sextant executable the server_startup scenario runs.
	Binary string
	// HTTP drives the http scenario (HTTP.Server: the server to use).
	HTTP HTTPConfig
}

// Figures of one scenario run.
type Figures struct {
	Scenario       string  `json:"scenario"`
	Nodes          int     `json:"nodes"`
	InitPlacements int     `json:"init_placements"`
	Pods           int     `json:"pods"`
	Placed         int     `json:"placed"`
	Unschedulable  int     `json:"unschedulable"`
	Seconds        float64 `json:"seconds"`
	PlacementsPerS float64 `json:"placements_per_s"`
	CPUSeconds     float64 `json:"cpu_seconds"`          // user+system of the process while placing
	PerCPUSecond   float64 `json:"placements_per_cpu_s"` // placements per busy core-second: robust to other load
	P50Ms          float64 `json:"p50_decision_ms"`
	P99Ms          float64 `json:"p99_decision_ms"`
	MaxMs          float64 `json:"max_decision_ms"`
}

// Startup is the start-up scenario's figures.
type Startup struct {
	Nodes       int     `json:"nodes"`
	Placements  int     `json:"placements"`
	LoadSeconds float64 `json:"load_seconds"`
	LoadCPU     float64 `json:"load_cpu_seconds"` // user+system: what the load costs whatever the machine's load
	GOMAXPROCS  int     `json:"gomaxprocs"`
	RSSBytes    int64   `json:"rss_bytes"`
	HeapBytes   uint64  `json:"heap_bytes"`
}

// Result is the JSON object the bench prints.
type Result struct {
	GOMAXPROCS    int                 `json:"gomaxprocs"`
	LoadAvgStart  string              `json:"loadavg_start"`
	LoadAvgEnd    string              `json:"loadavg_end"`
	Scenarios     map[string]*Figures `json:"scenarios"`
	Startup       *Startup            `json:"startup,omitempty"`
	ServerStartup *ServerStartup      `json:"server_startup,omitempty"`
	HTTP          *HTTPFigures        `json:"http,omitempty"`
}

// Scenarios lists the in-process scenario names in run order; "startup"
// and "server_startup" follow them by default, and "http" runs when a
// server is given.
var Scenarios = []string{"basic", "node_affinity", "topology_spreading", "pod_anti_affinity", "preferred_pod_affinity", "startup", "server_startup", "http"}

// Node returns node i of a scheduler_perf-like cluster: 4 cpu, 32Gi, 110
// pods, labelled with its hostname, one of 3 zones and one of 50 racks.
func Node(i int) *corev1.Node {
	name := fmt.Sprintf("node-%06d", i)
	return &corev1.Node{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			corev1.LabelHostname:     name,
			corev1.LabelTopologyZone: "zone-" + strconv.Itoa(i%3),
			"rack":                   "rack-" + strconv.Itoa(i%50),
		}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("4"),
			corev1.ResourceMemory: resource.MustParse("32Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}},
	}
}

// Pod returns pod i of scenario: scheduler_perf's default pod (100m cpu,
// 500Mi) plus the scenario's constraint.
func Pod(scenario string, i int) *corev1.Pod {
	dns := strings.ReplaceAll(scenario, "_", "-")
	app := "app-" + dns
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%07d", dns, i), Namespace: "bench", Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("500Mi"),
		}}}}},
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	switch scenario {
	case "node_affinity":
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-0", "zone-1"}}}}}}}}
	case "topology_spreading":
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{
			{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel},
			{MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: sel},
		}
	case "pod_anti_affinity":
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
			{LabelSelector: sel, TopologyKey: corev1.LabelHostname}}}}
	case "preferred_pod_affinity":
		p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
			{Weight: 1, PodAffinityTerm: corev1.PodAffinityTerm{LabelSelector: sel, TopologyKey: corev1.LabelHostname}}}}}
	}
	return p
}

// Cluster returns a scheduler (to Close) holding n nodes and init placements (the
// basic pod, round robin), loaded in bulk as at start-up.
func Cluster(n, init int) (*placement.Scheduler, error) {
	nodes := make([]*placement.Node, n)
	for i := range nodes {
		rec, err := placement.CompileNode(Node(i), "")
		if err != nil {
			return nil, err
		}
		rec.Seq = uint64(i + 1)
		nodes[i] = rec
	}
	ps := make([]*placement.Placement, init)
	for i := range ps {
		w, err := placement.CompilePod(Pod("init", i), "")
		if err != nil {
			return nil, err
		}
		ps[i] = w.Placement(nodes[i%n].Name)
	}
	s := placement.New(placement.Config{Workers: runtime.GOMAXPROCS(0)})
	if err := s.Load(1, nodes, ps); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Workloads compiles count pods of scenario.
func Workloads(scenario string, count int) ([]*placement.Workload, error) {
	ws := make([]*placement.Workload, count)
	for i := range ws {
		w, err := placement.CompilePod(Pod(scenario, i), "")
		if err != nil {
			return nil, err
		}
		ws[i] = w
	}
	return ws, nil
}

// Measure places ws in batches of batch and times every decision (one
// workload per Place call when batch is 1; a batch's time is shared out
// evenly otherwise).
func Measure(ctx context.Context, s *placement.Scheduler, scenario string, nodes, init int, ws []*placement.Workload, batch int, bar *progressbar.ProgressBar) (*Figures, error) {
	f := &Figures{Scenario: scenario, Nodes: nodes, InitPlacements: init, Pods: len(ws)}
	lat := make([]time.Duration, 0, len(ws))
	rev := int64(1)
	persist := func([]placement.Op) (int64, error) { rev++; return rev, nil }
	c0, start := cpuSeconds(), time.Now()
	for i := 0; i < len(ws); i += batch {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		b := ws[i:min(i+batch, len(ws))]
		t0 := time.Now()
		res, _, err := s.Place(b, persist)
		if err != nil {
			return nil, err
		}
		d := time.Since(t0) / time.Duration(len(b))
		for _, r := range res {
			lat = append(lat, d)
			if r.Node != "" {
				f.Placed++
			} else {
				f.Unschedulable++
			}
		}
		if bar != nil {
			_ = bar.Add(len(b))
		}
	}
	f.Seconds = time.Since(start).Seconds()
	f.CPUSeconds = cpuSeconds() - c0
	f.PlacementsPerS = float64(len(ws)) / f.Seconds
	if f.CPUSeconds > 0 {
		f.PerCPUSecond = float64(len(ws)) / f.CPUSeconds
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(int(p*float64(len(lat))), len(lat)-1)]) / 1e6
	}
	f.P50Ms, f.P99Ms, f.MaxMs = pct(0.50), pct(0.99), float64(lat[len(lat)-1])/1e6
	return f, nil
}

// RunStartup encodes nodes and placements as records, then measures
// LoadEncoded: the server's start-up from its store (minus reading it).
func RunStartup(nodes, placements int) (*Startup, error) {
	encN := make([][]byte, nodes)
	for i := range encN {
		rec, err := placement.CompileNode(Node(i), "")
		if err != nil {
			return nil, err
		}
		rec.Seq = uint64(i + 1)
		encN[i], _ = rec.MarshalBinary()
	}
	encP := make([][]byte, placements)
	w, err := placement.CompilePod(Pod("startup", 0), "")
	if err != nil {
		return nil, err
	}
	for i := range encP {
		p := w.Placement(fmt.Sprintf("node-%06d", i%nodes))
		p.Name = fmt.Sprintf("startup-%07d", i)
		p.Labels = w.Labels
		encP[i], _ = p.MarshalBinary()
	}
	runtime.GC()
	debug.FreeOSMemory()
	s := placement.New(placement.Config{})
	c0, t0 := cpuSeconds(), time.Now()
	if err := s.LoadEncoded(1, encN, encP); err != nil {
		return nil, err
	}
	out := &Startup{Nodes: nodes, Placements: placements, LoadSeconds: time.Since(t0).Seconds(), LoadCPU: cpuSeconds() - c0, GOMAXPROCS: runtime.GOMAXPROCS(0)}
	encN, encP = nil, nil
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	out.HeapBytes = ms.HeapAlloc
	out.RSSBytes = maxRSS()
	runtime.KeepAlive(s)
	return out, nil
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func maxRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss * 1024
}

// Run runs the scenarios and writes one JSON object to out.
func Run(ctx context.Context, cfg Config, out io.Writer) (*Result, error) {
	if cfg.Scenarios == nil {
		cfg.Scenarios = Scenarios[:len(Scenarios)-1]
		if cfg.HTTP.Server != "" {
			cfg.Scenarios = []string{"http"}
		}
	}
	if cfg.Nodes == nil {
		cfg.Nodes = []int{5000, 50000}
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 1
	}
	res := &Result{GOMAXPROCS: runtime.GOMAXPROCS(0), LoadAvgStart: report.LoadAvgText(), Scenarios: map[string]*Figures{}}
	for _, sc := range cfg.Scenarios {
		switch sc {
		case "server_startup":
			if cfg.Binary == "" {
				return nil, fmt.Errorf("bench: the server_startup scenario needs the sextant binary")
			}
			st, err := RunServerStartup(ctx, cfg.Binary, cfg.StartNodes, cfg.StartPlacements)
			if err != nil {
				return nil, err
			}
			res.ServerStartup = st
			continue
		case "http":
			if cfg.HTTP.Server == "" {
				return nil, fmt.Errorf("bench: the http scenario needs a server (--server)")
			}
			var bar *progressbar.ProgressBar
			if cfg.Progress != nil {
				bar = progressbar.NewOptions(cfg.HTTP.Pods, progressbar.OptionSetWriter(cfg.Progress), progressbar.OptionSetDescription("http"))
			}
			f, err := RunHTTP(ctx, cfg.HTTP, bar)
			if bar != nil {
				_ = bar.Finish()
				fmt.Fprintln(cfg.Progress)
			}
			if err != nil {
				return nil, err
			}
			res.HTTP = f
			continue
		}
		if sc == "startup" {
			st, err := RunStartup(cfg.StartNodes, cfg.StartPlacements)
			if err != nil {
				return nil, err
			}
			res.Startup = st
			continue
		}
		if !slices.Contains(Scenarios, sc) {
			return nil, fmt.Errorf("bench: unknown scheduler scenario %q (want %s)", sc, strings.Join(Scenarios, ", "))
		}
		for _, n := range cfg.Nodes {
			init := cfg.InitPods
			if init == 0 {
				init = n
			}
			pods := cfg.Pods
			if sc == "pod_anti_affinity" {
				pods = min(pods, n*4/5) // one per node at most
			}
			s, err := Cluster(n, init)
			if err != nil {
				return nil, err
			}
			ws, err := Workloads(sc, pods)
			if err != nil {
				s.Close()
				return nil, err
			}
			var bar *progressbar.ProgressBar
			if cfg.Progress != nil {
				bar = progressbar.NewOptions(pods, progressbar.OptionSetWriter(cfg.Progress), progressbar.OptionSetDescription(fmt.Sprintf("%s %d nodes", sc, n)))
			}
			f, err := Measure(ctx, s, sc, n, init, ws, cfg.Batch, bar)
			s.Close()
			if bar != nil {
				_ = bar.Finish()
				fmt.Fprintln(cfg.Progress)
			}
			if err != nil {
				return nil, err
			}
			res.Scenarios[fmt.Sprintf("%s_%d_nodes", sc, n)] = f
		}
	}
	res.LoadAvgEnd = report.LoadAvgText()
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return res, enc.Encode(res)
}
