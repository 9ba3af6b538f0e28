package httpapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/store"
)

func newConfigServer(t *testing.T) *testServer {
	t.Helper()
	cfg := config.NewTable()
	s := newTestServer(t, registry.Options{Engine: commit.Options{Tables: map[store.Kind]catalog.Table{store.Config: cfg}}})
	cfg.Attach(s.reg.Catalog())
	return s
}

const testDR = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  subsets: [{name: v1, labels: {version: v1}}]
`

const testVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders}
spec:
  hosts: [orders]
  http:
  - route: [{destination: {host: orders, subset: v1}}]
`

type applyOut struct {
	Revision int64 `json:"revision"`
	DryRun   bool  `json:"dry_run"`
	Results  []struct {
		Kind, Namespace, Name, Action string
		Revision                      int64
		Warnings                      []string
	} `json:"results"`
	Resources []struct{ Type, Name string } `json:"resources"`
}

type listOut struct {
	Revision int64 `json:"revision"`
	Items    []struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name, Namespace, ResourceVersion string
		} `json:"metadata"`
	} `json:"items"`
}

func TestConfigApplyGetListDelete(t *testing.T) {
	s := newConfigServer(t)
	var dry applyOut
	s.must("POST", "/v1/config:apply?dry_run=true", testDR+"---\n"+testVS, &dry)
	if !dry.DryRun || len(dry.Results) != 2 || dry.Results[0].Action != "created" || len(dry.Resources) == 0 {
		t.Fatalf("dry run: %+v", dry)
	}
	for _, w := range dry.Results[1].Warnings {
		if strings.Contains(w, "subset") {
			t.Fatalf("the VS names a subset its DR in the same apply defines: warning %q", w)
		}
	}
	var l listOut
	if s.must("GET", "/v1/config", "", &l); len(l.Items) != 0 {
		t.Fatalf("a dry run wrote %d objects", len(l.Items))
	}
	var a applyOut
	s.must("POST", "/v1/config:apply", testDR+"---\n"+testVS, &a)
	if a.Revision != 1 || a.Results[0].Action != "created" || a.Results[1].Revision != 1 {
		t.Fatalf("apply: %+v", a)
	}
	// Idempotent: the same documents change nothing, take no revision.
	s.must("POST", "/v1/config:apply", testVS+"---\n"+testDR, &a)
	if a.Revision != 1 || a.Results[0].Action != "unchanged" || a.Results[1].Action != "unchanged" || len(a.Resources) != 0 {
		t.Fatalf("second apply: %+v", a)
	}
	r := s.must("GET", "/v1/config/vs/default/orders", "", nil)
	if r.header.Get("X-Sextant-Revision") != "1" || !strings.Contains(string(r.body), `"resourceVersion":"1"`) {
		t.Fatalf("get: %s %v", r.body, r.header)
	}
	// A listing's object applies back unchanged (resourceVersion ignored).
	s.must("POST", "/v1/config:apply", string(r.body), &a)
	if a.Results[0].Action != "unchanged" {
		t.Fatalf("re-applying a read object: %+v", a)
	}
	s.must("GET", "/v1/config?kind=DestinationRule", "", &l)
	if len(l.Items) != 1 || l.Items[0].Kind != "DestinationRule" || l.Revision != 1 {
		t.Fatalf("list: %+v", l)
	}
	// Preconditions: a stale revision is a conflict.
	s.expectError(s.do("DELETE", "/v1/config/dr/default/orders?revision=7", ""), http.StatusConflict, "conflict", "revision")
	s.must("DELETE", "/v1/config/dr/default/orders?revision=1", "", nil)
	s.expectError(s.do("DELETE", "/v1/config/dr/default/orders", ""), http.StatusNotFound, "not_found", "")
	s.expectError(s.do("GET", "/v1/config/dr/default/orders", ""), http.StatusNotFound, "not_found", "")
	// PUT creates one object, only the one its path names.
	s.must("PUT", "/v1/config/DestinationRule/default/orders?revision=0", testDR, &a)
	if a.Results[0].Action != "created" {
		t.Fatalf("put: %+v", a)
	}
	s.expectError(s.do("PUT", "/v1/config/vs/default/other", testVS), http.StatusBadRequest, "invalid_argument", "metadata.name")
	s.expectError(s.do("PUT", "/v1/config/DestinationRule/default/orders?revision=0", testDR), http.StatusConflict, "conflict", "revision")
}

