package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	grpcxds "google.golang.org/grpc/xds"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/push"
	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// istioModule is the istio.io/istio whose CRDs (manifests/charts/base) and
// Bookinfo samples the tests apply, as internal/config's TestIstioSamples
// does: read from the module cache, not a dependency of Sextant's module.
const istioModule = "istio.io/istio@v0.0.0-20260827124520-eed52ebb66ad"

var (
	istioOnce sync.Once
	istioDir  string
	istioErr  error
)

// istioCRDs installs Istio's CRDs into srv (once per test process) and
// returns the istio module's directory.
func istioCRDs(t *testing.T, srv *apiServer) string {
	t.Helper()
	istioOnce.Do(func() {
		cmd := exec.Command("go", "mod", "download", "-json", istioModule)
		cmd.Dir = os.TempDir()
		cmd.Env = append(os.Environ(), "GO111MODULE=on", "GOFLAGS=")
		out, err := cmd.Output()
		if err != nil {
			istioErr = fmt.Errorf("go mod download %s (the module proxy or the module cache is needed): %v\n%s", istioModule, err, out)
			return
		}
		var mod struct{ Dir string }
		if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
			istioErr = fmt.Errorf("go mod download %s: %s", istioModule, out)
			return
		}
		istioDir = mod.Dir
		// Server-side: the CRDs are too large for kubectl's last-applied
		// annotation.
		if out, err := kubectlOut(srv, "apply", "--server-side", "-f", filepath.Join(istioDir, "manifests", "charts", "base", "files", "crd-all.gen.yaml")); err != nil {
			istioErr = fmt.Errorf("installing Istio's CRDs: %v\n%s", err, out)
			return
		}
		if out, err := kubectlOut(srv, "wait", "--for", "condition=established", "--timeout", "2m", "crd", "--all"); err != nil {
			istioErr = fmt.Errorf("waiting for Istio's CRDs: %v\n%s", err, out)
		}
	})
	if istioErr != nil {
		t.Fatal(istioErr)
	}
	return istioDir
}

func kubectlOut(srv *apiServer, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", srv.kubeconfig}, args...)...).CombinedOutput()
}

// kubectl runs Debian's kubectl against srv and fails the test on an error.
func kubectl(t *testing.T, srv *apiServer, args ...string) string {
	t.Helper()
	out, err := kubectlOut(srv, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// configStack is the server's control plane over a registry with the
// config table: the push engine and the ADS server, as cmd/sextant wires
// them.
type configStack struct {
	reg   *registry.Registry
	table *config.Table
	ads   string
}

func startConfigStack(t *testing.T) *configStack {
	t.Helper()
	st, err := embedded.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	table := config.NewTable()
	reg, err := registry.Open(st, registry.Options{Engine: commit.Options{Tables: map[store.Kind]catalog.Table{store.Config: table}}})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	table.Attach(reg.Catalog())
	cache := xds.NewCache()
	src, err := push.NewCatalogSource(reg.Catalog(), table)
	if err != nil {
		t.Fatal(err)
	}
	engine := push.New(src, cache, push.Options{})
	ads := xds.NewServer(cache, xds.ServerOptions{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { engine.Run(ctx); done <- struct{}{} }()
	go func() { ads.Serve(ctx, lis); done <- struct{}{} }()
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
		reg.Close()
		st.Close()
	})
	return &configStack{reg: reg, table: table, ads: lis.Addr().String()}
}

// runIstio runs an Istio source until the test ends and waits for its
// first read.
func runIstio(t *testing.T, srv *apiServer, cs *configStack, opts Options) *Istio {
	t.Helper()
	return runIstioEvery(t, srv, cs, opts, 0)
}

// runIstioEvery is runIstio looking for newly installed CRDs every
// rediscover (0: the default).
func runIstioEvery(t *testing.T, srv *apiServer, cs *configStack, opts Options, rediscover time.Duration) *Istio {
	t.Helper()
	s, _ := startIstio(t, srv, cs, opts, rediscover)
	return s
}

// startIstio is runIstioEvery that also returns a stop, for a restart
// (the end of the test stops it too).
func startIstio(t *testing.T, srv *apiServer, cs *configStack, opts Options, rediscover time.Duration) (*Istio, func()) {
	t.Helper()
	// As cmd/sextant wires it: a host naming a service without instances
	// is accepted with a warning.
	ins := cs.reg.Instances()
	registered := func(k naming.ServiceKey) bool {
		g := ins.Lookup(k)
		return g != nil && g.Len() > 0
	}
	s, err := NewIstio(srv.cfg, cs.reg.Engine(), cs.table, registered, opts)
	if err != nil {
		t.Fatal(err)
	}
	s.rediscover = rediscover
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("istio source: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	if err := s.WaitSynced(wctx); err != nil {
		t.Fatalf("first read: %v", err)
	}
	return s, stop
}

// grpcBackend is a real gRPC server on loopback answering with its name.
type grpcBackend struct {
	testgrpc.UnimplementedTestServiceServer
	name string
	port int
}

func (b *grpcBackend) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Hostname: b.name}, nil
}

