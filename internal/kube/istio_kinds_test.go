package kube

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/locality"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/registry"
)

// applyYAML writes doc to a file and applies it to namespace ns with
// kubectl.
func applyYAML(t *testing.T, srv *apiServer, ns, doc string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "obj.yaml")
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, srv, "apply", "-n", ns, "-f", f)
}

// ratingsWE is WorkloadEntry ratings-vm: service ratings, version v2, at
// addr:port, in loc.
func ratingsWE(addr string, port int, loc string) string {
	return `apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: ratings-vm}
spec:
  address: ` + addr + `
  ports: {grpc: ` + strconv.Itoa(port) + `}
  labels: {app: ratings, version: v2}
  locality: ` + loc + `
  serviceAccount: ratings
`
}

// waitInstance polls the registry until ok holds for instance id (nil:
// absent), for at most 30 s.
func waitInstance(t *testing.T, reg *registry.Registry, id, what string, ok func(in *instance.Instance) bool) *instance.Instance {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		in := reg.Instances().Get(id)
		if ok(in) {
			return in
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 30s (instance %s: %+v)", what, id, in)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestIstioWorkloadEntry: a WorkloadEntry created in Kubernetes is an
// instance of its service in the registry (id we:NS:NAME, its labels,
// locality and service account), read-only through the registry's API;
// a VirtualService sending ratings to subset v2 reaches it from grpc-go's
// xDS client. The EndpointSlice sync, whose Owner is the same name, leaves
// it alone: its first read (which removes Kubernetes instances no slice
// names) keeps it, the deletion of the service's slice keeps it, and the
// WorkloadEntry's changes make no sync write. A change of the object
// moves the instance (port, locality, labels); an invalid one is refused
// in its status with no instance; the deletion removes the instance, and
// so does one while the source is down, at its next first read.
func TestIstioWorkloadEntry(t *testing.T) {
	srv := apiServerFor(t)
	istioCRDs(t, srv)
	kc := kubernetes.NewForConfigOrDie(srv.cfg)
	ctx := context.Background()
	const ns = "istio-we"
	createNamespace(t, kc, ns)
	ip := hostIP(t)

	// ratings v1: a pod with an EndpointSlice; v2: a VM, only the
	// WorkloadEntry's.
	pod := startGRPCBackend(t, "ratings-pod", ip)
	vm1 := startGRPCBackend(t, "ratings-vm1", ip)
	vm2 := startGRPCBackend(t, "ratings-vm2", ip)
	if _, err := kc.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ratings-v1",
		Labels: map[string]string{"app": "ratings", "version": "v1"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "ratings", Image: "ratings"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ep := endpoint(ip, "ratings-v1", true, true, false)
	ep.NodeName = nil
	es := slice(ns, "ratings-v1", "ratings", ep)
	es.Ports = []discoveryv1.EndpointPort{{Name: ptr("grpc"), Port: ptr(int32(pod.port)), Protocol: ptr(corev1.ProtocolTCP)}}
	if _, err := kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	applyYAML(t, srv, ns, ratingsWE(ip, vm1.port, "us-east/zone-a/rack-1"))
	applyYAML(t, srv, ns, `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ratings}
spec:
  host: ratings
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings}
spec:
  hosts: [ratings]
  http:
  - route: [{destination: {host: ratings, subset: v2}}]
`)

	cs := startConfigStack(t)
	// The Istio source first: ratings' only instance is then the
	// WorkloadEntry's, which the first read writes before the
	// VirtualService and DestinationRule naming ratings (no warning).
	_, stopIstio := startIstio(t, srv, cs, Options{Namespaces: []string{ns}}, 0)
	weKey := config.Key{Kind: config.KindWorkloadEntry, Namespace: ns, Name: "ratings-vm"}
	id := config.WorkloadInstanceID(weKey)
	if id != "we:"+ns+":ratings-vm" {
		t.Fatalf("instance id %q", id)
	}
	in := waitInstance(t, cs.reg, id, "the WorkloadEntry's instance", func(in *instance.Instance) bool { return in != nil })
	md := in.Metadata.Map()
	if in.Service != "ratings" || in.Namespace != ns || in.Host != ip || in.Port != vm1.port || in.Version != "v2" || !in.Healthy ||
		md["app"] != "ratings" || md[locality.LabelRegion] != "us-east" || md[locality.LabelZone] != "zone-a" ||
		md[locality.LabelSubZone] != "rack-1" || md[config.MetaServiceAccount] != "ratings" ||
		md[instance.OwnerLabel] != config.WorkloadOwner(weKey) {
		t.Errorf("the WorkloadEntry's instance: %+v", in)
	}
	if e := cs.table.Get(weKey); e == nil || e.Object.Owner() != Owner {
		t.Errorf("the WorkloadEntry in the config table: %+v", e)
	}
	waitStatus(t, srv, ns, "workloadentry", "ratings-vm", accepted)
	waitStatus(t, srv, ns, "virtualservice", "ratings", accepted)
	// Its subset v1 has no instance until the slice sync runs: that
	// warning, not ratings' lack of instances.
	st := waitStatus(t, srv, ns, "destinationrule", "ratings", func(gen int64, st istioStatus) bool {
		return st.ObservedGeneration == gen && len(st.Conditions) == 1
	})
	if c := st.Conditions[0]; c.Status != "True" || strings.Contains(c.Message, "no registered instances") || !strings.Contains(c.Message, `subset "v1"`) {
		t.Errorf("the DestinationRule's status: %+v", st)
	}

	// The slice sync starts after: its first read removes the Kubernetes
	// instances no slice names, and must not count the WorkloadEntry's.
	syncer := runSyncer(t, srv.cfg, cs.reg, Options{Namespaces: []string{ns}})
	svc := naming.ServiceKey{Namespace: ns, Name: "ratings"}
	waitFor(t, cs.reg, svc, "ratings' pod and VM", func(g *registry.Service) bool { return g.Len() == 2 })
	if cs.reg.Instances().Get(id) == nil {
		t.Fatal("the slice sync's first read removed the WorkloadEntry's instance")
	}
	c := xdsClient(t, cs.ads, ns, "ratings")
	settleOn(t, c, "", "ratings-vm1", 10)

	// Read-only through the registry's API, owned by the object.
	var owned *registry.OwnedError
	if _, _, err := cs.reg.Deregister(ctx, []string{id}); !errors.As(err, &owned) || owned.Owner != config.WorkloadOwner(weKey) {
		t.Errorf("deregister through the API of a WorkloadEntry's instance: %v", err)
	}

	// The service's slice deleted: the pod's instance goes, the VM's stays.
	if err := kc.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "ratings-v1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	g := waitFor(t, cs.reg, svc, "the pod's instance removed", func(g *registry.Service) bool { return g.Len() == 1 })
	if items := g.Items(); items[0].ID != id {
		t.Fatalf("after the slice's deletion ratings holds %+v, want the WorkloadEntry's instance", items[0])
	}
	settleOn(t, c, "", "ratings-vm1", 5)

	// Changed in Kubernetes: the instance follows, with no write of the
	// slice sync.
	writes := syncer.Writes()
	applyYAML(t, srv, ns, ratingsWE(ip, vm2.port, "eu-west/zone-b"))
	in = waitInstance(t, cs.reg, id, "the changed WorkloadEntry's instance", func(in *instance.Instance) bool { return in != nil && in.Port == vm2.port })
	md = in.Metadata.Map()
	if md[locality.LabelRegion] != "eu-west" || md[locality.LabelZone] != "zone-b" || md[locality.LabelSubZone] != "" || in.Version != "v2" {
		t.Errorf("the changed WorkloadEntry's instance: %+v", in)
	}
	settleOn(t, c, "", "ratings-vm2", 10)
	waitStatus(t, srv, ns, "workloadentry", "ratings-vm", func(gen int64, st istioStatus) bool { return gen == 2 && accepted(gen, st) })
	if n := syncer.Writes(); n != writes {
		t.Errorf("the slice sync wrote %d times for a WorkloadEntry's change", n-writes)
	}

	// Refused (a network: Sextant has one), in its status; no instance.
	applyYAML(t, srv, ns, `apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: ratings-remote}
spec: {address: 10.99.0.1, network: net-2, labels: {app: ratings}}
`)
	st = waitStatus(t, srv, ns, "workloadentry", "ratings-remote", func(gen int64, st istioStatus) bool {
		return st.ObservedGeneration == gen && len(st.ValidationMessages) > 0
	})
	if len(st.Conditions) != 1 || st.Conditions[0].Status != "False" || !strings.Contains(st.Conditions[0].Message, "spec.network") ||
		st.ValidationMessages[0].Type.Code != "IST0106" {
		t.Errorf("a refused WorkloadEntry's status: %+v", st)
	}
	remote := config.Key{Kind: config.KindWorkloadEntry, Namespace: ns, Name: "ratings-remote"}
	if cs.reg.Instances().Get(config.WorkloadInstanceID(remote)) != nil || cs.table.Get(remote) != nil {
		t.Error("a refused WorkloadEntry is served")
	}

	// Deleted in Kubernetes: the object and its instance go.
	kubectl(t, srv, "delete", "-n", ns, "workloadentry", "ratings-vm")
	waitInstance(t, cs.reg, id, "the deleted WorkloadEntry's instance removed", func(in *instance.Instance) bool { return in == nil })
	if cs.table.Get(weKey) != nil {
		t.Error("a WorkloadEntry deleted in Kubernetes is still in the config table")
	}
	if n := syncer.Writes(); n != writes {
		t.Errorf("the slice sync wrote %d times for WorkloadEntry changes", n-writes)
	}

	// Deleted while the source is down: its next first read removes the
	// object and the instance.
	applyYAML(t, srv, ns, strings.Replace(ratingsWE(ip, vm1.port, "us-east"), "name: ratings-vm", "name: ratings-vm-b", 1))
	bKey := config.Key{Kind: config.KindWorkloadEntry, Namespace: ns, Name: "ratings-vm-b"}
	bID := config.WorkloadInstanceID(bKey)
	waitInstance(t, cs.reg, bID, "the second WorkloadEntry's instance", func(in *instance.Instance) bool { return in != nil })
	stopIstio()
	kubectl(t, srv, "delete", "-n", ns, "workloadentry", "ratings-vm-b")
	if cs.reg.Instances().Get(bID) == nil {
		t.Fatal("the instance went with no source running")
	}
	runIstio(t, srv, cs, Options{Namespaces: []string{ns}})
	if in := cs.reg.Instances().Get(bID); in != nil || cs.table.Get(bKey) != nil {
		t.Errorf("a WorkloadEntry deleted while the source was down is still served after its first read: instance %+v", in)
	}
}

// TestIstioSidecarTelemetry: a Sidecar and a Telemetry (the one at
// telemetry.istio.io/v1alpha1, as older Istios write it) created in
// Kubernetes are in Sextant's config table owned by Kubernetes, their
// status Accepted; ones Sextant refuses (an egress listener's
// captureMode, an access log provider it does not have) get their problem
// in their status and are not served; a change and a deletion follow.
func TestIstioSidecarTelemetry(t *testing.T) {
	srv := apiServerFor(t)
	istioCRDs(t, srv)
	kc := kubernetes.NewForConfigOrDie(srv.cfg)
	const ns = "istio-kinds"
	createNamespace(t, kc, ns)
	applyYAML(t, srv, ns, `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default}
spec:
  outboundTrafficPolicy: {mode: REGISTRY_ONLY}
  egress: [{hosts: ["./*", "istio-system/*"]}]
---
apiVersion: telemetry.istio.io/v1alpha1
kind: Telemetry
metadata: {name: tracing}
spec:
  tracing: [{providers: [{name: otel-tracing}], randomSamplingPercentage: 10}]
`)
	cs := startConfigStack(t)
	runIstio(t, srv, cs, Options{Namespaces: []string{ns}})

	scKey := config.Key{Kind: config.KindSidecar, Namespace: ns, Name: "default"}
	tmKey := config.Key{Kind: config.KindTelemetry, Namespace: ns, Name: "tracing"}
	for _, k := range []config.Key{scKey, tmKey} {
		if e := cs.table.Get(k); e == nil || e.Object.Owner() != Owner {
			t.Errorf("%s in the config table: %+v", k, e)
		}
	}
	if e := cs.table.Get(scKey); e != nil && len(e.Object.Sidecar.GetEgress()) != 1 {
		t.Errorf("the Sidecar's egress: %+v", e.Object.Sidecar.GetEgress())
	}
	waitStatus(t, srv, ns, "sidecar", "default", accepted)
	waitStatus(t, srv, ns, "telemetry", "tracing", accepted)

	applyYAML(t, srv, ns, `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: capture-none}
spec:
  egress: [{captureMode: NONE, hosts: ["./*"]}]
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: logs}
spec:
  accessLogging: [{providers: [{name: stackdriver}]}]
`)
	for _, c := range []struct{ kind, name, want string }{
		{"sidecar", "capture-none", "spec.egress[0].captureMode"},
		{"telemetry", "logs", "not an access log provider"},
	} {
		st := waitStatus(t, srv, ns, c.kind, c.name, func(gen int64, st istioStatus) bool {
			return st.ObservedGeneration == gen && len(st.ValidationMessages) > 0
		})
		if len(st.Conditions) != 1 || st.Conditions[0].Status != "False" || !strings.Contains(st.Conditions[0].Message, c.want) {
			t.Errorf("refused %s %s: status %+v, want a condition naming %q", c.kind, c.name, st, c.want)
		}
	}
	if cs.table.Get(config.Key{Kind: config.KindSidecar, Namespace: ns, Name: "capture-none"}) != nil ||
		cs.table.Get(config.Key{Kind: config.KindTelemetry, Namespace: ns, Name: "logs"}) != nil {
		t.Error("a refused Sidecar or Telemetry is served")
	}

	// Changed, then deleted: the table follows.
	applyYAML(t, srv, ns, `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default}
spec:
  egress: [{hosts: ["./*"]}, {port: {number: 9090, protocol: HTTP, name: http}, hosts: ["istio-system/*"]}]
`)
	deadline := time.Now().Add(30 * time.Second)
	for e := cs.table.Get(scKey); e == nil || len(e.Object.Sidecar.GetEgress()) != 2; e = cs.table.Get(scKey) {
		if time.Now().After(deadline) {
			t.Fatalf("the changed Sidecar is not in the config table after 30s: %+v", e)
		}
		time.Sleep(20 * time.Millisecond)
	}
	kubectl(t, srv, "delete", "-n", ns, "sidecar", "default")
	kubectl(t, srv, "delete", "-n", ns, "telemetry", "tracing")
	deadline = time.Now().Add(30 * time.Second)
	for cs.table.Get(scKey) != nil || cs.table.Get(tmKey) != nil {
		if time.Now().After(deadline) {
			t.Fatal("a Sidecar or Telemetry deleted in Kubernetes is still in the config table after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestIstioKindNotPermitted: run as a service account whose RBAC grants
// VirtualServices but not WorkloadEntries (a ClusterRole from before
// Sextant read them), the source still syncs and reads the
// VirtualServices, leaving WorkloadEntries out; once the role grants them,
// they are read without a restart.
func TestIstioKindNotPermitted(t *testing.T) {
	srv := apiServerFor(t)
	istioCRDs(t, srv)
	kc := kubernetes.NewForConfigOrDie(srv.cfg)
	const ns = "istio-rbac-old"
	createNamespace(t, kc, ns)
	role := func(resources string) string {
		return `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: sextant-old-istio}
rules:
- apiGroups: [networking.istio.io]
  resources: [` + resources + `]
  verbs: [get, list, watch]
- apiGroups: [networking.istio.io]
  resources: [virtualservices/status, workloadentries/status]
  verbs: [patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: sextant-old-istio}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: sextant-old-istio}
subjects: [{kind: ServiceAccount, name: sextant-old, namespace: ` + ns + `}]
`
	}
	applyYAML(t, srv, ns, role("virtualservices"))
	applyYAML(t, srv, ns, ratingsWE("10.40.0.1", 9080, "us-east")+`---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings}
spec:
  hosts: [ratings]
  http:
  - route: [{destination: {host: ratings}}]
`)
	sa := rest.CopyConfig(srv.cfg)
	sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":sextant-old"}
	if _, err := dynamic.NewForConfigOrDie(sa).Resource(schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "workloadentries"}).
		Namespace(ns).List(context.Background(), metav1.ListOptions{}); err == nil {
		t.Fatal("the service account lists WorkloadEntries without a grant: the API server does not check RBAC, and this test proves nothing")
	}
	cs := startConfigStack(t)
	// runIstio fails the test if the first read never completes.
	runIstioEvery(t, &apiServer{kubeconfig: srv.kubeconfig, cfg: sa}, cs, Options{Namespaces: []string{ns}}, 200*time.Millisecond)
	vsKey := config.Key{Kind: config.KindVirtualService, Namespace: ns, Name: "ratings"}
	weKey := config.Key{Kind: config.KindWorkloadEntry, Namespace: ns, Name: "ratings-vm"}
	if cs.table.Get(vsKey) == nil {
		t.Fatal("the VirtualService is not read when another kind is not permitted")
	}
	if cs.table.Get(weKey) != nil {
		t.Fatal("a WorkloadEntry was read without the permission to list them")
	}
	applyYAML(t, srv, ns, role("virtualservices, workloadentries"))
	deadline := time.Now().Add(30 * time.Second)
	for cs.table.Get(weKey) == nil {
		if time.Now().After(deadline) {
			t.Fatal("WorkloadEntries are not read 30s after the role grants them")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if cs.reg.Instances().Get(config.WorkloadInstanceID(weKey)) == nil {
		t.Error("the WorkloadEntry read late has no instance")
	}
	waitStatus(t, srv, ns, "workloadentry", "ratings-vm", accepted)
}
