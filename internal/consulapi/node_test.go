package consulapi_test

import (
	"slices"
	"strings"
	"testing"

	capi "github.com/hashicorp/consul/api"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/consulapi"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// TestCatalogNodes: hashicorp's client registers a node with meta, a
// tagged address, a locality and a check, and a service without a port,
// of a Kind, with tagged addresses and a check of its own, through
// /v1/catalog/register; the node, its services and its health read back
// in Consul's shapes, and survive a restart (the node is a record of the
// store); deregistering the service and then the node removes them.
func TestCatalogNodes(t *testing.T) {
	dir := t.TempDir()
	srv := apitest.StartWith(t, apitest.Options{Dir: dir})
	s := newKVStackOn(t, srv, "default")
	c := s.client(t, "")
	_, err := c.Catalog().Register(&capi.CatalogRegistration{
		Node: "foo", ID: "e0155642-135d-4739-9853-a1ee6c9f945b", Address: "127.0.0.2",
		TaggedAddresses: map[string]string{"wan": "198.18.0.2"}, NodeMeta: map[string]string{"env": "production"},
		Locality: &capi.Locality{Region: "us-west-1", Zone: "us-west-1a"},
		Service: &capi.AgentService{ID: "redis1", Service: "redis", Kind: capi.ServiceKindTypical, Tags: []string{"v1"},
			TaggedAddresses: map[string]capi.ServiceAddress{"wan": {Address: "198.18.0.3", Port: 6379}}},
		Checks: capi.HealthChecks{
			{Node: "foo", CheckID: "foo:alive", Name: "alive", Status: capi.HealthPassing},
			{Node: "foo", CheckID: "foo:redis", Name: "redis", Status: capi.HealthCritical, ServiceID: "redis1"},
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The same service id on another node is another service.
	if _, err := c.Catalog().Register(&capi.CatalogRegistration{Node: "bar", Address: "127.0.0.3",
		Service: &capi.AgentService{ID: "redis1", Service: "redis", Port: 6380}}, nil); err != nil {
		t.Fatal(err)
	}
	check := func(c *capi.Client) {
		t.Helper()
		nodes, _, err := c.Catalog().Nodes(nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, n := range nodes {
			names = append(names, n.Node)
		}
		if !slices.Equal(names, []string{"bar", "foo", consulapi.DefaultNode}) {
			t.Fatalf("nodes %v, want bar, foo and the agent's", names)
		}
		foo := nodes[1]
		if foo.Address != "127.0.0.2" || foo.Meta["env"] != "production" || foo.TaggedAddresses["wan"] != "198.18.0.2" || foo.Locality == nil || foo.Locality.Zone != "us-west-1a" {
			t.Errorf("node foo: %+v", foo)
		}
		if got, _, err := c.Catalog().Nodes(&capi.QueryOptions{NodeMeta: map[string]string{"env": "production"}}); err != nil || len(got) != 1 {
			t.Errorf("nodes with env=production: %v %v, want foo", got, err)
		}
		svcs, _, err := c.Catalog().Service("redis", "", nil)
		if err != nil || len(svcs) != 2 {
			t.Fatalf("catalog service redis: %v %v", svcs, err)
		}
		for _, cs := range svcs {
			if cs.ServiceID != "redis1" {
				t.Errorf("service id %q, want redis1 (Consul's id, on each node)", cs.ServiceID)
			}
		}
		i := slices.IndexFunc(svcs, func(cs *capi.CatalogService) bool { return cs.Node == "foo" })
		if i < 0 {
			t.Fatalf("no redis on foo: %+v", svcs)
		}
		cs := svcs[i]
		if cs.ServicePort != 0 || cs.Address != "127.0.0.2" || cs.NodeMeta["env"] != "production" || cs.ServiceTaggedAddresses["wan"].Port != 6379 || len(cs.ServiceMeta) != 0 {
			t.Errorf("redis on foo: %+v", cs)
		}
		hc, _, err := c.Health().Node("foo", nil)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, ch := range hc {
			ids = append(ids, ch.CheckID+"="+ch.Status)
		}
		slices.Sort(ids)
		if !slices.Equal(ids, []string{"foo:alive=passing", "foo:redis=critical"}) {
			t.Errorf("health of node foo: %v", ids)
		}
		entries, _, err := c.Health().Service("redis", "", false, &capi.QueryOptions{NodeMeta: map[string]string{"env": "production"}})
		if err != nil || len(entries) != 1 || entries[0].Checks.AggregatedStatus() != capi.HealthCritical {
			t.Errorf("health of redis on env=production: %v %v, want one, critical", entries, err)
		}
		crit, _, err := c.Health().State(capi.HealthCritical, nil)
		if err != nil || len(crit) != 1 || crit[0].CheckID != "foo:redis" {
			t.Errorf("critical checks: %v %v, want foo:redis", crit, err)
		}
	}
	check(c)

	// A restart reads the node back from the store.
	s.api.Shutdown()
	s.consul.Close()
	srv.Close()
	s = newKVStackOn(t, apitest.StartWith(t, apitest.Options{Dir: dir}), "default")
	c = s.client(t, "")
	check(c)

	if _, err := c.Catalog().Deregister(&capi.CatalogDeregistration{Node: "foo", ServiceID: "redis1"}, nil); err != nil {
		t.Fatal(err)
	}
	if svcs, _, _ := c.Catalog().Service("redis", "", nil); len(svcs) != 1 || svcs[0].Node != "bar" {
		t.Errorf("after deregistering redis1 of foo: %+v, want bar's alone", svcs)
	}
	if hc, _, _ := c.Health().Node("foo", nil); len(hc) != 1 {
		t.Errorf("after deregistering redis1 of foo, its checks: %+v, want the node's alone", hc)
	}
	if _, err := c.Catalog().Deregister(&capi.CatalogDeregistration{Node: "bar"}, nil); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := c.Catalog().Node("bar", nil); n != nil {
		t.Errorf("node bar after its deregister: %+v", n)
	}
	if svcs, _, _ := c.Catalog().Service("redis", "", nil); len(svcs) != 0 {
		t.Errorf("redis after its nodes' deregisters: %+v", svcs)
	}
}

// TestCatalogRegisterRefusals: a body Sextant cannot keep is a 400 naming
// what is wrong, and writes nothing.
func TestCatalogRegisterRefusals(t *testing.T) {
	s := newKVStack(t, acl.Options{}, "default")
	for _, tc := range []struct{ name, body, want string }{
		{"no node", `{"Address":"1.2.3.4"}`, "Must provide node"},
		{"no address", `{"Node":"n"}`, "Must provide address"},
		{"unknown member", `{"Node":"n","Address":"a","Colour":1}`, `unknown field "Colour"`},
		{"no service name", `{"Node":"n","Address":"10.0.0.1","Service":{"ID":"x"}}`, "Must provide service name"},
		{"bad status", `{"Node":"n","Address":"10.0.0.1","Check":{"CheckID":"c","Status":"fine"}}`, `Status: "fine"`},
		{"connect sidecar", `{"Node":"n","Address":"10.0.0.1","Service":{"Service":"s","Connect":{"SidecarService":{"Port":1}}}}`, "only Native is supported"},
		{"reserved meta", `{"Node":"n","Address":"10.0.0.1","NodeMeta":{"consul-x":"y"}}`, "reserved"},
		{"other dc", `{"Node":"n","Address":"10.0.0.1","Datacenter":"dc9"}`, "No path to datacenter"},
	} {
		code, body, _ := s.raw(t, "PUT", "/v1/catalog/register", tc.body)
		if code != 400 || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %q, want 400 containing %q", tc.name, code, body, tc.want)
		}
	}
	if n := s.Registry.Instances().Len(); n != 0 {
		t.Errorf("%d instances written by refused registers", n)
	}
	code, body, _ := s.raw(t, "GET", "/v1/catalog/nodes", "")
	if code != 200 || strings.Contains(body, `"Node":"n"`) {
		t.Errorf("nodes after refused registers: %d %s", code, body)
	}
}
