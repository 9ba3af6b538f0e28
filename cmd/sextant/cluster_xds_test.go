package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sextant-mesh/sextant/internal/store/mysql/mysqltest"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// failoverSub is a delta ADS subscriber with a list of servers, as a
// grpc-go bootstrap's xds_servers or an Envoy ADS cluster of several hosts:
// it streams from the first, and when that stream breaks it goes to the
// next, sending the versions it holds as initial_resource_versions. It
// counts what each connection received, so the test sees what a resume
// resent. A real grpc-go client over the go-control-plane protos.
type failoverSub struct {
	id      int
	servers []string // xDS addresses, in order of preference

	mu       sync.Mutex
	at       int                            // index in servers of the current stream
	streams  int                            // streams opened
	held     map[xds.Type]map[string]string // name -> version
	eps      map[string][]string            // ClusterLoadAssignment name -> host:port
	perConn  [][]string                     // names received on each stream, in order
	lastErr  error
	synced   chan struct{}
	syncOnce sync.Once
}

var subTypes = []xds.Type{xds.TypeCluster, xds.TypeEndpoint}

func newFailoverSub(id int, servers []string) *failoverSub {
	return &failoverSub{id: id, servers: servers, synced: make(chan struct{}),
		held: map[xds.Type]map[string]string{xds.TypeCluster: {}, xds.TypeEndpoint: {}}, eps: map[string][]string{}}
}

func (f *failoverSub) nodeID() string { return fmt.Sprintf("sub-%d", f.id) }

// run streams until ctx ends, moving to the next server when a stream
// breaks.
func (f *failoverSub) run(ctx context.Context, want int) {
	conns := map[string]*grpc.ClientConn{}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for ctx.Err() == nil {
		f.mu.Lock()
		addr := f.servers[f.at]
		f.mu.Unlock()
		conn := conns[addr]
		if conn == nil {
			var err error
			if conn, err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
				f.fail(err)
				return
			}
			conns[addr] = conn
		}
		err := f.stream(ctx, conn, want)
		if ctx.Err() != nil {
			return
		}
		f.mu.Lock()
		f.lastErr = err
		f.at = (f.at + 1) % len(f.servers)
		f.mu.Unlock()
		time.Sleep(50 * time.Millisecond) // a reconnect backoff, as clients have
	}
}

func (f *failoverSub) fail(err error) {
	f.mu.Lock()
	f.lastErr = err
	f.mu.Unlock()
}

func (f *failoverSub) stream(ctx context.Context, conn *grpc.ClientConn, want int) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(sctx, grpc.WaitForReady(false))
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.streams++
	f.perConn = append(f.perConn, nil)
	conn_ := len(f.perConn) - 1
	var reqs []*discoveryv3.DeltaDiscoveryRequest
	for i, t := range subTypes {
		r := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: t.URL(), ResourceNamesSubscribe: []string{"*"},
			InitialResourceVersions: maps.Clone(f.held[t])}
		if i == 0 {
			r.Node = &corev3.Node{Id: f.nodeID()}
		}
		reqs = append(reqs, r)
	}
	f.mu.Unlock()
	for _, r := range reqs {
		if err := s.Send(r); err != nil {
			return err
		}
	}
	for {
		r, err := s.Recv()
		if err != nil {
			return err
		}
		t, ok := xds.TypeOf(r.TypeUrl)
		if !ok {
			return fmt.Errorf("unexpected type %s", r.TypeUrl)
		}
		f.mu.Lock()
		for _, res := range r.Resources {
			f.held[t][res.Name] = res.Version
			f.perConn[conn_] = append(f.perConn[conn_], t.String()+":"+res.Name)
			if t == xds.TypeEndpoint {
				var cla endpointv3.ClusterLoadAssignment
				if err := res.Resource.UnmarshalTo(&cla); err != nil {
					f.mu.Unlock()
					return err
				}
				var addrs []string
				for _, l := range cla.Endpoints {
					for _, e := range l.LbEndpoints {
						a := e.GetEndpoint().GetAddress().GetSocketAddress()
						addrs = append(addrs, fmt.Sprintf("%s:%d", a.GetAddress(), a.GetPortValue()))
					}
				}
				f.eps[res.Name] = addrs
			}
		}
		for _, n := range r.RemovedResources {
			delete(f.held[t], n)
			delete(f.eps, n)
		}
		if len(f.held[xds.TypeCluster]) == want && len(f.held[xds.TypeEndpoint]) == want {
			f.syncOnce.Do(func() { close(f.synced) })
		}
		f.mu.Unlock()
		if err := s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce}); err != nil {
			return err
		}
	}
}

