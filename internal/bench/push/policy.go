package push

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"runtime/pprof"
	"strconv"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1"
	security "istio.io/api/security/v1beta1"
	istiotype "istio.io/api/type/v1beta1"

	"github.com/sextant-mesh/sextant/internal/bench/report"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
	engine "github.com/sextant-mesh/sextant/internal/push"
	"github.com/sextant-mesh/sextant/internal/push/pushtest"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// PolicyConfig is one run of the policy scenario.
type PolicyConfig struct {
	Subscribers int           // proxyless gRPC servers, default 1000
	Duration    time.Duration // default 10s
	ConfigEvery time.Duration // one change every, default 200ms
	Progress    io.Writer
	Profile     io.Writer // CPU profile of the change phase; nil: none
}

// PolicyResult is the JSON object "sextant bench push --policy" prints.
type PolicyResult struct {
	Scenario    string  `json:"scenario"`
	Subscribers int     `json:"subscribers"`
	DurationS   float64 `json:"duration_s"`
	// AuthorizationPolicy changes selecting every subscriber's workload:
	// from commit until every subscriber had its new server listener, and
	// per subscriber.
	PolicyChanges   int     `json:"policy_changes"`
	PolicyAllP50MS  float64 `json:"policy_all_p50_ms"`
	PolicyAllP99MS  float64 `json:"policy_all_p99_ms"`
	PolicyAllMaxMS  float64 `json:"policy_all_max_ms"`
	PolicyEachP99MS float64 `json:"policy_each_p99_ms"`
	// The peer in the same run: DestinationRule changes of the cluster
	// every subscriber also watches, delivered by the same engine and
	// streams.
	ClusterChanges  int     `json:"cluster_changes"`
	ClusterAllP50MS float64 `json:"cluster_all_p50_ms"`
	ClusterAllP99MS float64 `json:"cluster_all_p99_ms"`
	// PolicyToClusterP99 is policy_all_p99_ms / cluster_all_p99_ms.
	PolicyToClusterP99 float64 `json:"policy_to_cluster_p99_ratio"`
	Undelivered        int     `json:"undelivered"`
	CPUSeconds         float64 `json:"cpu_s"`
	LoadAvgStart       string  `json:"loadavg_start"`
	LoadAvgEnd         string  `json:"loadavg_end"`
}

// policyTracker records, per change, when each subscriber received it.
type policyTracker struct {
	mu      sync.Mutex
	changes []*trackedChange
	n       int
}

type trackedChange struct {
	typ    xds.Type
	rev    int64
	at     time.Time
	got    []bool
	left   int
	last   time.Duration
	perSub []time.Duration
}

func (t *policyTracker) expect(typ xds.Type, rev int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.changes = append(t.changes, &trackedChange{typ: typ, rev: rev, at: time.Now(), got: make([]bool, t.n), left: t.n})
}

// received: subscriber sub got type typ at version v.
func (t *policyTracker) received(sub int, typ xds.Type, v int64) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.changes {
		if c.typ != typ || c.rev > v || c.got[sub] {
			continue
		}
		c.got[sub] = true
		c.left--
		d := now.Sub(c.at)
		c.perSub = append(c.perSub, d)
		if c.left == 0 {
			c.last = d
		}
	}
}

func (t *policyTracker) pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range t.changes {
		if c.left > 0 {
			n++
		}
	}
	return n
}

func benchAuthz(gen int) *config.Object {
	return &config.Object{Key: config.Key{Kind: config.KindAuthorizationPolicy, Namespace: "default", Name: "orders"},
		AuthorizationPolicy: &security.AuthorizationPolicy{
			Selector: &istiotype.WorkloadSelector{MatchLabels: map[string]string{"app": "orders"}},
			Rules: []*security.Rule{{From: []*security.Rule_From{{Source: &security.Source{
				Principals: []string{fmt.Sprintf("cluster.local/ns/web/sa/frontend-%d", gen)}}}}}},
		}}
}

func benchRule(gen int) *config.Object {
	return &config.Object{Key: config.Key{Kind: config.KindDestinationRule, Namespace: "default", Name: "orders"},
		DestinationRule: &networking.DestinationRule{Host: "orders", TrafficPolicy: &networking.TrafficPolicy{
			ConnectionPool: &networking.ConnectionPoolSettings{Tcp: &networking.ConnectionPoolSettings_TCPSettings{
				ConnectTimeout: durationpb.New(time.Second + time.Duration(gen)*time.Millisecond)}}}}}
}

