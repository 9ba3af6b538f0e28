package consulapi_test

import (
	"testing"

	capi "github.com/hashicorp/consul/api"

	"github.com/sextant-mesh/sextant/internal/acl"
)

// TestConfigEntries: an entry is stored with Consul's indexes, a CAS on
// a stale index writes nothing, a delete with CAS removes it; a
// terminating gateway's "*" covers the typical services it does not
// name, and an ingress gateway's listeners give its gateway services.
func TestConfigEntries(t *testing.T) {
	s := newKVStack(t, acl.Options{}, "default")
	c := s.client(t, "")
	ce := c.ConfigEntries()
	sd := &capi.ServiceConfigEntry{Kind: capi.ServiceDefaults, Name: "web", Protocol: "http"}
	if ok, _, err := ce.Set(sd, nil); err != nil || !ok {
		t.Fatalf("set: %v %v", ok, err)
	}
	got, _, err := ce.Get(capi.ServiceDefaults, "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	web := got.(*capi.ServiceConfigEntry)
	if web.Protocol != "http" || web.ModifyIndex == 0 || web.CreateIndex != web.ModifyIndex {
		t.Fatalf("got %+v, want protocol http with its indexes", web)
	}
	sd.Protocol = "grpc"
	if ok, _, err := ce.CAS(sd, web.ModifyIndex+100, nil); err != nil || ok {
		t.Fatalf("stale cas: %v %v, want false", ok, err)
	}
	if ok, _, err := ce.CAS(sd, web.ModifyIndex, nil); err != nil || !ok {
		t.Fatalf("cas: %v %v, want true", ok, err)
	}
	got, _, _ = ce.Get(capi.ServiceDefaults, "web", nil)
	if e := got.(*capi.ServiceConfigEntry); e.Protocol != "grpc" || e.CreateIndex != web.CreateIndex || e.ModifyIndex <= web.ModifyIndex {
		t.Fatalf("after cas: %+v", e)
	}
	if _, _, err := ce.Set(&capi.ServiceConfigEntry{Kind: "nope", Name: "x"}, nil); err == nil {
		t.Error("unknown kind accepted")
	}
	if ok, _, err := ce.DeleteCAS(capi.ServiceDefaults, "web", got.GetModifyIndex(), nil); err != nil || !ok {
		t.Fatalf("delete cas: %v %v", ok, err)
	}
	if _, _, err := ce.Get(capi.ServiceDefaults, "web", nil); err == nil {
		t.Fatal("web still there after its delete")
	}

	// Gateway services.
	if _, err := c.Catalog().Register(&capi.CatalogRegistration{Node: "n", Address: "10.0.0.1",
		Service: &capi.AgentService{ID: "db", Service: "db", Port: 5432}}, nil); err != nil {
		t.Fatal(err)
	}
	tg := &capi.TerminatingGatewayConfigEntry{Kind: capi.TerminatingGateway, Name: "tgw",
		Services: []capi.LinkedService{{Name: "api", SNI: "a"}, {Name: "*", SNI: "any"}}}
	ig := &capi.IngressGatewayConfigEntry{Kind: capi.IngressGateway, Name: "igw",
		Listeners: []capi.IngressListener{{Port: 8080, Protocol: "http", Services: []capi.IngressService{{Name: "db", Hosts: []string{"db.example"}}}}}}
	for _, e := range []capi.ConfigEntry{tg, ig} {
		if ok, _, err := ce.Set(e, nil); err != nil || !ok {
			t.Fatalf("set %s: %v %v", e.GetName(), ok, err)
		}
	}
	gs, _, err := c.Catalog().GatewayServices("tgw", nil)
	if err != nil || len(gs) != 2 || gs[0].Service.Name != "api" || gs[0].FromWildcard || gs[1].Service.Name != "db" || !gs[1].FromWildcard || gs[1].SNI != "any" {
		t.Fatalf("tgw: %+v, %v; want api, then db from the wildcard", gs, err)
	}
	gs, _, err = c.Catalog().GatewayServices("igw", nil)
	if err != nil || len(gs) != 1 || gs[0].Port != 8080 || gs[0].Protocol != "http" || gs[0].Hosts[0] != "db.example" {
		t.Fatalf("igw: %+v, %v", gs, err)
	}
	if _, err := c.Catalog().Register(&capi.CatalogRegistration{Node: "n", Address: "10.0.0.1",
		Service: &capi.AgentService{ID: "igw", Service: "igw", Kind: capi.ServiceKindIngressGateway, Port: 8080}}, nil); err != nil {
		t.Fatal(err)
	}
	entries, _, err := c.Health().Ingress("db", false, nil)
	if err != nil || len(entries) != 1 || entries[0].Service.Service != "igw" {
		t.Fatalf("ingress of db: %+v, %v; want igw", entries, err)
	}
	if entries, _, _ := c.Health().Ingress("web", false, nil); len(entries) != 0 {
		t.Errorf("ingress of web: %+v, want none", entries)
	}
}
