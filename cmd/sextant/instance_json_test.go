package main

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// instances list, get and watch -o json print each instance in the shape
// the HTTP API answers it, empty fields included ("metadata": {},
// "version": "", "ttl_seconds": 0, a check's "output": ""): the CLI's
// JSON and the API's are compared value by value, key by key.
func TestInstancesJSONIsTheAPIShape(t *testing.T) {
	url := apitest.Start(t).URL
	body := `{"instances":[
		{"id":"bare","service":"orders","host":"10.0.0.1","port":8080},
		{"id":"full","service":"orders","host":"10.0.0.2","port":8080,"protocol":"http","version":"v2","weight":7,
		 "isolated":true,"metadata":{"zone":"z1"},"ttl_seconds":30,"deregister_after_seconds":60},
		{"id":"checked","service":"orders","host":"10.0.0.3","port":8080,"checks":[{"id":"alive","type":"ttl","ttl":"1m"}]}]}`
	resp, err := http.Post(url+"/v1/instances", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("register: %d %s", resp.StatusCode, b)
	}
	api := func(path string) any {
		t.Helper()
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, err := cliAt(t, append(args, "--server", url)...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, errOut)
		}
		return out
	}
	decode := func(s string) any {
		t.Helper()
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatalf("%v\n%s", err, s)
		}
		return v
	}
	same := func(what string, cliV, apiV any) {
		t.Helper()
		if !reflect.DeepEqual(cliV, apiV) {
			c, _ := json.Marshal(cliV)
			a, _ := json.Marshal(apiV)
			t.Errorf("%s: the CLI prints\n%s\nthe API answers\n%s", what, c, a)
		}
	}

	want := api("/v1/instances").(map[string]any)
	if n := len(want["instances"].([]any)); n != 3 {
		t.Fatalf("the API lists %d instances", n)
	}
	got := decode(cli("instances", "list", "-o", "json")).(map[string]any)
	same("instances list -o json", got["instances"], want["instances"])
	for _, id := range []string{"bare", "full", "checked"} {
		same("instances get "+id+" -o json", decode(cli("instances", "get", id, "-o", "json")), api("/v1/instances/"+id))
	}

	// watch: the first line adds every instance of the service.
	root := newWatchCmd()
	var out strings.Builder
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"orders", "-o", "json", "--count", "1", "--server", url})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	line := decode(strings.TrimSpace(out.String())).(map[string]any)
	byID := map[string]any{}
	for _, in := range line["added"].([]any) {
		byID[in.(map[string]any)["id"].(string)] = in
	}
	for _, in := range want["instances"].([]any) {
		id := in.(map[string]any)["id"].(string)
		if id == "full" { // isolated: a service query leaves it out
			continue
		}
		same("watch -o json, instance "+id, byID[id], in)
	}
}

// An instance registered with only the label version=v1 (as
// examples/keepalive registers) has version v1: in the API's answer, the
// CLI's VERSION column and the selector alike.
func TestVersionLabelIsTheVersion(t *testing.T) {
	url := apitest.Start(t).URL
	if out, errOut, err := cliAt(t, "instances", "register", "--service", "orders", "--id", "k1", "--host", "10.0.0.1",
		"--port", "9001", "--meta", "version=v1", "--server", url); err != nil {
		t.Fatalf("register: %v\n%s%s", err, out, errOut)
	}
	resp, err := http.Get(url + "/v1/instances/k1")
	if err != nil {
		t.Fatal(err)
	}
	var in struct{ Version string }
	err = json.NewDecoder(resp.Body).Decode(&in)
	resp.Body.Close()
	if err != nil || in.Version != "v1" {
		t.Fatalf("the API answers version %q (%v), want v1", in.Version, err)
	}
	out, _, err := cliAt(t, "instances", "list", "--selector", "version=v1", "--server", url)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("list:\n%s", out)
	}
	col := strings.Index(lines[0], "VERSION")
	if col < 0 || !strings.HasPrefix(lines[1][col:], "v1 ") {
		t.Fatalf("the VERSION column is not v1:\n%s", out)
	}
}
