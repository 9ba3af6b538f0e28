package consulapi_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	capi "github.com/hashicorp/consul/api"

	"github.com/sextant-mesh/sextant/internal/consulapi"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// TestConsulConfigFile: a configuration file's services (Consul's JSON,
// "service" and "services", snake_case keys) are registered on the
// agent's node at the load; after an edit, a reload registers the new
// definitions and deregisters those no file defines any more, and only
// those: a service registered through the API stays. A file that does not
// parse fails the load, naming it.
func TestConsulConfigFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "agent.json")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"datacenter": "dc1", "service": {"name": "redis", "port": 1234, "meta": {"some": "meta"}},
		"services": [{"id": "web-1", "name": "web", "port": 80, "tags": ["v1"]}, {"id": "web-2", "name": "web", "port": 81}]}`)
	s := newKVStackOn(t, apitest.StartWith(t, apitest.Options{}), "default", func(o *consulapi.Options) { o.ConfigFiles = []string{file} })
	if err := s.api.LoadConfigFiles(context.Background()); err != nil {
		t.Fatal(err)
	}
	agent := s.client(t, "").Agent()
	all, err := agent.Services()
	if err != nil {
		t.Fatal(err)
	}
	if all["redis"] == nil || all["redis"].Port != 1234 || all["redis"].Meta["some"] != "meta" || all["web-1"] == nil || all["web-2"] == nil {
		t.Fatalf("after the load: %v", all)
	}
	if err := agent.ServiceRegister(&capi.AgentServiceRegistration{Name: "api", Port: 9000}); err != nil {
		t.Fatal(err)
	}
	write(`{"service": {"name": "redis", "ports": [{"name": "http", "port": 8080, "default": true}, {"name": "metrics", "port": 9090}]}}`)
	if err := agent.Reload(); err != nil {
		t.Fatal(err)
	}
	all, _ = agent.Services()
	if all["web-1"] != nil || all["web-2"] != nil || all["api"] == nil {
		t.Errorf("after the reload: %v, want web-1 and web-2 gone, api kept", all)
	}
	if r := all["redis"]; r == nil || len(r.Ports) != 2 || r.Ports[0].Name != "http" || !r.Ports[0].Default || r.Ports[1].Port != 9090 {
		t.Errorf("redis after the reload: %+v", r)
	}
	write(`service { name = "redis" }`)
	if err := agent.Reload(); err == nil || !strings.Contains(err.Error(), "not HCL") {
		t.Errorf("reload of an HCL file: %v, want an error naming it", err)
	}
}