// RunPolicy measures how fast an AuthorizationPolicy change reaches every
// proxyless gRPC server subscribed to its server listener: Subscribers
// servers of one service (app=orders, each at its own address), all
// selected by the policy, each a real ADS stream (state of the world)
// asking for its own listener and for the service's cluster. Changes
// alternate between the policy and the service's DestinationRule (the
// peer: the config path's cluster delivery to the same streams).
func RunPolicy(ctx context.Context, cfg PolicyConfig, out io.Writer) (PolicyResult, error) {
	if cfg.Subscribers <= 0 {
		cfg.Subscribers = 1000
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 10 * time.Second
	}
	if cfg.ConfigEvery <= 0 {
		cfg.ConfigEvery = 200 * time.Millisecond
	}
	res := PolicyResult{Scenario: fmt.Sprintf("authz_%d_grpc_servers", cfg.Subscribers), Subscribers: cfg.Subscribers, LoadAvgStart: report.LoadAvgText()}
	reg := pushtest.New(1 << 20)
	addrs := make([]string, cfg.Subscribers)
	for i := range addrs {
		host := fmt.Sprintf("10.%d.%d.%d", 1+i/65536, (i/256)%256, i%256)
		addrs[i] = net.JoinHostPort(host, "8080")
		reg.Upsert(&instance.Instance{ID: "orders-" + strconv.Itoa(i), Namespace: "default", Service: "orders", Host: host, Port: 8080,
			Weight: 100, Healthy: true, Metadata: label.FromMap(map[string]string{"app": "orders"})})
	}
	reg.ApplyConfig(benchAuthz(0))
	reg.ApplyConfig(benchRule(0))
	cache := xds.NewCache()
	eng := engine.New(reg, cache, engine.Options{})
	ads := xds.NewServer(cache, xds.ServerOptions{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); eng.Run(ctx) }()
	go func() { defer wg.Done(); ads.Serve(ctx, lis) }()
	defer wg.Wait()
	defer cancel()

	tr := &policyTracker{n: cfg.Subscribers}
	synced := make(chan int, cfg.Subscribers)
	errs := make(chan error, cfg.Subscribers)
	cluster := xds.ClusterName(naming.ServiceKey{Namespace: "default", Name: "orders"}, "", 0)
	for i := range cfg.Subscribers {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return res, err
		}
		defer conn.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := policySubscriber(ctx, conn, i, xds.ServerListenerPrefix+addrs[i], cluster, tr, synced); err != nil && ctx.Err() == nil {
				errs <- err
			}
		}()
	}
	bar := report.NewBar(cfg.Progress, "servers synced", int64(cfg.Subscribers))
	timeout := time.After(5 * time.Minute)
	for range cfg.Subscribers {
		select {
		case <-synced:
			bar.Add(1)
		case err := <-errs:
			return res, err
		case <-timeout:
			return res, errNotSynced
		}
	}
	bar.Finish()

	cpu0 := cpuSeconds()
	if cfg.Profile != nil {
		if err := pprof.StartCPUProfile(cfg.Profile); err != nil {
			return res, err
		}
	}
	tick := time.NewTicker(cfg.ConfigEvery)
	defer tick.Stop()
	end := time.After(cfg.Duration)
	gen := 0
loop:
	for {
		select {
		case <-tick.C:
			gen++
			if gen%2 == 1 {
				tr.expect(xds.TypeListener, reg.Revision()+1)
				reg.ApplyConfig(benchAuthz(gen))
				res.PolicyChanges++
			} else {
				tr.expect(xds.TypeCluster, reg.Revision()+1)
				reg.ApplyConfig(benchRule(gen))
				res.ClusterChanges++
			}
		case err := <-errs:
			return res, err
		case <-end:
			break loop
		}
	}
	for deadline := time.Now().Add(10 * time.Second); tr.pending() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if cfg.Profile != nil {
		pprof.StopCPUProfile()
	}
	res.CPUSeconds = cpuSeconds() - cpu0
	res.DurationS = cfg.Duration.Seconds()
	tr.mu.Lock()
	var pAll, pEach, cAll []time.Duration
	for _, c := range tr.changes {
		if c.left > 0 {
			res.Undelivered++
			continue
		}
		if c.typ == xds.TypeListener {
			pAll = append(pAll, c.last)
			pEach = append(pEach, c.perSub...)
		} else {
			cAll = append(cAll, c.last)
		}
	}
	tr.mu.Unlock()
	res.PolicyAllP50MS, res.PolicyAllP99MS, res.PolicyAllMaxMS = ms(pct(pAll, 0.5)), ms(pct(pAll, 0.99)), ms(pct(pAll, 1))
	res.PolicyEachP99MS = ms(pct(pEach, 0.99))
	res.ClusterAllP50MS, res.ClusterAllP99MS = ms(pct(cAll, 0.5)), ms(pct(cAll, 0.99))
	if res.ClusterAllP99MS > 0 {
		res.PolicyToClusterP99 = res.PolicyAllP99MS / res.ClusterAllP99MS
	}
	res.LoadAvgEnd = report.LoadAvgText()
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return res, enc.Encode(res)
}

// policySubscriber is one proxyless gRPC server's ADS stream: its server
// listener and the service's cluster, ACKing every response.
func policySubscriber(ctx context.Context, conn *grpc.ClientConn, id int, listener, cluster string, tr *policyTracker, synced chan<- int) error {
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	node := &corev3.Node{Id: "orders-" + strconv.Itoa(id), Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{"NAMESPACE": structpb.NewStringValue("default")}}}
	names := map[string][]string{xds.TypeListener.URL(): {listener}, xds.TypeCluster.URL(): {cluster}}
	for _, typ := range []string{xds.TypeListener.URL(), xds.TypeCluster.URL()} {
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typ, ResourceNames: names[typ]}); err != nil {
			return err
		}
	}
	have := map[string]bool{}
	for {
		r, err := stream.Recv()
		if err != nil {
			return err
		}
		typ := xds.TypeListener
		if r.TypeUrl == xds.TypeCluster.URL() {
			typ = xds.TypeCluster
		}
		if v, err := strconv.ParseInt(r.VersionInfo, 10, 64); err == nil && len(r.Resources) > 0 {
			tr.received(id, typ, v)
			if !have[r.TypeUrl] {
				have[r.TypeUrl] = true
				if len(have) == 2 {
					synced <- id
				}
			}
		}
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: r.TypeUrl, ResourceNames: names[r.TypeUrl],
			VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce}); err != nil {
			return err
		}
	}
}
