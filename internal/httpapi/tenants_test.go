package httpapi_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/acl"
)

// TestChangesNamespaceIsChecked: /v1/changes?namespace=N asks for one
// namespace's changes and is checked like any read of N: a writer of team
// a asking for b's gets 403 naming the permission (not 200 with a feed
// filtered to nothing), and for a's gets only a's changes.
func TestChangesNamespaceIsChecked(t *testing.T) {
	w := newWorld(t, acl.Options{})
	w.fixtures()
	for _, tok := range []tokenAnswer{w.writeA, w.readA} {
		a := w.do("GET", "/v1/changes?namespace=b", "", tok.Secret)
		if a.status != 403 || !strings.Contains(a.body, `instances:read on namespace \"b\"`) {
			t.Fatalf("changes of b for a token of a: %d %s", a.status, a.body)
		}
	}
	a := w.do("GET", "/v1/changes?namespace=B!", "", w.admin.Secret)
	if a.status != 400 || !strings.Contains(a.body, `"namespace"`) {
		t.Fatalf("a malformed namespace: %d %s", a.status, a.body)
	}
	var feed struct {
		Changes []struct {
			Instance *struct{ Namespace string }
		}
	}
	for _, tok := range []string{w.writeA.Secret, w.admin.Secret} {
		w.must("GET", "/v1/changes?namespace=a&limit=10000", "", tok, &feed)
		if len(feed.Changes) == 0 {
			t.Fatal("no change of a")
		}
		for _, ch := range feed.Changes {
			if ch.Instance != nil && ch.Instance.Namespace != "a" {
				t.Fatalf("changes of a carry namespace %s", ch.Instance.Namespace)
			}
		}
	}
	w.must("GET", "/v1/changes?namespace=b&limit=10000", "", w.otherB.Secret, &feed)
	if len(feed.Changes) == 0 || feed.Changes[0].Instance == nil || feed.Changes[0].Instance.Namespace != "b" {
		t.Fatalf("changes of b for b's writer: %+v", feed.Changes)
	}
}

func gatewayIn(ns, name string, port int, host string) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: %s, namespace: %s}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: %d, name: https, protocol: HTTPS}
    hosts: [%q]
    tls: {mode: SIMPLE, credentialName: cert}
`, name, ns, port, host)
}

// TestGatewayClaimAcrossTenants: team b's writer applies a Gateway for
// shop.example.com on 8443; team a's writer applying one for the same port
// and host (as "a/shop.example.com" too), dry run or not, gets 409
// conflict naming b's Gateway, the port and the host, and nothing is
// stored; another host on the port is fine.
func TestGatewayClaimAcrossTenants(t *testing.T) {
	w := newWorld(t, acl.Options{})
	w.must("POST", "/v1/config:apply", gatewayIn("b", "shop", 8443, "shop.example.com"), w.otherB.Secret, nil)
	for _, q := range []string{"?dry_run=true", ""} {
		for _, host := range []string{"shop.example.com", "a/shop.example.com", "*/shop.example.com"} {
			a := w.do("POST", "/v1/config:apply"+q, gatewayIn("a", "shop", 8443, host), w.writeA.Secret)
			var ans struct {
				Error struct{ Code, Message, Field string }
			}
			json.Unmarshal([]byte(a.body), &ans)
			e := ans.Error
			if a.status != 409 || e.Code != "conflict" || e.Field != "spec.servers[0].hosts[0]" ||
				!strings.Contains(e.Message, `port 8443 host "shop.example.com" is already served by Gateway b/shop`) {
				t.Fatalf("apply%s of a's Gateway for %s: %d %s", q, host, a.status, a.body)
			}
		}
	}
	if a := w.do("GET", "/v1/config/gateway/a/shop", "", w.admin.Secret); a.status != 404 {
		t.Fatalf("the refused Gateway: %d %s", a.status, a.body)
	}
	w.must("POST", "/v1/config:apply", gatewayIn("a", "shop", 8443, "a.example.com"), w.writeA.Secret, nil)
}
