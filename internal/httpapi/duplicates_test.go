package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/acl"
)

// TestDuplicateKeysRefused: a body that gives a key twice in one object is
// a 400 naming the key and its line on every write of the API, and writes
// nothing; before, the last one won (a second metadata: named another
// object, {"service":"a","service":"b"} registered b).
func TestDuplicateKeysRefused(t *testing.T) {
	w := newWorld(t, acl.Options{})
	tok := w.admin.Secret
	// An existing VirtualService the duplicated document would shadow.
	w.must("POST", "/v1/config:apply", vsIn("default", "orders", "orders"), tok, nil)
	vsTwice := "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: orders}\nspec:\n  hosts: [orders]\n  http:\n  - route: [{destination: {host: elsewhere}}]\nmetadata: {name: other}\n"
	for _, tc := range []struct {
		name, method, path, body string
		want                     []string
	}{
		{"instance member", "POST", "/v1/instances", `{"service":"a","host":"h","port":1,` + "\n" + `"service":"b"}`, []string{`key \"service\" given twice (line 2)`}},
		{"metadata key", "POST", "/v1/instances", `{"service":"a","host":"h","port":1,"metadata":{"env":"prod","env":"dev"}}`, []string{`key \"env\" given twice (line 1)`, `"field":"metadata.env"`}},
		{"config metadata twice", "POST", "/v1/config:apply", vsTwice, []string{`key \"metadata\" already set in map`, "line 8"}},
		{"config JSON", "POST", "/v1/config:apply", `{"apiVersion":"networking.istio.io/v1","kind":"VirtualService","metadata":{"name":"x","name":"y"},"spec":{"hosts":["x"]}}`, []string{`key \"name\" already set in map`}},
		{"policy", "POST", "/v1/acl/policies", `{"name":"p1","rules":[{"namespace":"a","instances":"read","instances":"write"}]}`, []string{`key \"instances\" given twice (line 1)`}},
		{"policy by name", "PUT", "/v1/acl/policies/p2", `{"admin":true,"admin":false}`, []string{`key \"admin\" given twice`}},
		{"token", "POST", "/v1/acl/tokens", `{"description":"a","description":"b","policies":[]}`, []string{`key \"description\" given twice`}},
		{"secret", "POST", "/v1/secrets", `{"name":"s","name":"t","type":"tls"}`, []string{`key \"name\" given twice`}},
		{"node", "PUT", "/v1/nodes/n1", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1","labels":{"zone":"a","zone":"b"}}}`, []string{"duplicate field", `key \"zone\" given twice (line 1)`}},
	} {
		a := w.do(tc.method, tc.path, tc.body, tok)
		if a.status != 400 {
			t.Errorf("%s: %d %s, want 400", tc.name, a.status, a.body)
			continue
		}
		for _, s := range tc.want {
			if !strings.Contains(a.body, s) {
				t.Errorf("%s: %s, want it to contain %s", tc.name, a.body, s)
			}
		}
	}
	// Nothing was written: no instance, the VirtualService unchanged.
	var list struct {
		Instances []json.RawMessage `json:"instances"`
	}
	w.must("GET", "/v1/namespaces/default/services/a/instances", "", tok, &list)
	w.must("GET", "/v1/namespaces/default/services/b/instances", "", tok, &list)
	if len(list.Instances) != 0 {
		t.Errorf("instances written: %s", list.Instances)
	}
	a := w.do("GET", "/v1/config/vs/default/orders", "", tok)
	if a.status != 200 || strings.Contains(a.body, "elsewhere") {
		t.Errorf("the VirtualService after the refused apply: %d %s", a.status, a.body)
	}
	if a := w.do("GET", "/v1/config/vs/default/other", "", tok); a.status != 404 {
		t.Errorf("the shadowing VirtualService: %d %s, want 404", a.status, a.body)
	}
}
