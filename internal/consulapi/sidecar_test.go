package consulapi_test

import (
	"slices"
	"testing"

	capi "github.com/hashicorp/consul/api"

	"github.com/sextant-mesh/sextant/internal/acl"
)

// TestConsulSidecarService: a service registered with
// Connect.SidecarService registers its sidecar proxy too, with Consul's
// defaults (id and name + "-sidecar-proxy", Kind connect-proxy, the
// parent's tags, the proxy's destination, a port from 21000), listed by
// the connect view of the parent; a second sidecar takes the next port;
// deregistering the parent removes its sidecar.
func TestConsulSidecarService(t *testing.T) {
	s := newStack(t, acl.Options{}, "default")
	c := s.client(t, "")
	agent := c.Agent()
	for _, name := range []string{"foo", "bar"} {
		if err := agent.ServiceRegister(&capi.AgentServiceRegistration{Name: name, Port: 8000, Tags: []string{"v1"},
			Connect: &capi.AgentServiceConnect{SidecarService: &capi.AgentServiceRegistration{}}}); err != nil {
			t.Fatal(err)
		}
	}
	all, err := agent.Services()
	if err != nil {
		t.Fatal(err)
	}
	side := all["foo-sidecar-proxy"]
	if side == nil || side.Service != "foo-sidecar-proxy" || side.Kind != capi.ServiceKindConnectProxy || side.Port != 21000 ||
		!slices.Equal(side.Tags, []string{"v1"}) || side.Proxy == nil || side.Proxy.DestinationServiceName != "foo" ||
		side.Proxy.DestinationServiceID != "foo" || side.Proxy.LocalServicePort != 8000 {
		t.Fatalf("foo's sidecar: %+v (proxy %+v)", side, side.Proxy)
	}
	if b := all["bar-sidecar-proxy"]; b == nil || b.Port != 21001 {
		t.Errorf("bar's sidecar: %+v, want port 21001", b)
	}
	// Registering foo again keeps its sidecar's port.
	if err := agent.ServiceRegister(&capi.AgentServiceRegistration{Name: "foo", Port: 8001,
		Connect: &capi.AgentServiceConnect{SidecarService: &capi.AgentServiceRegistration{}}}); err != nil {
		t.Fatal(err)
	}
	all, _ = agent.Services()
	if side := all["foo-sidecar-proxy"]; side == nil || side.Port != 21000 || side.Proxy.LocalServicePort != 8001 {
		t.Errorf("foo's sidecar registered again: %+v", side)
	}
	proxies, _, err := c.Catalog().Connect("foo", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(proxies) != 1 || proxies[0].ServiceID != "foo-sidecar-proxy" {
		t.Errorf("catalog connect foo: %+v", proxies)
	}
	if err := agent.ServiceDeregister("foo"); err != nil {
		t.Fatal(err)
	}
	all, _ = agent.Services()
	if all["foo"] != nil || all["foo-sidecar-proxy"] != nil || all["bar-sidecar-proxy"] == nil {
		t.Errorf("after deregistering foo: %v", all)
	}
}
