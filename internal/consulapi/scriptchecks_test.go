package consulapi_test

import (
	"strings"
	"testing"

	capi "github.com/hashicorp/consul/api"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/consulapi"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// TestConsulScriptChecks: without --consul-enable-script-checks a script
// or Docker check is refused with Consul's words; with it, script checks
// of a service (with it, and alone) and of the node, and a Docker check,
// are kept with their type and registered status (never run), count in
// Consul's health, not in the instance's own checks, and deregister.
func TestConsulScriptChecks(t *testing.T) {
	off := newKVStack(t, acl.Options{}, "default")
	err := off.client(t, "").Agent().ServiceRegister(&capi.AgentServiceRegistration{Name: "bar", Port: 1234,
		Check: &capi.AgentServiceCheck{Interval: "10s", Args: []string{"sh", "-c", "false"}}})
	if err == nil || !strings.Contains(err.Error(), "Scripts are disabled") || !strings.Contains(err.Error(), "--consul-enable-script-checks") {
		t.Fatalf("script check with scripts off: %v, want Consul's refusal naming the flag", err)
	}

	s := newKVStackOn(t, apitest.StartWith(t, apitest.Options{}), "default", func(o *consulapi.Options) { o.EnableScriptChecks = true })
	agent := s.client(t, "").Agent()
	if err := agent.ServiceRegister(&capi.AgentServiceRegistration{Name: "bar", Port: 1234, Checks: capi.AgentServiceChecks{
		{Interval: "10s", Args: []string{"sh", "-c", "false"}},
		{TTL: "30s", Status: "passing"},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := agent.CheckRegister(&capi.AgentCheckRegistration{Name: "redischeck", ServiceID: "bar", AgentServiceCheck: capi.AgentServiceCheck{
		DockerContainerID: "f972c95ebf0e", Args: []string{"/bin/true"}, Shell: "/bin/bash", Interval: "10s", Status: "passing"}}); err != nil {
		t.Fatal(err)
	}
	if err := agent.CheckRegister(&capi.AgentCheckRegistration{Name: "foo", AgentServiceCheck: capi.AgentServiceCheck{
		Interval: "10s", Args: []string{"true"}}}); err != nil {
		t.Fatal(err)
	}
	checks, err := agent.Checks()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct{ typ, status, service string }{
		"service:bar:1": {"script", "critical", "bar"},
		"service:bar:2": {"ttl", "passing", "bar"},
		"redischeck":    {"docker", "passing", "bar"},
		"foo":           {"script", "critical", ""},
	}
	for id, w := range want {
		c := checks[id]
		if c == nil || c.Type != w.typ || c.Status != w.status || c.ServiceID != w.service {
			t.Errorf("check %s: %+v, want %+v", id, c, w)
		}
	}
	if in := s.Registry.Instances().Get("bar"); in == nil || len(in.Checks) != 1 || in.Checks[0].ID != "service:bar:2" {
		t.Errorf("instance bar's own checks: %+v, want only the TTL check (scripts are never run)", in)
	}
	entries, _, err := s.client(t, "").Health().Service("bar", "", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Checks.AggregatedStatus() != capi.HealthCritical {
		t.Errorf("health of bar: %+v, want critical (its script check's registered status)", entries)
	}
	if err := agent.UpdateTTL("service:bar:1", "", "pass"); err == nil {
		t.Error("a script check's status was set through the TTL update")
	}
	if err := agent.CheckDeregister("redischeck"); err != nil {
		t.Fatal(err)
	}
	if checks, _ := agent.Checks(); checks["redischeck"] != nil || checks["service:bar:1"] == nil {
		t.Errorf("after deregistering redischeck: %v", checks)
	}
}