// TestConfigWarnsOfUnregisteredHosts: a host naming a service without
// instances (a typo, or not registered yet) is accepted with a warning
// naming the field, by the dry run and the apply alike, and the warning goes
// once the service has instances.
func TestConfigWarnsOfUnregisteredHosts(t *testing.T) {
	s := newConfigServer(t)
	typo := strings.Replace(testVS, "hosts: [orders]", "hosts: [ordrs.default]", 1)
	warnings := func(path, body string) []string {
		t.Helper()
		var a applyOut
		s.must("POST", path, body, &a)
		var out []string
		for _, r := range a.Results {
			out = append(out, r.Warnings...)
		}
		return out
	}
	want := func(got []string, substrs ...string) {
		t.Helper()
		if len(got) != len(substrs) {
			t.Fatalf("warnings %q, want %d", got, len(substrs))
		}
		for i, sub := range substrs {
			if !strings.Contains(got[i], sub) {
				t.Fatalf("warning %q, want it to contain %q", got[i], sub)
			}
		}
	}
	want(warnings("/v1/config:apply?dry_run=true", testDR+"---\n"+typo),
		`spec.host: "orders" names service default/orders, which has no registered instances`,
		`spec.hosts[0]: "ordrs.default" names service default/ordrs, which has no registered instances`,
		`spec.http[0].route[0].destination.host: "orders" names service default/orders`)
	// Version v1: its DestinationRule's subset v1 matches it (a subset
	// nothing matches is warned about too: TestConfigWarnsEmptySubset).
	s.must("POST", "/v1/instances", `{"id":"o1","service":"orders","host":"10.0.0.1","port":80,"version":"v1"}`, nil)
	want(warnings("/v1/config:apply?dry_run=true", testDR+"---\n"+typo), `spec.hosts[0]: "ordrs.default" names service default/ordrs`)
	want(warnings("/v1/config:apply", testDR+"---\n"+typo), `spec.hosts[0]: "ordrs.default" names service default/ordrs`)
	want(warnings("/v1/config:apply", testVS))
	// Emptied, the service warns again.
	s.must("POST", "/v1/instances:deregister", `{"ids":["o1"]}`, nil)
	var a applyOut
	s.must("PUT", "/v1/config/vs/default/orders", strings.Replace(testVS, "hosts: [orders]", "hosts: [orders.default]", 1), &a)
	want(a.Results[0].Warnings, `spec.hosts[0]: "orders.default" names service default/orders`, "destination.host")
}

func TestConfigBadInput(t *testing.T) {
	s := newConfigServer(t)
	for name, tc := range map[string]struct {
		path, body, field string
	}{
		"unsupported field": {"/v1/config:apply", strings.Replace(testVS, "  - route:", "  - match: [{statPrefix: x}]\n    route:", 1), "spec.http[0].match[0].statPrefix"},
		"typo":              {"/v1/config:apply", strings.Replace(testDR, "subsets:", "subset:", 1), "spec.subset"},
		"second document":   {"/v1/config:apply", testDR + "---\n" + strings.Replace(testVS, "hosts:", "hostz:", 1), "documents[1].spec.hostz"},
		"empty":             {"/v1/config:apply", "", ""},
		"bad kind":          {"/v1/config/pods/default/x", "", "kind"},
	} {
		t.Run(name, func(t *testing.T) {
			method := "POST"
			if strings.HasPrefix(tc.path, "/v1/config/") {
				method = "GET"
			}
			s.expectError(s.do(method, tc.path, tc.body), http.StatusBadRequest, "invalid_argument", tc.field)
		})
	}
	var l listOut
	if s.must("GET", "/v1/config", "", &l); len(l.Items) != 0 {
		t.Fatalf("a rejected apply wrote %d objects", len(l.Items))
	}
}

