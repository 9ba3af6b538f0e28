package kube

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/registry"
)

func runMirror(t *testing.T, srv *apiServer, reg MirrorRegistry, opts Options) *Mirror {
	t.Helper()
	m, err := NewMirror(srv.cfg, reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("mirror: %v", err)
		}
	})
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	if err := m.WaitSynced(wctx); err != nil {
		t.Fatalf("mirror's first pass: %v", err)
	}
	return m
}

// kubectlUntil runs kubectl until ok holds of its output (30 s at most).
func kubectlUntil(t *testing.T, srv *apiServer, what string, ok func(out string, err error) bool, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := kubectlOut(srv, args...)
		if ok(string(out), err) {
			return string(out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 30s; kubectl %s: %v\n%s", what, strings.Join(args, " "), err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMirrorToKubernetes: instances registered through Sextant's API (VMs)
// appear in the cluster as a selector-less ClusterIP Service with an
// EndpointSlice (kubectl get endpointslices lists their addresses), follow
// the registry (a deregistered instance leaves the slice, the last one
// takes the Service; a slice deleted by hand is written again), and never
// come back into the registry through the
// sync; a service of Kubernetes' own, or a Service of that name Sextant did
// not write, is left alone.
func TestMirrorToKubernetes(t *testing.T) {
	srv := apiServerFor(t)
	kc := kubernetes.NewForConfigOrDie(srv.cfg)
	ctx := context.Background()
	const ns = "vms"
	createNamespace(t, kc, ns)
	// A Service of the user's, named as a registry service.
	if _, err := kc.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "legacy"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "web", Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A Kubernetes service: its instances come from the sync.
	if _, err := kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice(ns, "cart-abc", "cart", endpoint("10.1.0.1", "", true, true, false)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	reg := openRegistry(t)
	runSyncer(t, srv.cfg, reg, Options{Namespaces: []string{ns}})
	waitFor(t, reg, naming.ServiceKey{Namespace: ns, Name: "cart"}, "cart from Kubernetes", func(g *registry.Service) bool { return g.Len() == 1 })
	runMirror(t, srv, reg, Options{Namespaces: []string{ns}})

	vm := func(id, host string) *instance.Instance {
		return &instance.Instance{ID: id, Namespace: ns, Service: "billing", Host: host, Port: 9090, Protocol: "http"}
	}
	if _, err := reg.Register(ctx, []*instance.Instance{vm("billing-1", "10.20.0.1"), vm("billing-2", "10.20.0.2"),
		{ID: "legacy-1", Namespace: ns, Service: "legacy", Host: "10.20.0.3", Port: 80}}); err != nil {
		t.Fatal(err)
	}
	out := kubectlUntil(t, srv, "billing's EndpointSlice", func(out string, err error) bool {
		return err == nil && strings.Contains(out, "billing-sextant-9090") && strings.Contains(out, "10.20.0.1,10.20.0.2")
	}, "get", "endpointslices", "-n", ns)
	t.Logf("kubectl get endpointslices -n %s:\n%s", ns, out)

	var svc corev1.Service
	if err := json.Unmarshal([]byte(kubectl(t, srv, "get", "service", "billing", "-n", ns, "-o", "json")), &svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == "None" || len(svc.Spec.Selector) != 0 ||
		len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 9090 {
		t.Errorf("billing's Service is not a selector-less ClusterIP Service of port 9090: %+v", svc.Spec)
	}

	// Never back into the registry: billing keeps its two API instances
	// once the sync has seen the mirrored slice (a later slice synced
	// means the earlier events were handled).
	if _, err := kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice(ns, "marker", "marker", endpoint("10.1.0.9", "", true, true, false)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, reg, naming.ServiceKey{Namespace: ns, Name: "marker"}, "marker from Kubernetes", func(g *registry.Service) bool { return g.Len() == 1 })
	g := reg.Instances().Lookup(naming.ServiceKey{Namespace: ns, Name: "billing"})
	if g == nil || g.Len() != 2 {
		t.Fatalf("billing in the registry: %v instances, want its 2", g)
	}
	for _, in := range g.Items() {
		if o, _ := in.Metadata.Get(instance.OwnerLabel); o != "" {
			t.Errorf("the mirrored slice came back as instance %s owned by %s", in.ID, o)
		}
	}

	// The user's Service and Kubernetes' own service are left alone.
	legacy, err := kc.CoreV1().Services(ns).Get(ctx, "legacy", metav1.GetOptions{})
	if err != nil || legacy.Labels[managedByService] != "" || legacy.Spec.Ports[0].Name != "web" {
		t.Errorf("the user's Service legacy was touched: %+v %v", legacy, err)
	}
	if _, err := kc.CoreV1().Services(ns).Get(ctx, "cart", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a Service was written for Kubernetes' own service cart: %v", err)
	}

	// A second mirror over the unchanged registry (a restart) writes
	// nothing: what it wrote is read from its watches. (Its one attempt
	// to create legacy's Service, refused as it exists, is no write.)
	var writes atomic.Int64
	counted := rest.CopyConfig(srv.cfg)
	counted.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if r.Method != http.MethodGet && err == nil && resp.StatusCode < 300 {
				writes.Add(1)
				t.Logf("the restarted mirror wrote: %s %s", r.Method, r.URL.Path)
			}
			return resp, err
		})
	}
	second, err := NewMirror(counted, reg, Options{Namespaces: []string{ns}})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 2*time.Minute)
	sdone := make(chan error, 1)
	go func() { sdone <- second.Run(sctx) }()
	if err := second.WaitSynced(sctx); err != nil {
		t.Fatalf("the second mirror's first pass: %v", err)
	}
	scancel()
	if err := <-sdone; err != nil {
		t.Fatalf("the second mirror: %v", err)
	}
	if n := writes.Load(); n != 0 {
		t.Errorf("a restarted mirror over an unchanged registry made %d writes", n)
	}

	// The registry is the truth: a mirrored slice deleted by hand comes back.
	kubectl(t, srv, "delete", "endpointslice", "billing-sextant-9090", "-n", ns)
	kubectlUntil(t, srv, "billing's slice written again", func(out string, err error) bool {
		return err == nil && strings.Contains(out, "10.20.0.1,10.20.0.2")
	}, "get", "endpointslices", "-n", ns)

	// Follows the registry: one goes, then the other with the Service.
	if _, _, err := reg.Deregister(ctx, []string{"billing-1"}); err != nil {
		t.Fatal(err)
	}
	kubectlUntil(t, srv, "billing-1 out of the slice", func(out string, err error) bool {
		return err == nil && strings.Contains(out, "billing-sextant-9090") && !strings.Contains(out, "10.20.0.1")
	}, "get", "endpointslices", "-n", ns)
	if _, _, err := reg.Deregister(ctx, []string{"billing-2"}); err != nil {
		t.Fatal(err)
	}
	kubectlUntil(t, srv, "billing's Service gone", func(out string, err error) bool {
		return err != nil && strings.Contains(out, "NotFound")
	}, "get", "service", "billing", "-n", ns)
	kubectlUntil(t, srv, "billing's slice gone", func(out string, err error) bool {
		return err == nil && !strings.Contains(out, "billing")
	}, "get", "endpointslices", "-n", ns)
}
