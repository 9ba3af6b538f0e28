package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/secret/secrettest"

	"github.com/sextant-mesh/sextant/internal/acl"
)

func secretBody(t *testing.T, ns, name string, mismatch bool) string {
	t.Helper()
	cert, key := secrettest.Pair(t, time.Now().Add(time.Hour), "a.test")
	if mismatch {
		_, key = secrettest.Pair(t, time.Now().Add(time.Hour), "a.test")
	}
	b, _ := json.Marshal(map[string]string{"namespace": ns, "name": name, "type": "tls", "cert": string(cert), "key": string(key)})
	return string(b)
}

// TestSecretPermissions: secrets are their own ACL resource (secret), not
// granted by config or instances write nor by a "*" rule; every write is
// audited; bad input is a 400 naming the field.
func TestSecretPermissions(t *testing.T) {
	w := newWorld(t, acl.Options{})
	w.must("POST", "/v1/acl/policies", `{"name":"a-secret","rules":[{"namespace":"a","secret":"write"}]}`, w.admin.Secret, nil)
	w.must("POST", "/v1/acl/policies", `{"name":"star","rules":[{"namespace":"*","instances":"write","config":"write","placements":"write","push":"write"}]}`, w.admin.Secret, nil)
	secretA, star := w.token("a-secret"), w.token("star")
	body := secretBody(t, "a", "cert", false)
	for _, c := range []struct {
		who    string
		token  string
		method string
		path   string
		body   string
		want   int
	}{
		{"config writer", w.writeA.Secret, "POST", "/v1/secrets", body, 403},
		{"every other resource", star.Secret, "POST", "/v1/secrets", body, 403},
		{"secret writer", secretA.Secret, "POST", "/v1/secrets", body, 200},
		{"secret writer, again", secretA.Secret, "POST", "/v1/secrets", body, 409},
		{"secret writer, replace", secretA.Secret, "POST", "/v1/secrets?replace=true", body, 200},
		{"secret writer, other namespace", secretA.Secret, "POST", "/v1/secrets", secretBody(t, "b", "cert", false), 403},
		{"mismatched key", secretA.Secret, "POST", "/v1/secrets", secretBody(t, "a", "bad", true), 400},
		{"unknown field", secretA.Secret, "POST", "/v1/secrets", `{"name":"x","namespace":"a","crt":"x"}`, 400},
		{"reader of config", w.readA.Secret, "GET", "/v1/secrets/a/cert", "", 403},
		{"secret writer reads", secretA.Secret, "GET", "/v1/secrets/a/cert", "", 200},
		{"list", secretA.Secret, "GET", "/v1/secrets", "", 200},
		{"anonymous", "", "GET", "/v1/secrets", "", 401},
		{"config writer deletes", w.writeA.Secret, "DELETE", "/v1/secrets/a/cert", "", 403},
		{"secret writer deletes", secretA.Secret, "DELETE", "/v1/secrets/a/cert", "", 200},
		{"deleted", secretA.Secret, "GET", "/v1/secrets/a/cert", "", 404},
	} {
		a := w.do(c.method, c.path, c.body, c.token)
		if a.status != c.want {
			t.Errorf("%s: %s %s: %d %s, want %d", c.who, c.method, c.path, a.status, a.body, c.want)
		}
		if strings.Contains(a.body, "PRIVATE KEY") || strings.Contains(a.body, "BEGIN CERTIFICATE") {
			t.Errorf("%s: the answer shows PEM: %s", c.who, a.body)
		}
		switch c.who {
		case "mismatched key":
			if !strings.Contains(a.body, `"field":"key"`) || !strings.Contains(a.body, "does not match") {
				t.Errorf("mismatched key: %s", a.body)
			}
		case "unknown field":
			if !strings.Contains(a.body, `"field":"crt"`) {
				t.Errorf("unknown field: %s", a.body)
			}
		}
	}
	if audit := w.audit.String(); !strings.Contains(audit, "POST /v1/secrets") || !strings.Contains(audit, "DELETE /v1/secrets/{ns}/{name}") {
		t.Errorf("secret writes not audited:\n%s", audit)
	}
}
