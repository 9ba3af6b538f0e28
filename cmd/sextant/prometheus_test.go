package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sextant-mesh/sextant/internal/debian"
)

// prometheusPath is Debian's Prometheus; SEXTANT_PROMETHEUS overrides it.
func prometheusPath() string {
	if p := os.Getenv("SEXTANT_PROMETHEUS"); p != "" {
		return p
	}
	return "/usr/bin/prometheus"
}

// ensurePrometheus installs Debian's prometheus package when it is missing
// and the test runs as root (package debian), once per test binary.
var ensurePrometheus = sync.OnceValue(func() error {
	_, err := debian.Ensure(prometheusPath(), "--no-install-recommends", "prometheus")
	return err
})

// promTarget is one active target of Prometheus' /api/v1/targets.
type promTarget struct {
	DiscoveredLabels map[string]string `json:"discoveredLabels"`
	Labels           map[string]string `json:"labels"`
	ScrapePool       string            `json:"scrapePool"`
}

// TestPrometheusHTTPSD: a real Prometheus (Debian's) discovers its scrape
// targets from a real sextant server through http_sd_configs: exactly the
// healthy instances, across namespaces, IPv6 included, with their
// __meta_sextant_* labels; a second job with healthy_only=false sees the
// isolated and the expired ones labelled unhealthy; the job of
// docs/compat.md, as written, scrapes what it says; a deregistered
// instance leaves. One instance is registered through --consul-api: the
// same registry, so Prometheus finds it too. (Debian's Prometheus is built
// without consul_sd_configs; TestPrometheusConsulSD runs Prometheus'
// own consul discovery instead.)
func TestPrometheusHTTPSD(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real sextant server and a real Prometheus")
	}
	// Never skipped, in CI or elsewhere: without Prometheus the test fails,
	// saying what to install.
	if err := ensurePrometheus(); err != nil {
		t.Fatalf("Prometheus is needed (apt-get install prometheus, or run the test as root to have it installed): %v", err)
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	consulAddr := freeAddr(t)
	srv := startServer(t, bin, t.TempDir(), addr, "--consul-api", consulAddr, "--consul-namespace", "shop")
	// The server itself, listed as Consul's service consul in shop.
	self := "consul:" + consulAddr
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	base := "http://" + addr

	post := func(path, body string) {
		t.Helper()
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("POST %s: %d", path, resp.StatusCode)
		}
	}
	// The targets are never scraped successfully (nothing listens on
	// them); discovery is what is tested.
	post("/v1/instances", `{"instances":[
		{"id":"w1","namespace":"shop","service":"web","host":"127.0.0.1","port":19001,"version":"v1","protocol":"http","metadata":{"app.kubernetes.io/name":"web","zone":"z1"}},
		{"id":"w2","namespace":"shop","service":"web","host":"::1","port":19002,"version":"v2","weight":50,"metadata":{"zone":"z2"}},
		{"id":"w3","namespace":"shop","service":"web","host":"127.0.0.1","port":19003,"isolated":true},
		{"id":"a1","namespace":"shop","service":"api","host":"127.0.0.1","port":19004,"ttl_seconds":1},
		{"id":"a2","namespace":"shop","service":"api","host":"127.0.0.1","port":19005},
		{"id":"d1","namespace":"data","service":"db","host":"127.0.0.1","port":19006,"metadata":{"role":"primary"}},
		{"id":"m1","namespace":"shop","service":"pay","host":"127.0.0.1","port":19007,"version":"v3","metadata":{"prometheus.io/scrape":"true","prometheus.io/port":"19107","zone":"z1","env":"prod","team":"t"}}]}`)
	// One registered through the Consul API: in --consul-namespace (shop).
	req, _ := http.NewRequest("PUT", "http://"+consulAddr+"/v1/agent/service/register",
		strings.NewReader(`{"ID":"c1","Name":"web","Tags":["canary"],"Address":"127.0.0.1","Port":19008,"Meta":{"zone":"z3"}}`))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("register c1 through the Consul API: %v %v", resp, err)
	}

	promAddr := freeAddr(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1m
scrape_configs:
  - job_name: healthy
    http_sd_configs:
      - url: %[1]s/v1/sd/prometheus
        refresh_interval: 1s
  - job_name: shop-all
    http_sd_configs:
      - url: %[1]s/v1/sd/prometheus?namespace=shop&healthy_only=false
        refresh_interval: 1s
%[2]s`, base, docsPrometheusJob(t, base))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	prom := exec.Command(prometheusPath(),
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--web.listen-address="+promAddr,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--log.level=warn")
	prom.Stdout, prom.Stderr = &logs, &logs
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		prom.Process.Kill()
		prom.Wait()
		if t.Failed() {
			t.Logf("prometheus output:\n%s", logs.String())
		}
	})

	// targets returns the active targets of job, by instance id.
	targets := func(job string) (map[string]promTarget, error) {
		resp, err := http.Get("http://" + promAddr + "/api/v1/targets?state=active")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var body struct {
			Status string `json:"status"`
			Data   struct {
				ActiveTargets []promTarget `json:"activeTargets"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return nil, err
		}
		if body.Status != "success" {
			return nil, fmt.Errorf("status %q", body.Status)
		}
		out := map[string]promTarget{}
		for _, tg := range body.Data.ActiveTargets {
			if tg.ScrapePool == job {
				out[tg.DiscoveredLabels["__meta_sextant_instance_id"]] = tg
			}
		}
		return out, nil
	}
	deadline := time.Now().Add(60 * time.Second)
	// await polls job's targets until their ids are want.
	await := func(job string, want ...string) map[string]promTarget {
		t.Helper()
		slices.Sort(want)
		var last []string
		for {
			got, err := targets(job)
			last = slices.Sorted(func(yield func(string) bool) {
				for id := range got {
					if !yield(id) {
						return
					}
				}
			})
			if err == nil && slices.Equal(last, want) {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s: Prometheus lists %v (err %v), want %v", job, last, err, want)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// a1 (ttl 1 s, no heartbeat) turns unhealthy 3 s after its register
	// and leaves the default job.
	got := await("healthy", "w1", "w2", "a2", "d1", "m1", "c1", self)
	wantLabels := map[string]string{
		"__address__":                                    "127.0.0.1:19001",
		"__meta_sextant_namespace":                       "shop",
		"__meta_sextant_service":                         "web",
		"__meta_sextant_instance_id":                     "w1",
		"__meta_sextant_protocol":                        "http",
		"__meta_sextant_version":                         "v1",
		"__meta_sextant_weight":                          "100",
		"__meta_sextant_healthy":                         "true",
		"__meta_sextant_isolated":                        "false",
		"__meta_sextant_metadata_app_kubernetes_io_name": "web",
		"__meta_sextant_metadata_zone":                   "z1",
	}
	for k, v := range wantLabels {
		if got["w1"].DiscoveredLabels[k] != v {
			t.Errorf("w1: discovered %s=%q, want %q (all: %v)", k, got["w1"].DiscoveredLabels[k], v, got["w1"].DiscoveredLabels)
		}
	}
	if w2 := got["w2"].DiscoveredLabels; w2["__address__"] != "[::1]:19002" || w2["__meta_sextant_weight"] != "50" || w2["__meta_sextant_version"] != "v2" {
		t.Errorf("w2: discovered %v", w2)
	}
	if d1 := got["d1"].DiscoveredLabels; d1["__meta_sextant_namespace"] != "data" || d1["__meta_sextant_metadata_role"] != "primary" {
		t.Errorf("d1: discovered %v", d1)
	}
	if inst := got["w1"].Labels["instance"]; inst != "127.0.0.1:19001" {
		t.Errorf("w1: instance label %q", inst)
	}

	// The job of docs/compat.md: only m1 asks to be scraped, on the port
	// its metadata names, with the labels the relabelling keeps.
	docs := await("sextant", "m1")
	wantTarget := map[string]string{"job": "sextant", "instance": "127.0.0.1:19107", "namespace": "shop",
		"service": "pay", "version": "v3", "zone": "z1", "env": "prod"}
	if diff := cmp.Diff(wantTarget, docs["m1"].Labels); diff != "" {
		t.Errorf("docs/compat.md's job: m1's target labels (-want +got):\n%s", diff)
	}

	all := await("shop-all", "w1", "w2", "w3", "a1", "a2", "m1", "c1", self)
	if w3 := all["w3"].DiscoveredLabels; w3["__meta_sextant_isolated"] != "true" {
		t.Errorf("w3: discovered %v", w3)
	}
	// a1 expires: still in shop-all, labelled unhealthy.
	for {
		all, err := targets("shop-all")
		if err == nil && all["a1"].DiscoveredLabels["__meta_sextant_healthy"] == "false" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a1 never labelled unhealthy: %v (err %v)", all["a1"].DiscoveredLabels, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	await("healthy", "w1", "w2", "a2", "d1", "m1", "c1", self)

	req, _ = http.NewRequest("DELETE", base+"/v1/instances/w1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("deregister w1: %d", resp.StatusCode)
	}
	got = await("healthy", "w2", "a2", "d1", "m1", "c1", self)
	if a := got["w2"].DiscoveredLabels["__address__"]; a != "[::1]:19002" {
		t.Errorf("w2 after w1 left: __address__ %q", a)
	}
	await("shop-all", "w2", "w3", "a1", "a2", "m1", "c1", self)
}

// docsPrometheusJob is the prometheus.yml of docs/compat.md's Prometheus
// section, its jobs only, pointed at the server at base and refreshed
// every second: the page's config is run as written.
func docsPrometheusJob(t *testing.T, base string) string {
	return docsJobs(t, "Prometheus", [2]string{"http://127.0.0.1:7400", base})
}

// docsConsulJob is the consul_sd job of docs/compat.md's Consul section,
// pointed at the Consul API at addr and refreshed every second.
func docsConsulJob(t *testing.T, addr string) string {
	return docsJobs(t, "Consul", [2]string{"127.0.0.1:8500", addr})
}

// docsJobs is the scrape jobs of the yaml block of docs/compat.md's
// section, with addr's replacement made and refreshed every second.
func docsJobs(t *testing.T, section string, addr [2]string) string {
	t.Helper()
	block := docsBlock(t, section, "yaml")
	jobs, ok := strings.CutPrefix(block, "scrape_configs:\n")
	if !ok {
		t.Fatalf("docs/compat.md's %s yaml block does not start with scrape_configs:\n%s", section, block)
	}
	for _, r := range [][2]string{addr, {"refresh_interval: 30s", "refresh_interval: 1s"}} {
		if !strings.Contains(jobs, r[0]) {
			t.Fatalf("docs/compat.md's %s yaml block has no %q to replace:\n%s", section, r[0], jobs)
		}
		jobs = strings.ReplaceAll(jobs, r[0], r[1])
	}
	return jobs
}

// docsBlock is the first fenced block of lang in docs/compat.md's
// section ("## section").
func docsBlock(t *testing.T, section, lang string) string {
	t.Helper()
	page := string(readRepoFile(t, "docs/compat.md"))
	_, text, ok := strings.Cut(page, "\n## "+section+"\n")
	if !ok {
		t.Fatalf("docs/compat.md has no %s section", section)
	}
	_, block, ok := strings.Cut(text, "```"+lang+"\n")
	if !ok {
		t.Fatalf("docs/compat.md's %s section has no %s block", section, lang)
	}
	block, _, _ = strings.Cut(block, "```")
	return block
}
