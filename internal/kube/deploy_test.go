package kube

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sextant-mesh/sextant/internal/instance"
)

// TestDeployManifests: deploy/kubernetes/ (the server as a StatefulSet on
// the embedded store, the gateway, the RBAC, the Services) and
// deploy/kubernetes/mysql/ (the server as a Deployment over MySQL) pass
// `kubectl apply --dry-run=server` against a real kube-apiserver: its
// schemas, defaulting and admission. Then the RBAC is applied for real,
// and the sync and the Istio source, run as the manifests' service
// account, read the cluster and write the statuses of Istio objects of the
// kinds read with it; a service account without it is refused.
func TestDeployManifests(t *testing.T) {
	srv := apiServerFor(t)
	istioCRDs(t, srv) // the RBAC names Istio's resources
	kc := kubernetes.NewForConfigOrDie(srv.cfg)
	createNamespace(t, kc, "sextant")
	dir := filepath.Join("..", "..", "deploy", "kubernetes")
	out := kubectl(t, srv, "apply", "--dry-run=server", "-f", dir)
	for _, want := range []string{"statefulset.apps/sextant", "deployment.apps/sextant-gateway", "service/sextant-gateway",
		"service/sextant ", "clusterrole.rbac.authorization.k8s.io/sextant", "serviceaccount/sextant"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run of %s does not list %s:\n%s", dir, want, out)
		}
	}
	out = kubectl(t, srv, "apply", "--dry-run=server", "-f", filepath.Join(dir, "mysql"))
	if !strings.Contains(out, "deployment.apps/sextant created (server dry run)") {
		t.Errorf("dry run of mysql/:\n%s", out)
	}

	// The RBAC, for real: the watches work as the service account.
	kubectl(t, srv, "apply", "-f", filepath.Join(dir, "rbac.yaml"))
	const ns = "deploy-rbac"
	createNamespace(t, kc, ns)
	kubectl(t, srv, "apply", "-n", ns, "-f", filepath.Join(istioDir, "samples", "bookinfo", "networking", "destination-rule-reviews.yaml"))
	// A kind the RBAC left out would be skipped, not fail the first read:
	// each kind read since (networking's, telemetry's group) proves its
	// grant by its status, written as the service account.
	applyYAML(t, srv, ns, ratingsWE("10.30.0.9", 9080, "us-east")+`---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default}
spec:
  egress: [{hosts: ["./*"]}]
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: tracing}
spec:
  tracing: [{providers: [{name: otel-tracing}], randomSamplingPercentage: 10}]
`)
	as := func(user string) *rest.Config {
		c := rest.CopyConfig(srv.cfg)
		c.Impersonate = rest.ImpersonationConfig{UserName: user}
		return c
	}
	// Without the binding, refused: the test server authorizes with RBAC.
	stranger := kubernetes.NewForConfigOrDie(as("system:serviceaccount:sextant:stranger"))
	if _, err := stranger.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{}); err == nil {
		t.Fatal("an unbound service account lists EndpointSlices: the API server does not check RBAC, and this test proves nothing")
	}
	sa := as("system:serviceaccount:sextant:sextant")
	cs := startConfigStack(t)
	srvAs := &apiServer{kubeconfig: srv.kubeconfig, cfg: sa}
	runSyncer(t, sa, cs.reg, Options{Namespaces: []string{ns}})
	runIstio(t, srvAs, cs, Options{Namespaces: []string{ns}})
	// Served (with a warning: reviews has no instances here), the status
	// written as the service account.
	waitStatus(t, srv, ns, "destinationrule", "reviews", func(gen int64, st istioStatus) bool {
		return st.ObservedGeneration == gen && len(st.Conditions) == 1 && st.Conditions[0].Status == "True"
	})
	for _, kind := range []string{"workloadentry/ratings-vm", "sidecar/default", "telemetry/tracing"} {
		k, name, _ := strings.Cut(kind, "/")
		waitStatus(t, srv, ns, k, name, accepted)
	}
	// And the mirror, with the second ClusterRole.
	runMirror(t, srvAs, cs.reg, Options{Namespaces: []string{ns}})
	if _, err := cs.reg.Register(context.Background(), []*instance.Instance{{ID: "vm-1", Namespace: ns, Service: "ledger", Host: "10.30.0.1", Port: 7000}}); err != nil {
		t.Fatal(err)
	}
	kubectlUntil(t, srv, "ledger's EndpointSlice, written as the service account", func(out string, err error) bool {
		return err == nil && strings.Contains(out, "10.30.0.1")
	}, "get", "endpointslices", "-n", ns)
}