// hostIP is an IPv4 address of this machine that is not loopback: an
// EndpointSlice may not hold a loopback address.
func hostIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Fatal("this machine has no IPv4 address but loopback, and an EndpointSlice may not hold one")
	return ""
}

func startGRPCBackend(t *testing.T, name, ip string) *grpcBackend {
	t.Helper()
	lis, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	b := &grpcBackend{name: name, port: lis.Addr().(*net.TCPAddr).Port}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, b)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return b
}

// xdsClient is grpc-go's own xDS client for xds:///target, a node of ns.
func xdsClient(t *testing.T, ads, ns, target string) testgrpc.TestServiceClient {
	t.Helper()
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": "bookinfo-client", "metadata": {"NAMESPACE": %q}}
	}`, ads, ns)
	resolver, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///"+target, grpc.WithResolvers(resolver), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return testgrpc.NewTestServiceClient(conn)
}

// settleOn calls (as user, "" for none) until n calls in a row reach want,
// for at most 30 s (the push of a change, and grpc-go's switch of routes,
// take a moment).
func settleOn(t *testing.T, c testgrpc.TestServiceClient, user, want string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	var lastErr error
	for row := 0; row < n; {
		if time.Now().After(deadline) {
			t.Fatalf("calls (end-user %q) did not settle on %s in 30s: last reached %q (%v)", user, want, last, lastErr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if user != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "end-user", user)
		}
		r, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
		cancel()
		last, lastErr = r.GetHostname(), err
		if err == nil && last == want {
			row++
			continue
		}
		row = 0
		time.Sleep(20 * time.Millisecond)
	}
}

// istioStatus is the part of an Istio object's status the source writes.
type istioStatus struct {
	ObservedGeneration int64 `json:"observedGeneration"`
	ValidationMessages []struct {
		Type  struct{ Code, Name string }
		Level string
	} `json:"validationMessages"`
	Conditions []struct {
		Type, Status, Reason, Message string
	} `json:"conditions"`
}

// waitStatus reads kind/name's status with kubectl until ok holds.
func waitStatus(t *testing.T, srv *apiServer, ns, kind, name string, ok func(gen int64, st istioStatus) bool) istioStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var obj struct {
			Metadata struct{ Generation int64 }
			Status   istioStatus
		}
		out := kubectl(t, srv, "get", "-n", ns, kind, name, "-o", "json")
		if err := json.Unmarshal([]byte(out), &obj); err != nil {
			t.Fatalf("kubectl get %s %s: %v\n%s", kind, name, err, out)
		}
		if ok(obj.Metadata.Generation, obj.Status) {
			return obj.Status
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s/%s: status not as wanted after 30s:\n%s", kind, ns, name, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func accepted(gen int64, st istioStatus) bool {
	return st.ObservedGeneration == gen && len(st.Conditions) == 1 && st.Conditions[0].Status == "True" && len(st.ValidationMessages) == 0
}

// TestIstioBookinfo: Istio's CRDs are installed in a real kube-apiserver
// and Istio's own Bookinfo networking samples applied with kubectl; the
// reviews service's instances come from EndpointSlices of pods labelled
// version v1..v3. Sextant reads the samples as its config: grpc-go's xDS
// client follows virtual-service-all-v1 to v1, virtual-service-reviews-v3
// to v3, and virtual-service-reviews-jason-v2-v3 (applied as v1beta1) to v2
// for end-user jason. Accepted objects get observedGeneration and an
// Accepted condition in their status (one naming a service without
// instances, a WARNING IST0101 too); an object Sextant refuses (a
// DestinationRule with warmupDurationSecs) gets its problems in
// status.validationMessages and the condition; one named as
// an object written through Sextant's API is refused as a conflict, the
// API's kept; the objects are read-only through Sextant; a deleted object
// goes; a namespace not synced is not read.
func TestIstioBookinfo(t *testing.T) {
	srv := apiServerFor(t)
	dir := istioCRDs(t, srv)
	samples := filepath.Join(dir, "samples", "bookinfo", "networking")
	kc := kubernetes.NewForConfigOrDie(srv.cfg)
	ctx := context.Background()
	const ns = "bookinfo"
	createNamespace(t, kc, ns)
	createNamespace(t, kc, "bookinfo-other")

	// reviews v1, v2, v3: a pod each, labelled as Bookinfo's are, and an
	// EndpointSlice each (the backends listen on ports of their own, on
	// this machine's address).
	ip := hostIP(t)
	for _, v := range []string{"v1", "v2", "v3"} {
		b := startGRPCBackend(t, "reviews-"+v, ip)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reviews-" + v,
			Labels: map[string]string{"app": "reviews", "version": v}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "reviews", Image: "reviews"}}}}
		if _, err := kc.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ep := endpoint(ip, "reviews-"+v, true, true, false)
		ep.NodeName = nil
		es := slice(ns, "reviews-"+v, "reviews", ep)
		es.Ports = []discoveryv1.EndpointPort{{Name: ptr("grpc"), Port: ptr(int32(b.port)), Protocol: ptr(corev1.ProtocolTCP)}}
		if _, err := kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kubectl(t, srv, "apply", "-n", ns, "-f", filepath.Join(samples, "destination-rule-all.yaml"))
	kubectl(t, srv, "apply", "-n", ns, "-f", filepath.Join(samples, "virtual-service-all-v1.yaml"))
	kubectl(t, srv, "apply", "-n", ns, "-f", filepath.Join(samples, "egress-rule-google-apis.yaml"))
	kubectl(t, srv, "apply", "-n", "bookinfo-other", "-f", filepath.Join(samples, "virtual-service-reviews-v3.yaml"))

	cs := startConfigStack(t)
	runSyncer(t, srv.cfg, cs.reg, Options{Namespaces: []string{ns}})
	// Written through Sextant's API before: the Kubernetes object of the
	// same name (virtual-service-all-v1's details) is refused, not fought.
	apiVS, err := config.Decode([]byte("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: details, namespace: " + ns + "}\nspec:\n  hosts: [details]\n  http:\n  - route: [{destination: {host: details}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.reg.Engine().Submit(ctx, &config.ApplyWrite{Objects: apiVS, Table: cs.table}); err != nil {
		t.Fatal(err)
	}
	runIstio(t, srv, cs, Options{Namespaces: []string{ns}})

	c := xdsClient(t, cs.ads, ns, "reviews")
	settleOn(t, c, "", "reviews-v1", 10)
	waitStatus(t, srv, ns, "virtualservice", "reviews", accepted)
	waitStatus(t, srv, ns, "destinationrule", "reviews", accepted)
	// ratings has no instances here: served, with a warning.
	st := waitStatus(t, srv, ns, "virtualservice", "ratings", func(gen int64, st istioStatus) bool {
		return st.ObservedGeneration == gen && len(st.ValidationMessages) > 0
	})
	if m := st.ValidationMessages[0]; m.Level != "WARNING" || m.Type.Code != "IST0101" || st.Conditions[0].Status != "True" ||
		!strings.Contains(st.Conditions[0].Message, "no registered instances") {
		t.Errorf("a VirtualService naming a service without instances: status %+v", st)
	}

	kubectl(t, srv, "apply", "-n", ns, "-f", filepath.Join(samples, "virtual-service-reviews-v3.yaml"))
	settleOn(t, c, "", "reviews-v3", 10)
	waitStatus(t, srv, ns, "virtualservice", "reviews", func(gen int64, st istioStatus) bool { return gen == 2 && accepted(gen, st) })

	// The same kind at v1beta1 (one object, whichever version it is
	// written as).
	jason, err := os.ReadFile(filepath.Join(samples, "virtual-service-reviews-jason-v2-v3.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	beta := filepath.Join(t.TempDir(), "jason-v1beta1.yaml")
	if err := os.WriteFile(beta, []byte(strings.ReplaceAll(string(jason), "networking.istio.io/v1\n", "networking.istio.io/v1beta1\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, srv, "apply", "-n", ns, "-f", beta)
	settleOn(t, c, "jason", "reviews-v2", 10)
	settleOn(t, c, "", "reviews-v3", 10)

	// An object Sextant refuses (a field it does not follow, which Istio's
	// schema allows): its problems in its status.
	refused := filepath.Join(t.TempDir(), "refused.yaml")
	if err := os.WriteFile(refused, []byte(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews-warmup}
spec:
  host: reviews
  trafficPolicy:
    loadBalancer: {simple: ROUND_ROBIN, warmupDurationSecs: 10s}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, srv, "apply", "-n", ns, "-f", refused)
	st = waitStatus(t, srv, ns, "destinationrule", "reviews-warmup", func(gen int64, st istioStatus) bool {
		return st.ObservedGeneration == gen && len(st.ValidationMessages) > 0
	})
	t.Logf("the refused DestinationRule's status: %+v", st)
	for _, m := range st.ValidationMessages {
		if m.Level != "ERROR" || m.Type.Code != "IST0106" {
			t.Errorf("validation message %+v, want an ERROR IST0106 SchemaValidationError", m)
		}
	}
	if len(st.Conditions) != 1 || st.Conditions[0].Status != "False" || !strings.Contains(st.Conditions[0].Message, "warmupDurationSecs") {
		t.Errorf("refused object's condition does not name its problem: %+v", st.Conditions)
	}
	drKey := config.Key{Kind: config.KindDestinationRule, Namespace: ns, Name: "reviews-warmup"}
	if cs.table.Get(drKey) != nil {
		t.Error("a refused object is served")
	}

	st = waitStatus(t, srv, ns, "virtualservice", "details", func(gen int64, st istioStatus) bool {
		return st.ObservedGeneration == gen && len(st.Conditions) == 1 && st.Conditions[0].Reason == "Conflict"
	})
	if !strings.Contains(st.Conditions[0].Message, "written through Sextant's APIs") || len(st.ValidationMessages) != 1 || st.ValidationMessages[0].Type.Code != "IST0145" {
		t.Errorf("the conflicting object's status: %+v", st)
	}
	if e := cs.table.Get(config.Key{Kind: config.KindVirtualService, Namespace: ns, Name: "details"}); e == nil || e.Object.Owner() != "" {
		t.Errorf("the API's VirtualService details was replaced: %+v", e)
	}

	// Read-only through Sextant's APIs.
	vsKey := config.Key{Kind: config.KindVirtualService, Namespace: ns, Name: "reviews"}
	var owned *config.OwnedError
	if _, err := cs.reg.Engine().Submit(ctx, &config.DeleteWrite{Key: vsKey}); !errors.As(err, &owned) || owned.Owner != Owner {
		t.Errorf("delete through the API of an object read from Kubernetes: %v", err)
	}
	if e := cs.table.Get(config.Key{Kind: config.KindVirtualService, Namespace: "bookinfo-other", Name: "reviews"}); e != nil {
		t.Error("a namespace not synced was read")
	}

	// Deleted in Kubernetes, gone from Sextant: every version reaches v1..v3.
	kubectl(t, srv, "delete", "-n", ns, "virtualservice", "reviews")
	deadline := time.Now().Add(30 * time.Second)
	for cs.table.Get(vsKey) != nil {
		if time.Now().After(deadline) {
			t.Fatal("a VirtualService deleted in Kubernetes is still in Sextant after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if e := cs.table.Get(config.Key{Kind: config.KindDestinationRule, Namespace: ns, Name: "reviews"}); e == nil || e.Object.Owner() != Owner {
		t.Errorf("destination rule reviews: %+v", e)
	}
}

// TestIstioCRDInstalledLater: a CRD installed after the source started
// (PeerAuthentication's, deleted and installed again here) is found, and
// its objects read, without a restart.
func TestIstioCRDInstalledLater(t *testing.T) {
	srv := apiServerFor(t)
	dir := istioCRDs(t, srv)
	kc := kubernetes.NewForConfigOrDie(srv.cfg)
	const ns = "crd-later"
	createNamespace(t, kc, ns)
	const crd = "peerauthentications.security.istio.io"
	kubectl(t, srv, "delete", "crd", crd, "--wait=true")
	cs := startConfigStack(t)
	runIstioEvery(t, srv, cs, Options{Namespaces: []string{ns}}, 200*time.Millisecond)
	kubectl(t, srv, "apply", "--server-side", "-f", filepath.Join(dir, "manifests", "charts", "base", "files", "crd-all.gen.yaml"))
	kubectl(t, srv, "wait", "--for", "condition=established", "--timeout", "2m", "crd/"+crd)
	pa := filepath.Join(t.TempDir(), "pa.yaml")
	if err := os.WriteFile(pa, []byte("apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: strict}\nspec:\n  mtls: {mode: STRICT}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The CRD may serve a moment after it is established.
	kubectlUntil(t, srv, "a PeerAuthentication applied once its CRD serves", func(_ string, err error) bool { return err == nil }, "apply", "-n", ns, "-f", pa)
	key := config.Key{Kind: config.KindPeerAuthentication, Namespace: ns, Name: "strict"}
	deadline := time.Now().Add(30 * time.Second)
	for cs.table.Get(key) == nil {
		if time.Now().After(deadline) {
			t.Fatal("a PeerAuthentication of a CRD installed after the start is not read after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitStatus(t, srv, ns, "peerauthentication", "strict", accepted)
}

// vsObject is VirtualService name of namespace ns routing to host.
func vsObject(ns, name, host string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{"hosts": []any{host}, "http": []any{
			map[string]any{"route": []any{map[string]any{"destination": map[string]any{"host": host}}}},
		}},
	}}
}

// TestIstioLag measures the Kubernetes door for config: 100
// VirtualServices created one by one through the API server, each timed
// from the start of its create to the object in Sextant's config table;
// beside it, the same 100 objects written as "sextant config apply" writes
// them (the write engine, in process), each timed to its answer. Run with
// -v for the figures (docs/perf/kubernetes.md).
func TestIstioLag(t *testing.T) {
	srv := apiServerFor(t)
	istioCRDs(t, srv)
	kc := kubernetes.NewForConfigOrDie(srv.cfg)
	ctx := context.Background()
	const ns = "istio-lag"
	createNamespace(t, kc, ns)
	cs := startConfigStack(t)
	runIstio(t, srv, cs, Options{Namespaces: []string{ns}})
	dyn := dynamic.NewForConfigOrDie(srv.cfg)
	vs := dyn.Resource(schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "virtualservices"}).Namespace(ns)

	const n = 100
	started := make([]time.Time, n)
	answered := make([]time.Duration, n) // the create's own time
	seen := make([]time.Time, n)
	keys := make([]config.Key, n)
	for i := range n {
		keys[i] = config.Key{Kind: config.KindVirtualService, Namespace: ns, Name: fmt.Sprintf("vs-%03d", i)}
	}
	var mu sync.Mutex
	wctx, stop := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		var rev int64
		for wctx.Err() == nil {
			cs.table.Wait(wctx, rev)
			rev = cs.table.Revision()
			now := time.Now()
			mu.Lock()
			for i, k := range keys {
				if seen[i].IsZero() && cs.table.Get(k) != nil {
					seen[i] = now
				}
			}
			mu.Unlock()
		}
	}()
	for i := range n {
		mu.Lock()
		started[i] = time.Now()
		mu.Unlock()
		if _, err := vs.Create(ctx, vsObject(ns, keys[i].Name, fmt.Sprintf("svc-%03d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		answered[i] = time.Since(started[i])
	}
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		done := !slices.ContainsFunc(seen, time.Time.IsZero)
		mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not every VirtualService is in Sextant's config after a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-watched
	lags := make([]time.Duration, n)
	after := make([]time.Duration, n) // from the create's answer: Sextant's part
	for i := range n {
		lags[i] = seen[i].Sub(started[i])
		after[i] = max(0, lags[i]-answered[i])
	}

	// The same objects through the write engine, as config apply writes.
	direct := make([]time.Duration, n)
	for i := range n {
		objs, err := config.Decode(mustJSON(t, vsObject("direct", keys[i].Name, fmt.Sprintf("svc-%03d", i)).Object))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := cs.reg.Engine().Submit(ctx, &config.ApplyWrite{Objects: objs, Table: cs.table}); err != nil {
			t.Fatal(err)
		}
		direct[i] = time.Since(start)
	}
	slices.Sort(lags)
	slices.Sort(direct)
	slices.Sort(answered)
	slices.Sort(after)
	p50, p99 := lags[n/2], lags[n*99/100]
	d50, d99 := direct[n/2], direct[n*99/100]
	t.Logf("Istio config lag (create through the API server -> Sextant's config table), %d VirtualServices: p50 %v, p99 %v, max %v "+
		"(the API server's answer to the create: p50 %v, p99 %v; from that answer to the table: p50 %v, p99 %v); "+
		"the same objects through the write engine (config apply's path, in process): p50 %v, p99 %v",
		n, p50, p99, lags[n-1], answered[n/2], answered[n*99/100], after[n/2], after[n*99/100], d50, d99)
	if p99 > 10*time.Second {
		t.Errorf("Istio config lag p99 %v", p99)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
