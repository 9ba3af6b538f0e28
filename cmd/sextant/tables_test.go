package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// The client commands print tables from the client package's types. A type
// whose JSON keys drift from the server's answers leaves a column at its zero
// value without any error (as the calls stats table once did), so each
// answer a table is built from is read from a real server, decoded into the
// type the command uses, encoded again, and every value of the server's
// answer must come back under the same path.
func TestClientTypesKeepServerAnswers(t *testing.T) {
	url := apitest.Start(t).URL
	nodes, err := readObjects(strings.NewReader(cliNodes), []string{"-"}, "nodes", "Node")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct{ method, path, ctype, body string }{
		{"POST", "/v1/instances", "application/json", `{"instances":[
			{"service":"orders","host":"10.0.0.1","port":8080,"protocol":"http","version":"v2","weight":7,"metadata":{"zone":"z1"},"ttl_seconds":30},
			{"namespace":"prod","service":"pay","host":"10.0.0.2","port":9090,"isolated":true}]}`},
		{"POST", "/v1/nodes", "application/json", string(nodes)},
		{"POST", "/v1/placements", "application/json", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","labels":{"app":"web"}},
			"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"1500m","memory":"1Gi"}}}]}}`},
	} {
		req, _ := http.NewRequest(w.method, url+w.path, strings.NewReader(w.body))
		req.Header.Set("Content-Type", w.ctype)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d %s", w.method, w.path, resp.StatusCode, b)
		}
	}
	checkKept(t, url, "", []keptCase{
		{"/v1/instances", &client.ListResult{}},                                     // instances list
		{"/v1/namespaces", &client.NamespacesResult{}},                              // services list
		{"/v1/namespaces/default/services", &client.ServicesResult{}},               // services list
		{"/v1/namespaces/default/services/orders/instances", &client.QueryResult{}}, // watch
		{"/v1/nodes", &client.NodeList{}},                                           // nodes list
		{"/v1/nodes/node-a", &client.NodeItem{}},                                    // nodes get
		{"/v1/placements", &client.PlacementList{}},                                 // placements list
		{"/v1/placements/default/web-0", &client.Placement{}},                       // placements get
	})

	// The acl tables, on a server with ACLs.
	sec := apitest.StartWith(t, apitest.Options{ACL: acl.Options{Enabled: true}})
	resp, err := http.Post(sec.URL+"/v1/acl/bootstrap", "application/json", strings.NewReader(`{"description":"tables"}`))
	if err != nil {
		t.Fatal(err)
	}
	var boot aclToken
	err = json.NewDecoder(resp.Body).Decode(&boot)
	resp.Body.Close()
	if err != nil || boot.Secret == "" {
		t.Fatalf("bootstrap: %v %+v", err, boot)
	}
	checkKept(t, sec.URL, boot.Secret, []keptCase{
		{"/v1/acl/tokens", &tokenList{}},    // acl token list
		{"/v1/acl/policies", &policyList{}}, // acl policy list
	})
}

type keptCase struct {
	path string
	into any // the type the command decodes the answer into
}

// checkKept GETs each case's path (with token, if any) and checks that its
// type keeps every value of the answer.
func checkKept(t *testing.T, url, token string, cases []keptCase) {
	t.Helper()
	for _, c := range cases {
		req, _ := http.NewRequest("GET", url+c.path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", c.path, resp.StatusCode, raw)
		}
		if err := json.Unmarshal(raw, c.into); err != nil {
			t.Fatalf("GET %s into %T: %v", c.path, c.into, err)
		}
		again, err := json.Marshal(c.into)
		if err != nil {
			t.Fatal(err)
		}
		var want, got any
		json.Unmarshal(raw, &want)
		json.Unmarshal(again, &got)
		n := 0
		for _, lost := range lostValues("", want, got, &n) {
			t.Errorf("GET %s: %T loses %s", c.path, c.into, lost)
		}
		if n < 3 {
			t.Fatalf("GET %s: only %d values compared: %s", c.path, n, raw)
		}
	}
}

// lostValues lists the leaves of want that got does not hold under the same
// path with the same value, counting the leaves compared in n.
func lostValues(path string, want, got any, n *int) []string {
	switch w := want.(type) {
	case map[string]any:
		g, _ := got.(map[string]any)
		var out []string
		for k, v := range w {
			out = append(out, lostValues(path+"."+k, v, g[k], n)...)
		}
		return out
	case []any:
		g, _ := got.([]any)
		var out []string
		for i, v := range w {
			var gv any
			if i < len(g) {
				gv = g[i]
			}
			out = append(out, lostValues(fmt.Sprintf("%s[%d]", path, i), v, gv, n)...)
		}
		return out
	}
	*n++
	if !reflect.DeepEqual(want, got) && !(isZero(want) && got == nil) {
		return []string{fmt.Sprintf("%s (server %v, decoded %v)", path, want, got)}
	}
	return nil
}

// isZero reports a JSON zero value, which a type may leave out (omitempty).
func isZero(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case bool:
		return !v
	case float64:
		return v == 0
	case string:
		return v == ""
	}
	return false
}
