package consulapi_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/consulapi"
)

// registerHealth registers web-ok (passing), web-warn (warning) and
// web-bad (critical) of service web, and db-1 (passing) of db, each with
// a TTL check set through the client.
func registerHealth(t *testing.T, c *capi.Client) {
	t.Helper()
	for _, r := range []struct{ id, name, status string }{
		{"web-ok", "web", capi.HealthPassing}, {"web-warn", "web", capi.HealthWarning},
		{"web-bad", "web", capi.HealthCritical}, {"db-1", "db", capi.HealthPassing},
	} {
		err := c.Agent().ServiceRegister(&capi.AgentServiceRegistration{ID: r.id, Name: r.name, Address: "10.0.0.1", Port: 80,
			Check: &capi.AgentServiceCheck{CheckID: "ttl-" + r.id, TTL: "1m"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Agent().UpdateTTL("ttl-"+r.id, "set by the test", r.status); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHealthState: /v1/health/state/{state} answers the checks in that
// state across every service (as monitoring polls health/state/critical),
// with filter and blocking queries; the agent node's serfHealth among
// them, as Consul lists it.
func TestHealthState(t *testing.T) {
	s := newStack(t, acl.Options{}, "default")
	c := s.client(t, "")
	registerHealth(t, c)
	ids := func(checks capi.HealthChecks) []string {
		var out []string
		for _, c := range checks {
			out = append(out, c.CheckID)
		}
		slices.Sort(out)
		return out
	}
	for state, want := range map[string][]string{
		capi.HealthCritical: {"ttl-web-bad"},
		capi.HealthWarning:  {"ttl-web-warn"},
		// serfHealth: the agent's node check, listed as Consul lists it.
		capi.HealthPassing: {"serfHealth", "ttl-db-1", "ttl-web-ok"},
		capi.HealthAny:     {"serfHealth", "ttl-db-1", "ttl-web-bad", "ttl-web-ok", "ttl-web-warn"},
	} {
		checks, meta, err := c.Health().State(state, nil)
		if err != nil {
			t.Fatalf("state %s: %v", state, err)
		}
		if got := ids(checks); !slices.Equal(got, want) {
			t.Errorf("state %s: %v, want %v", state, got, want)
		}
		if meta.LastIndex == 0 {
			t.Errorf("state %s: no index", state)
		}
	}
	checks, _, err := c.Health().State(capi.HealthAny, &capi.QueryOptions{Filter: `ServiceName == "db"`})
	if err != nil || !slices.Equal(ids(checks), []string{"ttl-db-1"}) {
		t.Errorf("any, filtered on db: %v (%v)", ids(checks), err)
	}
	if code, body, _ := s.raw(t, "GET", "/v1/health/state/broken", ""); code != 400 || !strings.Contains(body, "Invalid check state") {
		t.Errorf("state broken: %d %q, want 400", code, body)
	}

	// Blocking: wakes when a check turns critical.
	_, meta, err := c.Health().State(capi.HealthCritical, nil)
	if err != nil {
		t.Fatal(err)
	}
	woke := make(chan []string, 1)
	go func() {
		checks, _, err := c.Health().State(capi.HealthCritical, &capi.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: time.Minute})
		if err != nil {
			t.Error(err)
		}
		woke <- ids(checks)
	}()
	// (The query wakes on a change after its index, whether it is
	// parked yet or not.)
	if err := c.Agent().UpdateTTL("ttl-db-1", "down", capi.HealthCritical); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-woke:
		if !slices.Equal(got, []string{"ttl-db-1", "ttl-web-bad"}) {
			t.Errorf("woken critical checks: %v", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the blocking query did not wake within 30s of a check turning critical")
	}
}

// TestAgentHealth: the agent's health endpoints answer Consul's JSON and
// the aggregated health in the status code, as hashicorp's client reads
// them; ?format=text the status alone.
func TestAgentHealth(t *testing.T) {
	s := newStack(t, acl.Options{}, "default")
	c := s.client(t, "")
	registerHealth(t, c)
	agent := c.Agent()
	for id, want := range map[string]string{"web-ok": "passing", "web-warn": "warning", "web-bad": "critical"} {
		status, info, err := agent.AgentHealthServiceByID(id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if status != want || info == nil || info.AggregatedStatus != want || info.Service == nil || info.Service.ID != id ||
			info.Service.Service != "web" || len(info.Checks) != 1 || info.Checks[0].CheckID != "ttl-"+id {
			t.Errorf("%s: %q %+v, want %s", id, status, info, want)
		}
	}
	status, info, err := agent.AgentHealthServiceByID("nobody")
	if err != nil || status != capi.HealthCritical || info != nil {
		t.Errorf("unknown id: %q %+v %v, want critical with no info", status, info, err)
	}
	status, infos, err := agent.AgentHealthServiceByName("web")
	if err != nil || status != capi.HealthCritical || len(infos) != 3 {
		t.Errorf("web by name: %q, %d entries, %v; want critical (the worst) and 3", status, len(infos), err)
	}
	status, infos, err = agent.AgentHealthServiceByName("db")
	if err != nil || status != capi.HealthPassing || len(infos) != 1 || infos[0].Service.ID != "db-1" {
		t.Errorf("db by name: %q %+v %v", status, infos, err)
	}
	if status, infos, err = agent.AgentHealthServiceByName("nothing"); err != nil || status != capi.HealthCritical || infos != nil {
		t.Errorf("unknown name: %q %+v %v", status, infos, err)
	}
	for _, tc := range []struct {
		path string
		code int
		body string
	}{
		{"/v1/agent/health/service/id/web-ok?format=text", 200, "passing"},
		{"/v1/agent/health/service/id/web-warn?format=text", 429, "warning"},
		{"/v1/agent/health/service/id/web-bad?format=text", 503, "critical"},
		{"/v1/agent/health/service/id/nobody?format=text", 404, "ServiceId nobody not found"},
		{"/v1/agent/health/service/name/web?format=text", 503, "critical"},
		{"/v1/agent/health/service/name/db?format=text", 200, "passing"},
		{"/v1/agent/health/service/name/nothing?format=text", 404, "ServiceName nothing Not Found"},
	} {
		code, body, _ := s.raw(t, "GET", tc.path, "")
		if code != tc.code || body != tc.body {
			t.Errorf("%s: %d %q, want %d %q", tc.path, code, body, tc.code, tc.body)
		}
	}
	// Maintenance is critical (503), as in Consul.
	if err := agent.EnableServiceMaintenance("db-1", "upgrade"); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := s.raw(t, "GET", "/v1/agent/health/service/id/db-1?format=text", ""); code != 503 || body != "maintenance" {
		t.Errorf("db-1 in maintenance: %d %q, want 503 maintenance", code, body)
	}
}

// TestScopeAndMethods: ?dc= of another datacenter is refused with Consul's
// words on every endpoint, status included; a known path with the wrong
// method is a 405 with Allow, register included; an interval of 0s is
// refused as Consul refuses it.
func TestScopeAndMethods(t *testing.T) {
	s := newStack(t, acl.Options{}, "default")
	c := s.client(t, "")
	for _, p := range []string{"/v1/status/leader", "/v1/status/peers", "/v1/catalog/services", "/v1/catalog/datacenters",
		"/v1/health/state/any", "/v1/agent/health/service/name/web", "/v1/health/service/web"} {
		code, body, _ := s.raw(t, "GET", p+"?dc=elsewhere", "")
		if code != 400 || !strings.Contains(body, "No path to datacenter") {
			t.Errorf("%s?dc=elsewhere: %d %q, want 400 No path to datacenter", p, code, body)
		}
		if code, body, _ := s.raw(t, "GET", p+"?dc=dc1", ""); code == 400 {
			t.Errorf("%s?dc=dc1: %d %q", p, code, body)
		}
	}
	if _, err := c.Status().LeaderWithQueryOptions(&capi.QueryOptions{Datacenter: "elsewhere"}); err == nil || !strings.Contains(err.Error(), "No path to datacenter") {
		t.Errorf("the client's leader of another datacenter: %v, want No path to datacenter", err)
	}

	for _, tc := range []struct{ method, path, allow string }{
		{"GET", "/v1/agent/service/register", "PUT"},
		{"POST", "/v1/agent/service/register", "PUT"},
		{"HEAD", "/v1/agent/service/register", "PUT"},
		{"GET", "/v1/agent/service/deregister/w1", "PUT"},
		{"PUT", "/v1/agent/services", "GET"},
		{"DELETE", "/v1/agent/service/w1", "GET"},
		{"PUT", "/v1/health/state/critical", "GET"},
		{"PUT", "/v1/agent/health/service/id/w1", "GET"},
		{"POST", "/v1/status/leader", "GET"},
	} {
		code, _, h := s.raw(t, tc.method, tc.path, "")
		if code != http.StatusMethodNotAllowed || h.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d (Allow %q), want 405 allowing %s", tc.method, tc.path, code, h.Get("Allow"), tc.allow)
		}
	}

	for _, tc := range []struct{ body, want string }{
		{`{"Name":"web","Port":80,"Check":{"HTTP":"http://x/","Interval":"0s"}}`, `Check.Interval: must be > 0 for an HTTP check, got "0s"`},
		{`{"Name":"web","Port":80,"Check":{"TCP":"x:1"}}`, `Check.Interval: required for a TCP check`},
	} {
		code, body, _ := s.raw(t, "PUT", "/v1/agent/service/register", tc.body)
		if code != 400 || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %q, want 400 containing %q", tc.body, code, body, tc.want)
		}
	}
}

// TestKeepSelf: a server serving the API lists itself as service consul
// (catalog, health, its TTL heartbeat) while it runs, and leaves when it
// stops.
func TestKeepSelf(t *testing.T) {
	s := newStack(t, acl.Options{}, "default")
	c := s.client(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.api.KeepSelf(ctx, "127.0.0.1", 8500) }()
	defer func() {
		cancel()
		<-done
	}()
	var entries []*capi.ServiceEntry
	deadline := time.Now().Add(30 * time.Second)
	for len(entries) == 0 && time.Now().Before(deadline) {
		var err error
		if entries, _, err = c.Health().Service("consul", "", true, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(entries) != 1 || entries[0].Service.ID != consulapi.SelfID("127.0.0.1", 8500) || entries[0].Service.Port != 8500 ||
		entries[0].Service.Address != "127.0.0.1" {
		t.Fatalf("service consul: %+v", entries)
	}
	svcs, _, err := c.Catalog().Services(nil)
	if _, ok := svcs["consul"]; err != nil || !ok {
		t.Errorf("catalog services %v (%v): want consul", svcs, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil // for the deferred receive
	if entries, _, err := c.Health().Service("consul", "", false, nil); err != nil || len(entries) != 0 {
		t.Errorf("service consul after the stop: %d entries (%v), want none", len(entries), err)
	}
}

// TestDuplicateKeys: a register or check update body that gives a key
// twice in one object is a 400 naming it and its line, and writes nothing
// (before, {"Name":"a","Name":"b"} registered b).
func TestDuplicateKeys(t *testing.T) {
	s := newStack(t, acl.Options{}, "default")
	for _, tc := range []struct{ path, body, want string }{
		{"/v1/agent/service/register", `{"Name":"a","Port":80,"Name":"b"}`, `Name: key "Name" given twice (line 1)`},
		{"/v1/agent/service/register", "{\"Name\":\"a\",\"Port\":80,\n\"Meta\":{\"env\":\"prod\",\n\"env\":\"dev\"}}", `Meta.env: key "env" given twice (line 3)`},
		{"/v1/agent/service/register", `{"Name":"a","Port":80,"Check":{"TTL":"10s","TTL":"20s"}}`, `Check.TTL: key "TTL" given twice`},
	} {
		code, body, _ := s.raw(t, "PUT", tc.path, tc.body)
		if code != 400 || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %q, want 400 containing %q", tc.body, code, body, tc.want)
		}
	}
	if n := s.Registry.Instances().Len(); n != 0 {
		t.Errorf("%d instances written", n)
	}
	if code, _, _ := s.raw(t, "PUT", "/v1/agent/service/register", `{"ID":"w","Name":"web","Port":80,"Check":{"CheckID":"c","TTL":"1m"}}`); code != 200 {
		t.Fatalf("register: %d", code)
	}
	code, body, _ := s.raw(t, "PUT", "/v1/agent/check/update/c", `{"Status":"passing","Status":"critical"}`)
	if code != 400 || !strings.Contains(body, `key "Status" given twice`) {
		t.Errorf("check update: %d %q", code, body)
	}
}
