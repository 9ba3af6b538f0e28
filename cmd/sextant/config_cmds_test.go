package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

const cliRouting = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  subsets:
  - {name: v1, labels: {version: v1}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders, namespace: prod}
spec:
  hosts: [orders.default, pay]
  http:
  - route:
    - destination: {host: orders.default, subset: v1}
`

// The config list table shows, per object, what the server's listing
// holds under the keys it answers.
func TestConfigListTableMatchesJSON(t *testing.T) {
	url := apitest.Start(t).URL
	if out, err := runOn(t, url, cliRouting, "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	js, err := runOn(t, url, "", "config", "list", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Items []struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name, Namespace, ResourceVersion string
			} `json:"metadata"`
			Spec struct {
				Hosts []string `json:"hosts"`
				Host  string   `json:"host"`
			} `json:"spec"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(js), &list); err != nil {
		t.Fatal(err)
	}
	table, err := runOn(t, url, "", "config", "list")
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSpace(table), "\n")[1:]
	if len(list.Items) != 2 || len(rows) != 2 {
		t.Fatalf("%d items in JSON, table:\n%s", len(list.Items), table)
	}
	for i, it := range list.Items {
		hosts := strings.Join(it.Spec.Hosts, ",")
		if it.Spec.Host != "" {
			hosts = it.Spec.Host
		}
		want := []string{it.Kind, it.Metadata.Namespace, it.Metadata.Name, it.Metadata.ResourceVersion, hosts}
		for _, v := range want {
			if v == "" {
				t.Fatalf("item %d: the listing has an empty field: %+v", i, it)
			}
		}
		if got := strings.Fields(rows[i]); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("item %d: table %v, JSON %v", i, got, want)
		}
	}
}

// config apply prints the server's warnings under each object, in a dry run
// and an apply alike: here a host naming a service with no instances.
func TestConfigApplyPrintsWarnings(t *testing.T) {
	url := apitest.Start(t).URL
	vs := `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders}
spec:
  hosts: [ordrs]
  http:
  - route: [{destination: {host: ordrs}}]
`
	for _, args := range [][]string{{"--dry-run"}, nil} {
		out, err := runOn(t, url, vs, append([]string{"config", "apply", "-f", "-"}, args...)...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		want := `virtualservice default/orders created` + map[bool]string{true: " (dry run)"}[len(args) > 0] + `
  warning: spec.hosts[0]: "ordrs" names service default/ordrs, which has no registered instances (a typo? calls to it fail until it has some)
  warning: spec.http[0].route[0].destination.host: "ordrs" names service default/ordrs, which has no registered instances (a typo? calls to it fail until it has some)
`
		if !strings.HasPrefix(out, want) {
			t.Fatalf("%v: got\n%s\nwant\n%s", args, out, want)
		}
	}
}

// Each command that reads manifests names what an object of another kind
// is and where it goes, and a YAML syntax error's file and line, before
// anything is sent; the server says the same for other clients
// (internal/config, internal/placement).
func TestManifestErrorsNameFileAndKind(t *testing.T) {
	url := apitest.Start(t).URL
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	routing := write("routing.yaml", cliRouting)
	pods := write("pods.yaml", cliPods)
	nodes := write("nodes.yaml", cliNodes)
	more := write("more.yaml", strings.ReplaceAll(strings.Replace(cliRouting, "  - route:\n", "  - delegate: {name: orders}\n    route:\n", 1), "name: orders", "name: other"))
	dupKey := write("dup.yaml", "apiVersion: v1\nkind: Node\nmetadata:\n  name: a\n  name: b\n")
	dupPod := write("duppod.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {app: a}\n  labels: {app: b}\n")
	// A second metadata: would have named another object.
	dupMeta := write("dupmeta.yaml", "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: orders}\nspec:\n  hosts: [orders]\n  http:\n  - route: [{destination: {host: orders}}]\nmetadata: {name: other}\n")
	broken := write("broken.yaml", "# a comment\n---\n"+strings.Replace(cliRouting, "  host: orders\n", "  host: orders\n bad: 1\n", 1))
	run := func(args ...string) error {
		t.Helper()
		_, err := runOn(t, url, "", args...)
		return err
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"place", "-f", routing},
			`place: ` + routing + ` (document 1): this is a DestinationRule (networking.istio.io/v1), not a Pod: routing config goes to "sextant config apply" (POST /v1/config:apply)`},
		{[]string{"nodes", "apply", "-f", pods},
			`nodes apply: ` + pods + ` (document 1): this is a Pod (v1), not a Node: Pods go to "sextant place" (POST /v1/placements)`},
		{[]string{"place", "-f", nodes},
			`place: ` + nodes + ` (document 1): this is a Node (v1), not a Pod: Nodes go to "sextant nodes apply" (POST /v1/nodes)`},
		{[]string{"config", "apply", "-f", routing, "-f", pods},
			`config apply: ` + pods + ` (document 1): this is a Pod (v1), not a VirtualService, DestinationRule, Gateway, ServiceEntry, WorkloadEntry, Sidecar, PeerAuthentication, AuthorizationPolicy, RequestAuthentication or Telemetry: Pods go to "sextant place" (POST /v1/placements)`},
		{[]string{"config", "apply", "-f", routing, "-f", broken},
			`config apply: ` + broken + `: not YAML or JSON: line 8: did not find expected key`},
		{[]string{"config", "apply", "-f", routing, "-f", more},
			`config apply: server answered 400 invalid_argument: document 4: spec.http[0].delegate: may not be set with route: the delegate's routes are the destinations (field documents[3].spec.http[0].delegate), in ` + more + ` (document 2)`},
		{[]string{"nodes", "apply", "-f", dupKey},
			`nodes apply: ` + dupKey + `: a key given twice: unmarshal errors: line 5: key "name" already set in map`},
		{[]string{"place", "-f", dupPod},
			`place: ` + dupPod + `: a key given twice: unmarshal errors: line 6: key "labels" already set in map`},
		{[]string{"config", "apply", "-f", routing, "-f", dupMeta},
			`config apply: ` + dupMeta + `: a key given twice: unmarshal errors: line 8: key "metadata" already set in map`},
		{[]string{"place", "-f", broken},
			`place: ` + broken + `: not YAML or JSON: line 8: did not find expected key`},
	} {
		err := run(c.args...)
		if err == nil || err.Error() != c.want {
			t.Errorf("%v:\n got %v\nwant %s", c.args, err, c.want)
		}
	}
	// The server words it the same way for a body sent as is.
	resp, err := http.Post(url+"/v1/placements", "application/yaml", strings.NewReader(cliRouting[:strings.Index(cliRouting, "---")]))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), `this is a DestinationRule (networking.istio.io/v1), not a Pod or a List of them: routing config goes to`) {
		t.Fatalf("POST /v1/placements of a DestinationRule: %d %s", resp.StatusCode, b)
	}
}
