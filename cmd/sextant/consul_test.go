package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"

	"github.com/sextant-mesh/sextant/internal/debian"
)

// startConsulServer runs the real binary with --consul-api on a free
// address and the extra flags until the test ends (skipped with -short),
// and returns the addresses of its API and of its Consul API.
func startConsulServer(t *testing.T, extra ...string) (addr, consulAddr string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs a real server")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	addr, consulAddr = freeAddr(t), freeAddr(t)
	srv := startServer(t, bin, t.TempDir(), addr, append([]string{"--consul-api", consulAddr}, extra...)...)
	t.Cleanup(func() { stopServer(t, srv) })
	return addr, consulAddr
}

// consulClient is hashicorp's client of a server's --consul-api address.
func consulClient(t *testing.T, addr, token string) *capi.Client {
	t.Helper()
	cfg := capi.DefaultConfig()
	cfg.Address = addr
	cfg.Token = token
	c, err := capi.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestConsulAPIEndToEnd: hashicorp's own client against a real "sextant
// server --consul-api": register with a TTL check and an HTTP check, pass
// the TTL check, list the healthy instances, a blocking query that wakes
// on a change and one that times out with the same index, the catalog's
// services with their tags, deregister; the instances are Sextant's, in
// --consul-namespace.
func TestConsulAPIEndToEnd(t *testing.T) {
	addr, consulAddr := startConsulServer(t, "--consul-namespace", "shop")
	health := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer health.Close()

	c := consulClient(t, consulAddr, "")
	agent := c.Agent()
	err := agent.ServiceRegister(&capi.AgentServiceRegistration{
		ID: "web-1", Name: "web", Tags: []string{"primary", "v1"}, Address: "127.0.0.1", Port: 8080,
		Meta: map[string]string{"env": "prod"},
		Checks: capi.AgentServiceChecks{
			{CheckID: "web-1-ttl", TTL: "30s"},
			{HTTP: health.URL + "/health", Interval: "10s", Timeout: "2s", Status: capi.HealthPassing},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	err = agent.ServiceRegister(&capi.AgentServiceRegistration{ID: "web-2", Name: "web", Tags: []string{"v1"}, Address: "127.0.0.2", Port: 8080,
		Check: &capi.AgentServiceCheck{TTL: "30s"}})
	if err != nil {
		t.Fatal(err)
	}
	passing := func(tag string) []string {
		t.Helper()
		entries, _, err := c.Health().Service("web", tag, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range entries {
			ids = append(ids, e.Service.ID)
		}
		slices.Sort(ids)
		return ids
	}
	// A TTL check starts critical, as in Consul.
	if got := passing(""); len(got) != 0 {
		t.Errorf("passing before any TTL passed: %v", got)
	}
	if err := agent.PassTTL("web-1-ttl", "up"); err != nil {
		t.Fatal(err)
	}
	if got := passing("primary"); !slices.Equal(got, []string{"web-1"}) {
		t.Errorf("passing web tagged primary: %v, want [web-1]", got)
	}

	// The same instance through Sextant's own API: namespace shop, tags
	// as tag/ metadata, the checks with their status.
	resp, err := http.Get("http://" + addr + "/v1/instances/web-1")
	if err != nil {
		t.Fatal(err)
	}
	var in struct {
		Namespace string            `json:"namespace"`
		Metadata  map[string]string `json:"metadata"`
		Healthy   bool              `json:"healthy"`
		Checks    []struct {
			ID     string `json:"id"`
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"checks"`
	}
	json.NewDecoder(resp.Body).Decode(&in)
	resp.Body.Close()
	if _, ok := in.Metadata["tag/primary"]; in.Namespace != "shop" || !ok || in.Metadata["env"] != "prod" || !in.Healthy || len(in.Checks) != 2 || in.Checks[0].Status != "passing" {
		t.Errorf("web-1 through Sextant's API: %+v", in)
	}

	// A blocking query that times out answers the index it was given.
	_, meta, err := c.Health().Service("web", "", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, meta2, err := c.Health().Service("web", "", false, &capi.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: 500 * time.Millisecond})
	if err != nil || meta2.LastIndex != meta.LastIndex || time.Since(start) < 400*time.Millisecond {
		t.Errorf("timed-out blocking query: index %d after %v (%v), want %d after ~500ms", meta2.LastIndex, time.Since(start), err, meta.LastIndex)
	}
	// One that wakes on a change: web-2's TTL check passes.
	woke := make(chan []string, 1)
	go func() {
		entries, m, err := c.Health().Service("web", "", true, &capi.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: time.Minute})
		var ids []string
		for _, e := range entries {
			ids = append(ids, e.Service.ID)
		}
		slices.Sort(ids)
		if err != nil || m.LastIndex <= meta.LastIndex {
			ids = append(ids, "error")
		}
		woke <- ids
	}()
	awaitWatchers(t, addr, 1) // the query waits before the change is made
	if err := agent.PassTTL("service:web-2", ""); err != nil {
		t.Fatal(err)
	}
	select {
	case ids := <-woke:
		if !slices.Equal(ids, []string{"web-1", "web-2"}) {
			t.Errorf("woken blocking query: %v, want [web-1 web-2]", ids)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the blocking query did not wake within 30s of the change")
	}

	svcs, _, err := c.Catalog().Services(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := svcs["web"]; len(svcs) != 2 || !slices.Equal(got, []string{"primary", "v1"}) || svcs["consul"] == nil {
		t.Errorf("catalog services: %v, want web and consul", svcs)
	}
	// The server lists itself as service consul, at its Consul API's
	// address, as Consul's servers do.
	servers, _, err := c.Health().Service("consul", "", true, nil)
	if err != nil || len(servers) != 1 || net.JoinHostPort(servers[0].Service.Address, strconv.Itoa(servers[0].Service.Port)) != consulAddr {
		t.Errorf("service consul: %v (%v), want one passing instance at %s", servers, err, consulAddr)
	}
	if err := agent.ServiceDeregister("web-1"); err != nil {
		t.Fatal(err)
	}
	if got := passing(""); !slices.Equal(got, []string{"web-2"}) {
		t.Errorf("passing after deregistering web-1: %v", got)
	}
	// What Sextant does not serve is an error through the client too.
	if _, _, err := c.Event().Fire(&capi.UserEvent{Name: "deploy"}, nil); err == nil || !strings.Contains(err.Error(), "501") {
		t.Errorf("event fire: %v, want 501", err)
	}
}

// awaitWatchers waits until the server at addr holds at least n blocking
// queries (its sextant_registry_watchers gauge).
func awaitWatchers(t *testing.T, addr string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for line := range strings.Lines(string(b)) {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "sextant_registry_watchers "); ok {
					if f, err := strconv.ParseFloat(v, 64); err == nil && f >= float64(n) {
						return
					}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not hold %d blocking queries within 30s", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestConsulAPITokens: with --acl, Consul's token is Sextant's, with the
// same permissions: a read token reads and gets 403 on a register through
// the client; a write token registers.
func TestConsulAPITokens(t *testing.T) {
	addr, consulAddr := startConsulServer(t, "--acl", "--audit-log", "off")
	post := func(path, body, token string, v any) {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+addr+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("POST %s: %s", path, resp.Status)
		}
		if v != nil {
			json.NewDecoder(resp.Body).Decode(v)
		}
	}
	var admin, reader, writer struct{ Secret string }
	post("/v1/acl/bootstrap", `{}`, "", &admin)
	post("/v1/acl/policies", `{"name":"read","rules":[{"namespace":"default","instances":"read"}]}`, admin.Secret, nil)
	post("/v1/acl/policies", `{"name":"write","rules":[{"namespace":"default","instances":"write"}]}`, admin.Secret, nil)
	post("/v1/acl/tokens", `{"policies":["read"]}`, admin.Secret, &reader)
	post("/v1/acl/tokens", `{"policies":["write"]}`, admin.Secret, &writer)

	svc := &capi.AgentServiceRegistration{ID: "w1", Name: "web", Address: "127.0.0.1", Port: 80}
	err := consulClient(t, consulAddr, reader.Secret).Agent().ServiceRegister(svc)
	if err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "instances:write") {
		t.Errorf("register with a read token: %v, want 403 naming instances:write", err)
	}
	if err := consulClient(t, consulAddr, writer.Secret).Agent().ServiceRegister(svc); err != nil {
		t.Fatalf("register with a write token: %v", err)
	}
	svcs, _, err := consulClient(t, consulAddr, reader.Secret).Catalog().Services(nil)
	if _, ok := svcs["web"]; err != nil || len(svcs) != 2 || !ok {
		t.Errorf("catalog services with a read token: %v %v, want web and consul", svcs, err)
	}
	if _, _, err := consulClient(t, consulAddr, "").Catalog().Services(nil); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("catalog services without a token: %v, want 403", err)
	}
}

// TestConsulDocsCommands runs the commands of docs/compat.md's Consul
// section as a reader would, with curl (Debian's), against a real server
// started with the page's flags: each succeeds and prints what the page
// says.
func TestConsulDocsCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a real server")
	}
	if _, err := debian.Ensure("curl", "curl"); err != nil {
		t.Fatal(err)
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(docsBlock(t, "Consul", "sh")), "\n")
	const docAddr = "127.0.0.1:8500"
	serverArgs, ok := strings.CutPrefix(lines[0], "sextant server ")
	if !ok || !strings.Contains(serverArgs, docAddr) {
		t.Fatalf("the block's first line is not the server with --consul-api %s: %q", docAddr, lines[0])
	}
	addr, consulAddr := freeAddr(t), freeAddr(t)
	srv := startServer(t, bin, t.TempDir(), addr, strings.Fields(strings.ReplaceAll(serverArgs, docAddr, consulAddr))...)
	defer stopServer(t, srv)

	// What each command must print (a fragment), by its start.
	want := map[string][]string{
		"curl -sf '127.0.0.1:8500/v1/health/service/web?passing&tag=primary'":   {`"ID":"web-1"`, `"CheckID":"service:web-1"`, `"Status":"passing"`, `"Output":"ready"`, `"Weights":{"Passing":10`},
		"curl -sf 127.0.0.1:8500/v1/catalog/services":                           {`"web":["primary","v1"]`},
		"curl -sf '127.0.0.1:8500/v1/catalog/service/web?filter=":               {`"ServiceID":"web-1"`, `"ServiceMeta":{"env":"prod"}`},
		"curl -sf -D - -o /dev/null":                                            {"X-Consul-Index: ", "X-Consul-Knownleader: true", "X-Consul-Lastcontact: 0"},
		"curl -sf -X PUT --data-binary 'postgres://db:5432' '127.0.0.1:8500/v1": {"true"},
		"curl -sf '127.0.0.1:8500/v1/kv/app/config/db?raw'":                     {"postgres://db:5432"},
		"curl -sf '127.0.0.1:8500/v1/kv/app/?keys&separator=/'":                 {`["app/config/"]`},
	}
	checked := 0
	for _, line := range lines[1:] {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, "sh", "-c", strings.ReplaceAll(line, docAddr, consulAddr)).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		for prefix, frags := range want {
			if !strings.HasPrefix(line, prefix) {
				continue
			}
			checked++
			for _, f := range frags {
				if !strings.Contains(string(out), f) {
					t.Errorf("%s: output lacks %q:\n%s", line, f, out)
				}
			}
		}
	}
	if checked != len(want) {
		t.Errorf("%d of the %d commands whose output is checked are in the block: was one edited?", checked, len(want))
	}
	resp, err := http.Get("http://" + consulAddr + "/v1/agent/service/web-1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("web-1 after the block's deregister: %s, want 404", resp.Status)
	}
}