// has reports whether the subscriber's endpoints of cluster hold addr.
func (f *failoverSub) has(cluster, addr string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.eps[cluster], addr)
}

// pushStatus reads a server's GET /v1/push/status.
func pushStatus(t *testing.T, s *clusterServer) (rev int64, resources map[string]int, nodes []string) {
	t.Helper()
	a, err := call("GET", s.base()+"/v1/push/status", nil)
	if err != nil || a.status != 200 {
		t.Fatalf("push status of %s: %v %d %s", s.id, err, a.status, a.body)
	}
	var st struct {
		Engine struct {
			Revision  int64          `json:"revision"`
			Resources map[string]int `json:"resources"`
		} `json:"engine"`
		Subscribers []struct {
			NodeID string `json:"node_id"`
		} `json:"subscribers"`
	}
	if err := json.Unmarshal(a.body, &st); err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Subscribers {
		nodes = append(nodes, s.NodeID)
	}
	return st.Engine.Revision, st.Engine.Resources, nodes
}

// eventually polls cond until it holds or 30 s pass (generous: the test
// must pass on a loaded machine).
func eventually(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for deadline := start.Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
	}
	return time.Since(start)
}

// TestClusterXDSScaleOut: in cluster mode every server serves ADS from its
// own catalog. Three servers on MariaDB, 20 delta subscribers on each (each
// with the three servers as its list, starting at a different one): an
// endpoint change written on server A reaches every subscriber on A, B and
// C; when C is killed its subscribers go to their next server (A, which
// restarted since, so that its versions are other revisions than C's) and
// resume with initial_resource_versions, and A resends nothing they hold
// (the versions' content hashes match across servers), then delivers the
// next change.
func TestClusterXDSScaleOut(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three servers over MariaDB")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	url := mysqltest.URL(t, "")
	var servers []*clusterServer
	var xdsAddrs []string
	for i := range 3 {
		s := &clusterServer{t: t, bin: bin, id: fmt.Sprintf("s%d", i+1), addr: freeAddr(t), xdsAddr: freeAddr(t), url: url}
		s.start()
		t.Cleanup(s.stop)
		servers = append(servers, s)
		xdsAddrs = append(xdsAddrs, s.xdsAddr)
	}
	a := servers[0]

	// Five services of four instances, v1 and v2, each with a
	// DestinationRule of subsets v1 and v2: 15 clusters (the whole service
	// and two subsets each), 15 endpoint sets. Written on A only.
	var docs []string
	var instances []map[string]any
	for i := range 5 {
		svc := fmt.Sprintf("web-%d", i)
		docs = append(docs, fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: %s}
spec:
  host: %s
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}`, svc, svc))
		for j := range 4 {
			instances = append(instances, map[string]any{"service": svc, "id": fmt.Sprintf("%s-%d", svc, j),
				"host": fmt.Sprintf("10.0.%d.%d", i, j+1), "port": 8080, "version": fmt.Sprintf("v%d", j%2+1)})
		}
	}
	resp, err := http.Post(a.base()+"/v1/config:apply", "application/yaml", strings.NewReader(strings.Join(docs, "\n---\n")))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("config apply on A: %v %v", err, resp)
	}
	resp.Body.Close()
	w, err := call("POST", a.base()+"/v1/instances", map[string]any{"instances": instances})
	if err != nil || w.status != 200 {
		t.Fatalf("register on A: %v %d %s", err, w.status, w.body)
	}
	// A restarts (an upgrade, a crash): it computes everything again from
	// the database, so its resources are the others' bytes at other
	// versions (the revision it loaded at). C's subscribers move to A below.
	a.stop()
	a.start()
	const want = 15
	for _, s := range servers {
		eventually(t, "server "+s.id+" publishes 15 clusters and endpoint sets", func() bool {
			_, res, _ := pushStatus(t, s)
			return res["clusters"] == want && res["endpoints"] == want
		})
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	subs := make([]*failoverSub, 60)
	for i := range subs {
		// Subscriber i starts on server i%3, then the next ones in turn.
		list := []string{xdsAddrs[i%3], xdsAddrs[(i+1)%3], xdsAddrs[(i+2)%3]}
		subs[i] = newFailoverSub(i, list)
		wg.Add(1)
		go func() { defer wg.Done(); subs[i].run(ctx, want) }()
	}
	for _, f := range subs {
		select {
		case <-f.synced:
		case <-time.After(30 * time.Second):
			f.mu.Lock()
			defer f.mu.Unlock()
			t.Fatalf("subscriber %d (on %s) holds %d clusters, %d endpoint sets after 30s (last error %v)",
				f.id, f.servers[f.at], len(f.held[xds.TypeCluster]), len(f.held[xds.TypeEndpoint]), f.lastErr)
		}
	}
	for i, s := range servers {
		_, _, nodes := pushStatus(t, s)
		if len(nodes) != 20 {
			t.Fatalf("server %d serves %d subscribers, want 20: %v", i+1, len(nodes), nodes)
		}
	}

	// 1. Written on A, received by every subscriber on A, B and C.
	const cluster, added = "default/web-0", "10.0.9.9:8080"
	start := time.Now()
	w, err = call("POST", a.base()+"/v1/instances", map[string]any{"service": "web-0", "id": "web-0-new", "host": "10.0.9.9", "port": 8080, "version": "v1"})
	if err != nil || w.status != 200 {
		t.Fatalf("register on A: %v %d %s", err, w.status, w.body)
	}
	for i, f := range subs {
		eventually(t, fmt.Sprintf("subscriber %d on server %d sees the instance written on A", i, i%3+1), func() bool { return f.has(cluster, added) })
	}
	t.Logf("write on A -> all 60 subscribers on A, B and C: %v", time.Since(start))

	// 2. C dies: its subscribers move to their next server (A) and resume.
	before := map[int]int{}
	for i, f := range subs {
		f.mu.Lock()
		before[i] = f.streams
		f.mu.Unlock()
	}
	servers[2].kill()
	var moved []*failoverSub
	for i, f := range subs {
		if i%3 == 2 {
			moved = append(moved, f)
		}
	}
	eventually(t, "C's subscribers stream from A", func() bool {
		_, _, nodes := pushStatus(t, a)
		for _, f := range moved {
			if !slices.Contains(nodes, f.nodeID()) {
				return false
			}
		}
		return true
	})
	for _, f := range moved {
		f.mu.Lock()
		if f.streams != 2 || f.servers[f.at] != xdsAddrs[0] {
			f.mu.Unlock()
			t.Fatalf("subscriber %d: %d streams, on %s", f.id, f.streams, f.servers[f.at])
		}
		f.mu.Unlock()
	}
	// Nothing changed meanwhile: the resumed streams must not have been
	// sent anything. A resend goes out right after the first request;
	// should it come later than this check, it still comes before the next
	// change's, and step 3 finds it.
	for _, f := range moved {
		f.mu.Lock()
		got := slices.Clone(f.perConn[1])
		f.mu.Unlock()
		if len(got) != 0 {
			t.Fatalf("subscriber %d resumed on A and was sent again %d resources it held: %v", f.id, len(got), got)
		}
	}
	for i, f := range subs {
		f.mu.Lock()
		if i%3 != 2 && f.streams != before[i] {
			f.mu.Unlock()
			t.Fatalf("subscriber %d of a live server reconnected", i)
		}
		f.mu.Unlock()
	}

	// 3. The next change written on A reaches everyone, the moved ones
	// included; a moved subscriber gets exactly what changed.
	w, err = call("DELETE", a.base()+"/v1/instances/web-0-new", nil)
	if err != nil || w.status != 200 {
		t.Fatalf("deregister on A: %v %d %s", err, w.status, w.body)
	}
	for i, f := range subs {
		eventually(t, fmt.Sprintf("subscriber %d sees the deregistration", i), func() bool { return !f.has(cluster, added) })
	}
	for _, f := range moved {
		f.mu.Lock()
		got := slices.Clone(f.perConn[1])
		f.mu.Unlock()
		slices.Sort(got)
		got = slices.Compact(got)
		if !slices.Equal(got, []string{"endpoints:default/web-0", "endpoints:default/web-0/v1"}) {
			t.Fatalf("subscriber %d after resuming received %v; want only the two endpoint sets that changed", f.id, got)
		}
	}
	var buf bytes.Buffer
	for _, f := range moved[:1] {
		f.mu.Lock()
		fmt.Fprintf(&buf, "subscriber %d: streams %d, received after resuming %v", f.id, f.streams, f.perConn[1])
		f.mu.Unlock()
	}
	t.Log(buf.String())
}

// TestBenchPushServers runs "sextant bench push --servers 3" at a tiny
// scale over a fresh database: three real servers, subscribers spread over
// them, endpoint and config changes written to the first; every change
// reaches every subscriber and the figures are filled in.
func TestBenchPushServers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three servers over MariaDB")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	url := mysqltest.URL(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, res := runBenchPush(t, ctx, bin, nil, "--servers", "3", "--store", url, "--subscribers", "9",
		"--services", "5", "--endpoints", "60", "--duration", "1s", "--churn", "30", "--config-every", "200ms")
	if res.Servers != 3 || res.Clusters != 20 || res.EndpointChanges == 0 || res.Undelivered != 0 || res.AllP99 <= 0 ||
		len(res.PerServer) != 3 || len(res.ServerCPU) != 3 || res.ConfigChanges == 0 || res.ConfigAllP99 <= 0 {
		t.Fatalf("%s", out)
	}
	for i, s := range res.PerServer {
		if s.Subscribers != 3 || s.AllP99 <= 0 {
			t.Fatalf("server %d: %+v\n%s", i+1, s, out)
		}
	}
}

// TestBenchPushOneServerEmbedded runs "sextant bench push --servers 1"
// without --store: the control plane alone in its own process on the
// embedded store (README's server), its subscribers outside it. The
// temporary store is removed afterwards; two servers need a database.
func TestBenchPushOneServerEmbedded(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, res := runBenchPush(t, ctx, bin, []string{"TMPDIR=" + tmp}, "--servers", "1", "--subscribers", "4", "--protocol", "sotw",
		"--services", "5", "--endpoints", "60", "--duration", "1s", "--churn", "30", "--config-every", "200ms")
	if res.Servers != 1 || res.Subscribers != 4 || res.EndpointChanges == 0 || res.Undelivered != 0 || res.AllP99 <= 0 ||
		res.ConfigChanges == 0 || len(res.ServerCPU) != 1 || res.ServerCPU[0] <= 0 {
		t.Fatalf("%s", out)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("the bench left %d entries in TMPDIR (%s...): its store is not removed", len(left), left[0].Name())
	}

	two := exec.CommandContext(ctx, bin, "bench", "push", "--servers", "2")
	msg, err := two.CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "--servers 2 needs --store") {
		t.Fatalf("--servers 2 without --store: %v: %s", err, msg)
	}
}

// benchPushResult is what the bench push tests read of its output.
type benchPushResult struct {
	Servers         int     `json:"servers"`
	Subscribers     int     `json:"subscribers"`
	Clusters        int     `json:"clusters"`
	EndpointChanges int     `json:"endpoint_changes"`
	Undelivered     int     `json:"undelivered"`
	AllP99          float64 `json:"endpoint_all_p99_ms"`
	PerServer       []struct {
		Subscribers int     `json:"subscribers"`
		AllP99      float64 `json:"all_p99_ms"`
	} `json:"per_server"`
	ServerCPU     []float64 `json:"server_cpu_s"`
	ConfigChanges int       `json:"config_changes"`
	ConfigAllP99  float64   `json:"config_all_p99_ms"`
}

// runBenchPush runs "sextant bench push" with args (and env added to
// this process's), and returns its output and what it says.
func runBenchPush(t *testing.T, ctx context.Context, bin string, env []string, args ...string) ([]byte, benchPushResult) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, append([]string{"bench", "push"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var res benchPushResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return out, res
}
