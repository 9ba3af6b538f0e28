package consulapi_test

import (
	"os"
	"testing"

	"github.com/sextant-mesh/sextant/internal/acl"
)

// TestConsulAgentMetricsHost: /v1/agent/metrics answers the runtime's
// gauges under Consul's names (consul.<hostname>.runtime.*), and
// /v1/agent/host the machine, as consul/api's Metrics and Host read them.
func TestConsulAgentMetricsHost(t *testing.T) {
	s := newStack(t, acl.Options{}, "default")
	agent := s.client(t, "").Agent()
	m, err := agent.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	found := false
	for _, g := range m.Gauges {
		if g.Name == "consul."+host+".runtime.alloc_bytes" && g.Value > 0 {
			found = true
		}
	}
	if !found || m.Timestamp == "" {
		t.Errorf("metrics %+v: no consul.%s.runtime.alloc_bytes", m, host)
	}
	h, err := agent.Host()
	if err != nil {
		t.Fatal(err)
	}
	mem, _ := h["Memory"].(map[string]any)
	info, _ := h["Host"].(map[string]any)
	if h["CollectionTime"] == nil || mem["total"] == nil || mem["total"].(float64) <= 0 || info["hostname"] != host {
		t.Errorf("host: %v", h)
	}
}
