package httpapi_test

import (
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/acl"
)

// TestApplyDryRunCallsNeedPushRead: with ACLs on, a token that may write
// a policy but not read every namespace's push state gets the apply's dry
// run without the recorded calls part (not_asked says why); an admin gets
// it.
func TestApplyDryRunCallsNeedPushRead(t *testing.T) {
	w := newWorld(t, acl.Options{})
	w.must("POST", "/v1/config:apply", `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge, namespace: a}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 8080, protocol: HTTP}
    hosts: ["*"]
`, w.admin.Secret, nil)
	policy := `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: only-frontend, namespace: a}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  rules: [{from: [{source: {principals: [cluster.local/ns/web/sa/frontend]}}]}]
`
	type calls struct {
		NotAsked string   `json:"not_asked"`
		Ports    []uint32 `json:"ports"`
		Gateways []any    `json:"gateways"`
	}
	var ans struct {
		Calls *calls `json:"calls"`
	}
	w.must("POST", "/v1/config:apply?dry_run=true", policy, w.writeA.Secret, &ans)
	if ans.Calls == nil || !strings.Contains(ans.Calls.NotAsked, "push:read") || len(ans.Calls.Gateways) != 0 {
		t.Fatalf("a config writer's dry run: %+v", ans.Calls)
	}
	ans.Calls = nil
	w.must("POST", "/v1/config:apply?dry_run=true", policy, w.admin.Secret, &ans)
	if ans.Calls == nil || ans.Calls.NotAsked != "" || len(ans.Calls.Ports) != 1 {
		t.Fatalf("an admin's dry run: %+v", ans.Calls)
	}
}
