package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/consul"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	"go.yaml.in/yaml/v2"
)

// TestPrometheusConsulSD: Prometheus' own consul_sd_configs discovery (its
// discovery manager and Consul discoverer, as the prometheus binary runs
// them; Debian's prometheus package is built without Consul discovery)
// reads a real "sextant server --consul-api" with the job of
// docs/compat.md's Consul section as written, relabelled as Prometheus
// relabels: the targets are exactly the passing instances of
// --consul-namespace, registered through Sextant's API and through
// Consul's, with Consul's labels; an expired, an isolated and a critical
// instance are not among them, a TTL check passed brings one in, a
// deregistered one leaves.
func TestPrometheusConsulSD(t *testing.T) {
	addr, consulAddr := startConsulServer(t, "--consul-namespace", "shop")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()

	resp, err := http.Post("http://"+addr+"/v1/instances", "application/json", strings.NewReader(`{"instances":[
		{"id":"w1","namespace":"shop","service":"web","host":"127.0.0.1","port":19001,"version":"v1","metadata":{"zone":"z1"}},
		{"id":"w3","namespace":"shop","service":"web","host":"127.0.0.1","port":19003,"isolated":true},
		{"id":"a1","namespace":"shop","service":"api","host":"127.0.0.1","port":19004,"ttl_seconds":1},
		{"id":"d1","namespace":"data","service":"db","host":"127.0.0.1","port":19006}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("register: %s", resp.Status)
	}
	c := consulClient(t, consulAddr, "")
	for _, r := range []*capi.AgentServiceRegistration{
		{ID: "c1", Name: "web", Tags: []string{"canary", "v2"}, Address: "127.0.0.1", Port: 19008, Meta: map[string]string{"zone": "z3"}},
		{ID: "c2", Name: "api", Address: "127.0.0.1", Port: 19009, Check: &capi.AgentServiceCheck{TTL: "1m"}},
		{ID: "c3", Name: "web", Address: "127.0.0.1", Port: 19010,
			Check: &capi.AgentServiceCheck{HTTP: up.URL, Interval: "10s", Status: capi.HealthPassing}},
	} {
		if err := c.Agent().ServiceRegister(r); err != nil {
			t.Fatalf("register %s through the Consul API: %v", r.ID, err)
		}
	}

	// The job of docs/compat.md, as Prometheus reads its configuration.
	var jobs []struct {
		Name    string             `yaml:"job_name"`
		Consul  []*consul.SDConfig `yaml:"consul_sd_configs"`
		Relabel []*relabel.Config  `yaml:"relabel_configs"`
	}
	if err := yaml.UnmarshalStrict([]byte(docsConsulJob(t, consulAddr)), &jobs); err != nil {
		t.Fatalf("docs/compat.md's consul_sd job: %v", err)
	}
	if len(jobs) != 1 || len(jobs[0].Consul) != 1 {
		t.Fatalf("docs/compat.md's consul_sd job: %d jobs, want one with one consul_sd_configs entry", len(jobs))
	}
	for _, rc := range jobs[0].Relabel {
		if err := rc.Validate(model.UTF8Validation); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := prometheus.NewRegistry()
	sdMetrics, err := discovery.CreateAndRegisterSDMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	mgr := discovery.NewManager(ctx, nil, reg, sdMetrics, discovery.Updatert(200*time.Millisecond))
	if mgr == nil {
		t.Fatal("no discovery manager")
	}
	done := make(chan struct{})
	go func() { defer close(done); mgr.Run() }()
	defer func() { cancel(); <-done }()
	if err := mgr.ApplyConfig(map[string]discovery.Configs{jobs[0].Name: {jobs[0].Consul[0]}}); err != nil {
		t.Fatal(err)
	}

	// targets keeps what the job's relabelling keeps, by service id, with
	// the labels discovery gave.
	targets := map[string]map[string]string{}
	deadline := time.Now().Add(60 * time.Second)
	await := func(want ...string) {
		t.Helper()
		slices.Sort(want)
		var ids []string
		for {
			ids = ids[:0]
			for id := range targets {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			if slices.Equal(ids, want) {
				return
			}
			select {
			case all := <-mgr.SyncCh():
				clear(targets)
				for _, g := range all[jobs[0].Name] {
					for _, tg := range g.Targets {
						lb := labels.NewBuilder(labels.EmptyLabels())
						for k, v := range g.Labels {
							lb.Set(string(k), string(v))
						}
						for k, v := range tg {
							lb.Set(string(k), string(v))
						}
						discovered := lb.Labels().Map()
						if relabel.ProcessBuilder(lb, jobs[0].Relabel...) {
							targets[discovered["__meta_consul_service_id"]] = discovered
						}
					}
				}
			case <-time.After(time.Until(deadline)):
				t.Fatalf("consul_sd targets %v, want %v", ids, want)
			}
		}
	}
	// a1 expires 3 s after its register (ttl 1 s); c2's TTL check starts
	// critical; w3 is isolated (maintenance); d1 is of another namespace.
	await("w1", "c1", "c3")
	wantC1 := map[string]string{
		"__address__":                         "127.0.0.1:19008",
		"__meta_consul_service":               "web",
		"__meta_consul_service_id":            "c1",
		"__meta_consul_tags":                  ",canary,v2,",
		"__meta_consul_health":                "passing",
		"__meta_consul_dc":                    "dc1",
		"__meta_consul_node":                  "sextant", // the agent's node (--consul-node), as Consul's agent registers
		"__meta_consul_service_metadata_zone": "z3",
	}
	for k, v := range wantC1 {
		if targets["c1"][k] != v {
			t.Errorf("c1: discovered %s=%q, want %q (all: %v)", k, targets["c1"][k], v, targets["c1"])
		}
	}
	if w1 := targets["w1"]; w1["__meta_consul_service_metadata_version"] != "v1" || w1["__meta_consul_service_metadata_zone"] != "z1" {
		t.Errorf("w1: discovered %v", w1)
	}
	if err := c.Agent().PassTTL("service:c2", ""); err != nil {
		t.Fatal(err)
	}
	await("w1", "c1", "c2", "c3")
	if err := c.Agent().ServiceDeregister("c1"); err != nil {
		t.Fatal(err)
	}
	await("w1", "c2", "c3")
}
