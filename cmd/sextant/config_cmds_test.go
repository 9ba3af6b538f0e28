package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// runConfig runs a fresh "sextant config" with args against the server at
// url and returns its output (stdout and stderr).
func runConfig(t *testing.T, url, stdin string, args ...string) (string, error) {
	t.Helper()
	root := &cobra.Command{Use: "sextant", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newConfigCmd())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(append(args, "--server", url))
	err := root.Execute()
	return out.String(), err
}

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
	if out, err := runConfig(t, url, cliRouting, "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	js, err := runConfig(t, url, "", "config", "list", "-o", "json")
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
	table, err := runConfig(t, url, "", "config", "list")
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
		out, err := runConfig(t, url, vs, append([]string{"config", "apply", "-f", "-"}, args...)...)
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
