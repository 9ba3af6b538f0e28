package httpapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/store"
)

const dryRunGateway = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge, namespace: edge}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 8443, protocol: HTTPS}
    hosts: ["*"]
    tls: {mode: ISTIO_MUTUAL}
  - port: {number: 8080, protocol: HTTP}
    hosts: ["*"]
`

const dryRunPolicy = `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: only-frontend, namespace: edge}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  rules: [{from: [{source: {principals: [cluster.local/ns/web/sa/frontend]}}]}]
`

// TestApplyDryRunAsksGateways: a dry run of an AuthorizationPolicy sends
// every registered gateway the RBAC filters each Gateway port would have
// after the apply, and answers what each said or why it could not be
// asked; an apply without security objects asks none, and bad input is
// still a 400 naming the field before any gateway is asked.
func TestApplyDryRunAsksGateways(t *testing.T) {
	s := newConfigServer(t)
	var mu sync.Mutex
	var sent []map[string]any
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/v1/rbac:dry-run" {
			http.NotFound(w, r)
			return
		}
		var body map[string]any
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &body); err != nil {
			t.Errorf("gateway got %s: %v", b, err)
		}
		mu.Lock()
		sent = append(sent, body)
		mu.Unlock()
		fmt.Fprint(w, `{"scanned":5,"newly_denied":2,"denied":[{"principal":"spiffe://cluster.local/ns/web/sa/batch","count":2}]}`)
	}))
	defer fake.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(fake.URL, "http://"))
	// Registered as cmd/sextant's gateway registers: an unspecified admin
	// host is the instance's.
	s.must("POST", "/v1/instances", fmt.Sprintf(`{"instances":[
		{"id":"gw-1","namespace":"edge","service":"sextant-gateway","host":"127.0.0.1","port":8443,"metadata":{"sextant.role":"gateway","sextant.admin":"0.0.0.0:%s"}},
		{"id":"gw-2","namespace":"edge","service":"sextant-gateway","host":"127.0.0.1","port":8444,"metadata":{"sextant.role":"gateway"}},
		{"id":"web-1","namespace":"web","service":"web","host":"127.0.0.1","port":80,"metadata":{"sextant.admin":"127.0.0.1:1"}}]}`, port), nil)
	s.must("POST", "/v1/config:apply", dryRunGateway, nil)

	var ans struct {
		Calls *callsDryRun `json:"calls"`
	}
	s.must("POST", "/v1/config:apply?dry_run=true", dryRunPolicy, &ans)
	c := ans.Calls
	if c == nil || c.Note != DryRunCallsNote || fmt.Sprint(c.Ports) != "[8080 8443]" || len(c.Gateways) != 2 {
		t.Fatalf("calls: %+v", c)
	}
	g1, g2 := c.Gateways[0], c.Gateways[1]
	if g1.ID != "gw-1" || g1.Error != "" || g1.Admin != "http://127.0.0.1:"+port || !strings.Contains(string(g1.Result), `"newly_denied":2`) {
		t.Errorf("gateway 1: %+v", g1)
	}
	if g2.ID != "gw-2" || !strings.Contains(g2.Error, "no admin address") {
		t.Errorf("gateway 2: %+v", g2)
	}
	mu.Lock()
	if len(sent) != 1 {
		t.Fatalf("the gateway was asked %d times", len(sent))
	}
	ls, _ := json.Marshal(sent[0]["listeners"])
	mu.Unlock()
	// Both ports get the policy's ALLOW filter (the Gateway's workloads are
	// selected on every port), with the principal as a SPIFFE ID.
	for _, want := range []string{`"port":8080`, `"port":8443`, `"sextant.rbac.allow"`, `spiffe://cluster.local/ns/web/sa/frontend`} {
		if !strings.Contains(string(ls), want) {
			t.Errorf("the candidate sent lacks %s: %s", want, ls)
		}
	}

	// No security object, no gateway asked; nothing stored by the dry run.
	ans.Calls = nil
	s.must("POST", "/v1/config:apply?dry_run=true", testDR, &ans)
	if ans.Calls != nil {
		t.Errorf("a DestinationRule's dry run asked the gateways: %+v", ans.Calls)
	}
	var l listOut
	if s.must("GET", "/v1/config?kind=AuthorizationPolicy", "", &l); len(l.Items) != 0 {
		t.Errorf("the dry run stored %d policies", len(l.Items))
	}

	// Bad input is refused, naming the field, before any gateway is asked.
	r := s.do("POST", "/v1/config:apply?dry_run=true", strings.Replace(dryRunPolicy, "principals:", "principalz:", 1))
	s.expectError(r, http.StatusBadRequest, "invalid_argument", "spec.rules[0].from[0].source.principalz")
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 1 {
		t.Errorf("the gateway was asked %d times", len(sent))
	}
}

// TestDryRunCandidateRootNamespace: the candidate filters take the mesh's
// root namespace the server was given (--mesh-root-namespace): a policy
// there without a selector reaches every Gateway port.
func TestDryRunCandidateRootNamespace(t *testing.T) {
	cfg := config.NewTable()
	cfg.SetRootNamespace("mesh-root")
	s := newTestServer(t, registry.Options{Engine: commit.Options{Tables: map[store.Kind]catalog.Table{store.Config: cfg}}})
	cfg.Attach(s.reg.Catalog())
	s.must("POST", "/v1/config:apply", dryRunGateway, nil)
	objs, err := config.Decode([]byte(`apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-admin, namespace: mesh-root}
spec:
  action: DENY
  rules: [{to: [{operation: {paths: ["/admin"]}}]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	body, ports, err := candidateRBAC(cfg, objs)
	if err != nil || len(ports) != 2 || strings.Count(string(body), `"sextant.rbac.deny"`) != 2 {
		t.Fatalf("candidate %s %v %v", body, ports, err)
	}
}