// TestConfigBlockingList: a list with index waits for the next config
// change, and an instance change does not wake it.
func TestConfigBlockingList(t *testing.T) {
	s := newConfigServer(t)
	got := make(chan listOut, 1)
	go func() {
		var l listOut
		r := s.do("GET", "/v1/config?index=0&wait=10s", "")
		r.decode(t, &l)
		got <- l
	}()
	waitUntil(t, func() bool { return s.reg.Catalog().Waiters() == 1 })
	s.must("POST", "/v1/instances", inst("orders", "10.0.0.1", 80, nil), nil)
	select {
	case l := <-got:
		t.Fatalf("an instance change woke a config list: %+v", l)
	case <-time.After(30 * time.Millisecond):
	}
	s.must("POST", "/v1/config:apply", testDR, nil)
	if l := <-got; len(l.Items) != 1 || l.Revision != 2 {
		t.Fatalf("woke with %+v", l)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestConfigWarnsEmptySubset: an apply (dry or not) warns about each
// DestinationRule subset that matches no registered instance; a subset
// selecting "version" matches the instances registered with that version.
func TestConfigWarnsEmptySubset(t *testing.T) {
	s := newConfigServer(t)
	s.must("POST", "/v1/instances", `{"service":"orders","host":"10.0.0.1","port":80,"version":"v2","metadata":{"zone":"z1"}}`, nil)
	dr := strings.Replace(testDR, "subsets: [{name: v1, labels: {version: v1}}]",
		"subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}, {name: typo, labels: {verison: v2}}, {name: v2-z1, labels: {version: v2, zone: z1}}]", 1)
	for _, path := range []string{"/v1/config:apply?dry_run=true", "/v1/config:apply"} {
		var a applyOut
		s.must("POST", path, dr, &a)
		w := a.Results[0].Warnings
		if len(w) != 2 || !strings.HasPrefix(w[0], `spec.subsets[0]: subset "v1" (labels version=v1) matches no registered instance of default/orders`) ||
			!strings.HasPrefix(w[1], `spec.subsets[2]: subset "typo" (labels verison=v2) matches no registered instance`) {
			t.Fatalf("%s: warnings %q", path, w)
		}
	}
}

// TestConfigTelemetry: a Telemetry applies, lists by its kind's names, and
// its dry run names the listeners it may change: the proxies' for the
// mesh's, a Gateway's port for one selecting that Gateway.
func TestConfigTelemetry(t *testing.T) {
	s := newConfigServer(t)
	const gw = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 8080, name: http, protocol: HTTP}, hosts: ["*"]}]
`
	var a applyOut
	s.must("POST", "/v1/config:apply", gw, &a)
	for _, c := range []struct{ yaml, want string }{
		{"apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: mesh, namespace: istio-system}\nspec: {accessLogging: [{}]}\n", "Listener sextant-gateway-8080,Listener sextant-http"},
		{"apiVersion: telemetry.istio.io/v1alpha1\nkind: Telemetry\nmetadata: {name: edge}\nspec: {selector: {matchLabels: {istio: ingressgateway}}, tracing: [{randomSamplingPercentage: 5}]}\n", "Listener sextant-gateway-8080"},
		{"apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: other}\nspec: {selector: {matchLabels: {app: x}}, accessLogging: [{}]}\n", ""},
	} {
		var dry applyOut
		s.must("POST", "/v1/config:apply?dry_run=true", c.yaml, &dry)
		var got []string
		for _, r := range dry.Resources {
			got = append(got, r.Type+" "+r.Name)
		}
		if strings.Join(got, ",") != c.want {
			t.Errorf("dry run of %s: %v, want %s", c.yaml, got, c.want)
		}
		s.must("POST", "/v1/config:apply", c.yaml, &a)
	}
	var l listOut
	if s.must("GET", "/v1/config?kind=Telemetry", "", &l); len(l.Items) != 3 {
		t.Fatalf("list: %+v", l)
	}
	s.must("GET", "/v1/config/telemetry/istio-system/mesh", "", nil)
}
