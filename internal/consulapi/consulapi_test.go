package consulapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	capi "github.com/hashicorp/consul/api"
	"go.uber.org/goleak"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/consulapi"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/cockroachdb/pebble.(*DB).maybeScheduleFlush"),
		goleak.IgnoreAnyFunction("internal/poll.runtime_pollWait"))
}

// stack is a real registry stack (apitest: pebble store, registry, ACL
// guard, Sextant's API) with the Consul API served beside it.
type stack struct {
	*apitest.Server
	consul *httptest.Server
	api    *consulapi.API
}

func newStack(t testing.TB, aclOpts acl.Options, ns string) *stack {
	t.Helper()
	s := apitest.StartWith(t, apitest.Options{ACL: aclOpts})
	api, err := consulapi.New(s.Registry, consulapi.Options{Namespace: ns, ACL: s.Guard, Addr: "127.0.0.1:8300", Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		api.Shutdown()
		srv.CloseClientConnections()
		srv.Close()
	})
	return &stack{Server: s, consul: srv, api: api}
}

func (s *stack) client(t *testing.T, token string) *capi.Client {
	t.Helper()
	cfg := capi.DefaultConfig()
	cfg.Address = strings.TrimPrefix(s.consul.URL, "http://")
	cfg.Token = token
	c, err := capi.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// raw sends a request to the Consul API and returns its status and body.
func (s *stack) raw(t *testing.T, method, path, body string, header ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, s.consul.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestClientRegisterDiscover: hashicorp's client registers services with
// tags, Meta and weights, and reads them back through the agent, catalog
// and health endpoints; Sextant's own API sees the same instances with
// tags as tag/T metadata; deregister removes them.
func TestClientRegisterDiscover(t *testing.T) {
	s := newStack(t, acl.Options{}, "shop")
	c := s.client(t, "")
	agent := c.Agent()
	for _, r := range []*capi.AgentServiceRegistration{
		{ID: "web-1", Name: "web", Tags: []string{"primary", "v1"}, Address: "10.0.0.1", Port: 8080,
			Meta: map[string]string{"env": "prod", "prometheus.io/port": "9102"}, Weights: &capi.AgentWeights{Passing: 10, Warning: 1}},
		{ID: "web-2", Name: "web", Tags: []string{"v1"}, Address: "10.0.0.2", Port: 8080, EnableTagOverride: true},
		{Name: "db", Address: "10.0.0.3", Port: 5432},
	} {
		if err := agent.ServiceRegister(r); err != nil {
			t.Fatalf("register %s: %v", r.Name, err)
		}
	}

	svcs, meta, err := c.Catalog().Services(nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{"web": {"primary", "v1"}, "db": {}}, svcs); diff != "" {
		t.Errorf("catalog services (-want +got):\n%s", diff)
	}
	if meta.LastIndex == 0 || !meta.KnownLeader {
		t.Errorf("query meta %+v: want an index and a known leader", meta)
	}

	cs, _, err := c.Catalog().Service("web", "primary", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].ServiceID != "web-1" || cs[0].ServiceAddress != "10.0.0.1" || cs[0].ServicePort != 8080 ||
		cs[0].ServiceMeta["prometheus.io/port"] != "9102" || cs[0].ServiceWeights.Passing != 10 || cs[0].Datacenter != "dc1" {
		t.Errorf("catalog service web tag primary: %+v", cs)
	}
	// The tag is matched without regard to case, as Consul does.
	if cs, _, _ := c.Catalog().Service("web", "PRIMARY", nil); len(cs) != 1 {
		t.Errorf("tag PRIMARY: %d entries, want 1", len(cs))
	}
	entries, _, err := c.Health().Service("web", "v1", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.Service.ID)
		if e.Checks.AggregatedStatus() != capi.HealthPassing {
			t.Errorf("%s: aggregated status %s", e.Service.ID, e.Checks.AggregatedStatus())
		}
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"web-1", "web-2"}) {
		t.Errorf("healthy web: %v", ids)
	}

	all, err := agent.Services()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 || all["db"] == nil || all["db"].Service != "db" || all["web-2"].Weights != (capi.AgentWeights{Passing: 1, Warning: 1}) || all["web-1"].Weights != (capi.AgentWeights{Passing: 10, Warning: 1}) {
		t.Errorf("agent services: %v", all)
	}
	one, _, err := agent.Service("web-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if one.Address != "10.0.0.1" || !slices.Equal(one.Tags, []string{"primary", "v1"}) || one.Meta["env"] != "prod" {
		t.Errorf("agent service web-1: %+v", one)
	}

	// Sextant's view: namespace shop, tags as metadata.
	in := s.Registry.Instances().Get("web-1")
	if in == nil || in.Namespace != "shop" || in.Weight != 1000 {
		t.Fatalf("web-1 in the registry: %+v", in)
	}
	if _, ok := in.Metadata.Get("tag/primary"); !ok {
		t.Errorf("web-1 metadata %v: no tag/primary", in.Metadata.Map())
	}

	if err := agent.ServiceDeregister("web-1"); err != nil {
		t.Fatal(err)
	}
	if err := agent.ServiceDeregister("web-1"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("second deregister: %v, want a 404", err)
	}
	cs, _, err = c.Catalog().Service("web", "", nil)
	if err != nil || len(cs) != 1 || cs[0].ServiceID != "web-2" {
		t.Errorf("web after deregister: %+v %v", cs, err)
	}
	if leader, err := c.Status().Leader(); err != nil || leader != "127.0.0.1:8300" {
		t.Errorf("status leader: %q %v", leader, err)
	}
	self, err := agent.Self()
	if err != nil || self["Config"]["Datacenter"] != "dc1" {
		t.Errorf("agent self: %v %v", self, err)
	}
}

// TestNamespaceBoundary: the API sees only its namespace, and never
// replaces or deletes an instance of another one through a shared id.
func TestNamespaceBoundary(t *testing.T) {
	s := newStack(t, acl.Options{}, "shop")
	other := &instance.Instance{ID: "x1", Namespace: "other", Service: "web", Host: "10.1.0.1", Port: 80, Weight: 100,
		Metadata: label.FromMap(map[string]string{"tag/primary": ""})}
	if _, err := s.Registry.Register(context.Background(), []*instance.Instance{other}); err != nil {
		t.Fatal(err)
	}
	c := s.client(t, "")
	if svcs, _, err := c.Catalog().Services(nil); err != nil || len(svcs) != 0 {
		t.Errorf("catalog services of shop: %v %v, want none", svcs, err)
	}
	err := c.Agent().ServiceRegister(&capi.AgentServiceRegistration{ID: "x1", Name: "web", Address: "10.0.0.1", Port: 80})
	if err == nil || !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), `namespace "other"`) {
		t.Errorf("register over another namespace's id: %v, want 409 naming it", err)
	}
	if err := c.Agent().ServiceDeregister("x1"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("deregister of another namespace's id: %v, want 404", err)
	}
	if in := s.Registry.Instances().Get("x1"); in == nil || in.Namespace != "other" {
		t.Errorf("x1 after: %+v", in)
	}
	// Another datacenter or Enterprise namespace is refused, not answered empty.
	if _, _, err := c.Catalog().Services(&capi.QueryOptions{Datacenter: "dc2"}); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("dc2: %v, want 400", err)
	}
	if _, _, err := c.Catalog().Services(&capi.QueryOptions{Namespace: "team"}); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("ns team: %v, want 400", err)
	}
}

// TestBlockingQueries: a query with an index waits until its service
// changes; one whose wait passes answers the same index; a namespace-wide
// query wakes on a change of the namespace only.
func TestBlockingQueries(t *testing.T) {
	s := newStack(t, acl.Options{}, "default")
	c := s.client(t, "")
	reg := func(id string) {
		t.Helper()
		if err := c.Agent().ServiceRegister(&capi.AgentServiceRegistration{ID: id, Name: "web", Address: "10.0.0.1", Port: 80}); err != nil {
			t.Fatal(err)
		}
	}
	reg("w1")
	_, meta, err := c.Health().Service("web", "", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	idx := meta.LastIndex

	// Times out: same index, after about WaitTime.
	start := time.Now()
	_, meta2, err := c.Health().Service("web", "", false, &capi.QueryOptions{WaitIndex: idx, WaitTime: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if meta2.LastIndex != idx || time.Since(start) < 250*time.Millisecond {
		t.Errorf("timed-out query: index %d after %v, want %d after ~300ms", meta2.LastIndex, time.Since(start), idx)
	}
	_, nsMeta, err := c.Catalog().Services(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, nsMeta2, err := c.Catalog().Services(&capi.QueryOptions{WaitIndex: nsMeta.LastIndex, WaitTime: 200 * time.Millisecond})
	if err != nil || nsMeta2.LastIndex != nsMeta.LastIndex {
		t.Errorf("timed-out catalog services: index %d (%v), want %d", nsMeta2.LastIndex, err, nsMeta.LastIndex)
	}

	// Wakes on a change: the register happens once the query waits.
	type result struct {
		entries []*capi.ServiceEntry
		meta    *capi.QueryMeta
		err     error
	}
	done := make(chan result, 1)
	go func() {
		e, m, err := c.Health().Service("web", "", false, &capi.QueryOptions{WaitIndex: idx, WaitTime: time.Minute})
		done <- result{e, m, err}
	}()
	nsDone := make(chan result, 1)
	go func() {
		_, m, err := c.Catalog().Services(&capi.QueryOptions{WaitIndex: nsMeta.LastIndex, WaitTime: time.Minute})
		nsDone <- result{nil, m, err}
	}()
	waitFor(t, func() bool { return s.Registry.Catalog().Waiters() >= 1 })
	// A change in another namespace wakes neither.
	if _, err := s.Registry.Register(context.Background(), []*instance.Instance{{ID: "o1", Namespace: "other", Service: "web", Host: "10.9.0.1", Port: 80, Weight: 100}}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-nsDone:
		t.Fatalf("catalog services woke on another namespace's change: %+v %v", r.meta, r.err)
	case r := <-done:
		t.Fatalf("health service woke on another namespace's change: %+v %v", r.meta, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	reg("w2")
	for _, ch := range []chan result{done, nsDone} {
		select {
		case r := <-ch:
			if r.err != nil || r.meta.LastIndex <= idx {
				t.Errorf("woken query: index %d (%v), want above %d", r.meta.LastIndex, r.err, idx)
			}
			if r.entries != nil && len(r.entries) != 2 {
				t.Errorf("woken health query: %d entries, want 2", len(r.entries))
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a blocking query did not wake within 30s of a change")
		}
	}
	// A bad index or wait is a 400.
	for _, q := range []string{"index=x", "wait=soon"} {
		if code, body, _ := s.raw(t, "GET", "/v1/health/service/web?"+q, ""); code != 400 || !strings.Contains(body, strings.Split(q, "=")[0]) {
			t.Errorf("%s: %d %q, want 400 naming it", q, code, body)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTokens: Consul's token carriers map to Sextant's tokens, with the
// same permissions as Sextant's API: a read token cannot register (403
// through the client), a write token of another namespace cannot either,
// no token and an unknown token are refused.
func TestTokens(t *testing.T) {
	s2 := newStack(t, acl.Options{Enabled: true}, "shop")
	hc := s2.Client()
	do := func(method, path, body, token string, v any) {
		t.Helper()
		req, _ := http.NewRequest(method, s2.URL+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		if v != nil {
			json.NewDecoder(resp.Body).Decode(v)
		}
	}
	var admin struct{ Secret string }
	do("POST", "/v1/acl/bootstrap", `{}`, "", &admin)
	do("POST", "/v1/acl/policies", `{"name":"shop-read","rules":[{"namespace":"shop","instances":"read"}]}`, admin.Secret, nil)
	do("POST", "/v1/acl/policies", `{"name":"shop-write","rules":[{"namespace":"shop","instances":"write"}]}`, admin.Secret, nil)
	do("POST", "/v1/acl/policies", `{"name":"other-write","rules":[{"namespace":"other","instances":"write"}]}`, admin.Secret, nil)
	token := func(policy string) string {
		var tok struct{ Secret string }
		do("POST", "/v1/acl/tokens", `{"policies":["`+policy+`"]}`, admin.Secret, &tok)
		return tok.Secret
	}
	read, write, other := token("shop-read"), token("shop-write"), token("other-write")
	svc := &capi.AgentServiceRegistration{ID: "w1", Name: "web", Address: "10.0.0.1", Port: 80}

	if err := s2.client(t, write).Agent().ServiceRegister(svc); err != nil {
		t.Fatalf("register with a write token: %v", err)
	}
	for name, tok := range map[string]string{"read": read, "other namespace": other, "none": "", "unknown": write[:len(write)-4] + "0000"} {
		err := s2.client(t, tok).Agent().ServiceRegister(svc)
		if err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("register with %s token: %v, want 403", name, err)
		}
	}
	if _, _, err := s2.client(t, "").Catalog().Services(nil); err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "Permission denied") {
		t.Errorf("read without a token: %v, want 403 Permission denied", err)
	}
	if _, _, err := s2.client(t, write[:len(write)-4]+"0000").Catalog().Services(nil); err == nil || !strings.Contains(err.Error(), "ACL not found") {
		t.Errorf("read with an unknown token: %v, want ACL not found", err)
	}
	svcs, _, err := s2.client(t, read).Catalog().Services(nil)
	if err != nil || len(svcs) != 1 {
		t.Errorf("read with a read token: %v %v", svcs, err)
	}
	// The three carriers.
	for _, h := range [][]string{{"X-Consul-Token", read}, {"Authorization", "Bearer " + read}} {
		if code, body, _ := s2.raw(t, "GET", "/v1/catalog/services", "", h...); code != 200 {
			t.Errorf("token in %s: %d %s", h[0], code, body)
		}
	}
	if code, body, _ := s2.raw(t, "GET", "/v1/catalog/services?token="+read, ""); code != 200 {
		t.Errorf("token in ?token=: %d %s", code, body)
	}
	// Status answers anyone, as Consul's does.
	if code, _, _ := s2.raw(t, "GET", "/v1/status/leader", ""); code != 200 {
		t.Errorf("status leader without a token: %d", code)
	}
}

// TestBadInput: every malformed register is a 400 naming what is wrong,
// and nothing is written.
func TestBadInput(t *testing.T) {
	s := newStack(t, acl.Options{}, "default")
	big := map[string]string{}
	for i := range 70 {
		big["k"+string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
	}
	bigMeta, _ := json.Marshal(map[string]any{"Name": "web", "Port": 80, "Meta": big})
	for _, tc := range []struct{ name, body, want string }{
		{"empty", ``, "empty body"},
		{"malformed", `{"Name":"web",`, "malformed JSON"},
		{"trailing", `{"Name":"web","Port":80} {}`, "unexpected data"},
		{"not an object", `["web"]`, "expected an object"},
		{"port type", `{"Name":"web","Port":"80"}`, "Port: expected an integer, got a string"},
		{"tags type", `{"Name":"web","Port":80,"Tags":"a"}`, "Tags: expected an array of strings"},
		{"meta type", `{"Name":"web","Port":80,"Meta":{"a":1}}`, "Meta: expected an object of strings"},
		{"unknown field", `{"Name":"web","Port":80,"Colour":"red"}`, `unknown field "Colour"`},
		{"same field twice", `{"Name":"web","name":"db","Port":80}`, "are the same field"},
		{"no name", `{"Port":80}`, "missing service name"},
		{"bad name", `{"Name":"Web_Server!","Port":80}`, `Name: "Web_Server!" is not a valid Sextant service name`},
		{"bad id", `{"ID":"a b","Name":"web","Port":80}`, `ID: "a b" is not a valid Sextant instance id`},
		{"port out of range", `{"Name":"web","Port":70000}`, "Port: 70000 is out of range"},
		{"meta under consul-", `{"Name":"web","Meta":{"consul-node":"n"}}`, `Meta: key "consul-node": the prefix "consul-" is reserved`},
		{"bad ports", `{"Name":"web","Ports":[{"Name":"a","Port":1},{"Name":"a","Port":2}]}`, `Ports[1].Name: "a" given twice`},
		{"bad address", `{"Name":"web","Port":80,"Address":"not an address"}`, "Address:"},
		{"bad tag", `{"Name":"web","Port":80,"Tags":["traefik.http.routers.x.rule=Host(a)"]}`, "Tags[0]:"},
		{"bad meta key", `{"Name":"web","Port":80,"Meta":{"a b":"x"}}`, `Meta: key "a b" is not a valid Sextant metadata key`},
		{"meta under tag/", `{"Name":"web","Port":80,"Meta":{"tag/x":"y"}}`, "send it in Tags"},
		{"meta too large", string(bigMeta), "Meta and Tags: 70 entries"},
		{"meta value too large", `{"Name":"web","Port":80,"Meta":{"k":"` + strings.Repeat("x", 5000) + `"}}`, `Meta["k"]: value of 5000 bytes`},
		{"weight zero", `{"Name":"web","Port":80,"Weights":{"Passing":0}}`, "Weights.Passing: 0 must be at least 1"},
		{"weight negative", `{"Name":"web","Port":80,"Weights":{"Passing":1,"Warning":-1}}`, "Weights.Warning: -1 must be at least 0"},
		{"connect sidecar of a sidecar", `{"Name":"web","Port":80,"Connect":{"SidecarService":{"Connect":{"SidecarService":{}}}}}`, "a sidecar has no sidecar"},
		{"connect sidecar bad", `{"Name":"web","Port":80,"Connect":{"SidecarService":{"Port":"x"}}}`, "Connect.SidecarService.Port: expected an integer"},
		{"kind", `{"Name":"web","Port":80,"Kind":"teapot"}`, `Kind: "teapot" is not a Consul service kind`},
		{"script check", `{"Name":"web","Port":80,"Check":{"ScriptArgs":["/bin/true"],"Interval":"10s"}}`, "Scripts are disabled on this agent"},
		{"check without type", `{"Name":"web","Port":80,"Check":{"Interval":"10s"}}`, "Check: no check type"},
		{"check bad interval", `{"Name":"web","Port":80,"Checks":[{"HTTP":"http://x/","Interval":"often"}]}`, `Checks[0].Interval: "often" is not a duration`},
		{"check bad status", `{"Name":"web","Port":80,"Check":{"TTL":"10s","Status":"fine"}}`, `Check.Status: "fine"`},
	} {
		code, body, _ := s.raw(t, "PUT", "/v1/agent/service/register", tc.body)
		if code != 400 || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %q, want 400 containing %q", tc.name, code, body, tc.want)
		}
	}
	if n := s.Registry.Instances().Len(); n != 0 {
		t.Errorf("%d instances written by bad registers", n)
	}
	// Writes need PUT, as in Consul.
	if code, _, h := s.raw(t, "GET", "/v1/agent/service/deregister/w1", ""); code != http.StatusMethodNotAllowed || h.Get("Allow") != "PUT" {
		t.Errorf("GET deregister: %d (Allow %q), want 405 allowing PUT", code, h.Get("Allow"))
	}
}

// TestUnsupported: what Sextant does not serve answers an error naming
// it, through Consul's own client too.
func TestUnsupported(t *testing.T) {
	s := newStack(t, acl.Options{}, "default")
	c := s.client(t, "")
	if _, _, err := c.KV().Get("a", nil); err == nil || !strings.Contains(err.Error(), "501") || !strings.Contains(err.Error(), "KV") {
		t.Errorf("KV get: %v, want 501 naming the KV store", err)
	}
	if _, _, err := c.Session().Create(&capi.SessionEntry{}, nil); err == nil || !strings.Contains(err.Error(), "sessions") {
		t.Errorf("session create: %v, want an error naming sessions", err)
	}
	for path, want := range map[string]string{
		"/v1/acl/token/self":     "ACL",
		"/v1/query":              "prepared queries",
		"/v1/catalog/nodes":      "nodes",
		"/v1/agent/members":      "gossip",
		"/v1/connect/intentions": "Connect",
		"/v1/nonsense":           "no endpoint",
	} {
		code, body, _ := s.raw(t, "GET", path, "")
		if code < 400 || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d %q, want an error naming %q", path, code, body, want)
		}
	}
}

// TestMaintenance: Consul's maintenance mode is Sextant's isolation: the
// instance is kept, shown with a maintenance check, and not passing.
func TestMaintenance(t *testing.T) {
	s := newStack(t, acl.Options{}, "default")
	c := s.client(t, "")
	if err := c.Agent().ServiceRegister(&capi.AgentServiceRegistration{ID: "w1", Name: "web", Address: "10.0.0.1", Port: 80}); err != nil {
		t.Fatal(err)
	}
	if err := c.Agent().EnableServiceMaintenance("w1", "deploy"); err != nil {
		t.Fatal(err)
	}
	if in := s.Registry.Instances().Get("w1"); in == nil || !in.Isolated {
		t.Fatalf("w1 not isolated: %+v", in)
	}
	all, _, err := c.Health().Service("web", "", false, nil)
	if err != nil || len(all) != 1 || all[0].Checks.AggregatedStatus() != capi.HealthMaint {
		t.Fatalf("web in maintenance: %+v %v", all, err)
	}
	if passing, _, _ := c.Health().Service("web", "", true, nil); len(passing) != 0 {
		t.Errorf("passing web in maintenance: %d entries", len(passing))
	}
	if err := c.Agent().DisableServiceMaintenance("w1"); err != nil {
		t.Fatal(err)
	}
	if passing, _, _ := c.Health().Service("web", "", true, nil); len(passing) != 1 {
		t.Errorf("passing web after maintenance: %d entries", len(passing))
	}
}

// TestFilterParameter: the filter expressions Consul's users write most,
// through the client, and a 400 for what is not understood.
func TestFilterParameter(t *testing.T) {
	s := newStack(t, acl.Options{}, "default")
	c := s.client(t, "")
	for _, r := range []*capi.AgentServiceRegistration{
		{ID: "w1", Name: "web", Tags: []string{"primary"}, Address: "10.0.0.1", Port: 80, Meta: map[string]string{"env": "prod", "prometheus.io/scrape": "true"}},
		{ID: "w2", Name: "web", Tags: []string{"canary"}, Address: "10.0.0.2", Port: 81, Meta: map[string]string{"env": "dev"}},
		{ID: "d1", Name: "db", Address: "10.0.0.3", Port: 5432},
	} {
		if err := c.Agent().ServiceRegister(r); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(cs []*capi.CatalogService) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.ServiceID)
		}
		slices.Sort(out)
		return out
	}
	for filter, want := range map[string][]string{
		`ServiceMeta.env == "prod"`:                                                 {"w1"},
		`ServiceMeta.env != prod`:                                                   {"w2"},
		`"canary" in ServiceTags`:                                                   {"w2"},
		`ServiceTags contains primary or ServicePort == 81`:                         {"w1", "w2"},
		`not (ServiceTags contains "primary")`:                                      {"w2"},
		`ServiceMeta["prometheus.io/scrape"] == "true"`:                             {"w1"},
		`ServiceMeta is not empty and ServiceAddress matches "^10\\.0\\.0\\.[12]$"`: {"w1", "w2"},
		`ServiceMeta.missing is empty`:                                              {"w1", "w2"},
	} {
		cs, _, err := c.Catalog().Service("web", "", &capi.QueryOptions{Filter: filter})
		if err != nil || !slices.Equal(ids(cs), want) {
			t.Errorf("filter %s: %v %v, want %v", filter, ids(cs), err, want)
		}
	}
	entries, _, err := c.Health().Service("web", "", false, &capi.QueryOptions{Filter: `Service.Meta.env == "dev"`})
	if err != nil || len(entries) != 1 || entries[0].Service.ID != "w2" {
		t.Errorf("health filter: %+v %v", entries, err)
	}
	svcs, _, err := c.Catalog().Services(&capi.QueryOptions{Filter: `ServiceTags contains "canary"`})
	if err != nil || len(svcs) != 1 || svcs["web"] == nil {
		t.Errorf("catalog services filter: %v %v", svcs, err)
	}
	agentSvcs, err := c.Agent().ServicesWithFilter(`Service == "db"`)
	if err != nil || len(agentSvcs) != 1 || agentSvcs["d1"] == nil {
		t.Errorf("agent services filter: %v %v", agentSvcs, err)
	}
	for _, bad := range []string{`ServiceMeta.env ==`, `Nope == 1`, `ServiceMeta.env ~= "x"`, `(ServiceID == "a"`, `ServicePort == eighty`, `ServiceTags == "x"`, `ServiceAddress matches "("`} {
		if _, _, err := c.Catalog().Service("web", "", &capi.QueryOptions{Filter: bad}); err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "filter") {
			t.Errorf("filter %q: %v, want a 400 about the filter", bad, err)
		}
	}
	// An unknown selector is refused even where nothing would be tested.
	if _, _, err := c.Catalog().Service("nosuch", "", &capi.QueryOptions{Filter: `Nope == 1`}); err == nil {
		t.Error("unknown selector on an empty service: no error")
	}
}

// TestChecks: Consul's checks become the instance's checks, with Consul's
// default ids; a TTL check starts critical and is passed, warned and
// failed through the client; health answers carry each check's status
// and output, and passing leaves out warning and critical instances.
func TestChecks(t *testing.T) {
	s := newStack(t, acl.Options{}, "default")
	c := s.client(t, "")
	agent := c.Agent()
	err := agent.ServiceRegister(&capi.AgentServiceRegistration{ID: "w1", Name: "web", Address: "127.0.0.1", Port: 8080,
		Check: &capi.AgentServiceCheck{TTL: "30s", DeregisterCriticalServiceAfter: "10m"}})
	if err != nil {
		t.Fatal(err)
	}
	err = agent.ServiceRegister(&capi.AgentServiceRegistration{ID: "w2", Name: "web", Address: "127.0.0.1", Port: 8081,
		Checks: capi.AgentServiceChecks{
			{HTTP: "http://127.0.0.1:8081/health", Interval: "10s", Timeout: "2s", Status: capi.HealthPassing, Header: map[string][]string{"X-Probe": {"1"}}},
			{TCP: "127.0.0.1:8081", Interval: "10s", Status: capi.HealthPassing, SuccessBeforePassing: 2, FailuresBeforeCritical: 3},
			{CheckID: "w2-grpc", Name: "grpc health", GRPC: "127.0.0.1:9090/orders.Orders", Interval: "5s", Status: capi.HealthPassing},
		}})
	if err != nil {
		t.Fatal(err)
	}
	w1 := s.Registry.Instances().Get("w1")
	if len(w1.Checks) != 1 || w1.Checks[0].ID != "service:w1" || w1.Checks[0].Type != instance.CheckTTL || w1.Checks[0].TTL != 30*time.Second ||
		w1.Checks[0].DeregisterCriticalServiceAfter != 10*time.Minute || w1.Healthy {
		t.Fatalf("w1: %+v healthy %v", w1.Checks, w1.Healthy)
	}
	w2 := s.Registry.Instances().Get("w2")
	var got []string
	for _, ch := range w2.Checks {
		got = append(got, ch.ID+" "+ch.Type+" "+ch.Target+" "+ch.GRPCService)
	}
	want := []string{"service:w2:1 http http://127.0.0.1:8081/health ", "service:w2:2 tcp 127.0.0.1:8081 ", "w2-grpc grpc 127.0.0.1:9090 orders.Orders"}
	if !slices.Equal(got, want) || w2.Checks[1].SuccessBeforePassing != 2 || w2.Checks[1].FailuresBeforeCritical != 3 {
		t.Fatalf("w2 checks: %q, want %q", got, want)
	}

	passingIDs := func() []string {
		t.Helper()
		entries, _, err := c.Health().Service("web", "", true, nil)
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
	if ids := passingIDs(); !slices.Equal(ids, []string{"w2"}) {
		t.Errorf("passing before the TTL check passed: %v, want [w2]", ids)
	}
	if err := agent.PassTTL("service:w1", "all good"); err != nil {
		t.Fatal(err)
	}
	if ids := passingIDs(); !slices.Equal(ids, []string{"w1", "w2"}) {
		t.Errorf("passing after PassTTL: %v", ids)
	}
	checks, _, err := c.Health().Checks("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	var ttl *capi.HealthCheck
	for _, ch := range checks {
		if ch.CheckID == "service:w1" {
			ttl = ch
		}
	}
	if ttl == nil || ttl.Status != capi.HealthPassing || ttl.Output != "all good" || ttl.ServiceID != "w1" || ttl.Type != "ttl" {
		t.Errorf("health checks: service:w1 is %+v", ttl)
	}
	if err := agent.UpdateTTL("service:w1", "slow", capi.HealthWarning); err != nil {
		t.Fatal(err)
	}
	if ids := passingIDs(); !slices.Equal(ids, []string{"w2"}) {
		t.Errorf("passing with w1 warning: %v", ids)
	}
	if in := s.Registry.Instances().Get("w1"); !in.Healthy {
		t.Error("w1 warning: not healthy in Sextant (warning counts as healthy)")
	}
	if err := agent.FailTTL("service:w1", "down"); err != nil {
		t.Fatal(err)
	}
	if in := s.Registry.Instances().Get("w1"); in.Healthy {
		t.Error("w1 failed: still healthy in Sextant")
	}
	all, err := agent.Checks()
	if err != nil || len(all) != 4 || all["service:w1"].Status != capi.HealthCritical || all["service:w1"].Output != "down" {
		t.Errorf("agent checks: %v %v", all, err)
	}
	// Only TTL checks are updated; an unknown check is a 404.
	if err := agent.PassTTL("service:w2:1", ""); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("pass of an http check: %v, want 400", err)
	}
	if err := agent.PassTTL("nosuch", ""); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("pass of an unknown check: %v, want 404", err)
	}
	// A check id of the user's is found in the namespace.
	err = agent.ServiceRegister(&capi.AgentServiceRegistration{ID: "w3", Name: "web", Address: "127.0.0.1", Port: 8082,
		Check: &capi.AgentServiceCheck{CheckID: "w3-alive", TTL: "30s"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.PassTTL("w3-alive", ""); err != nil {
		t.Errorf("pass of w3-alive: %v", err)
	}
	// Re-registering the same definition keeps the check's state.
	err = agent.ServiceRegister(&capi.AgentServiceRegistration{ID: "w3", Name: "web", Address: "127.0.0.1", Port: 8082,
		Check: &capi.AgentServiceCheck{CheckID: "w3-alive", TTL: "30s"}})
	if err != nil {
		t.Fatal(err)
	}
	if in := s.Registry.Instances().Get("w3"); in.Checks[0].Status != instance.StatusPassing {
		t.Errorf("w3 after re-register: %s, want passing kept", in.Checks[0].Status)
	}
	// Values the instance's checks refuse are 400s naming the Consul field.
	for body, want := range map[string]string{
		`{"Name":"web","Port":80,"Check":{"TTL":"10ms"}}`:                                            "Checks[0].ttl",
		`{"Name":"web","Port":80,"Check":{"HTTP":"ftp://x/","Interval":"10s"}}`:                      "scheme",
		`{"Name":"web","Port":80,"Check":{"TCP":"127.0.0.1:80","Interval":"10s","TCPUseTLS":true}}`:  "TCPUseTLS",
		`{"Name":"web","Port":80,"Check":{"HTTP":"http://x/","Interval":"10s","Body":"{}"}}`:         "Body",
		`{"Name":"web","Port":80,"Check":{"HTTP":"http://x/","Interval":"10s","TLSServerName":"x"}}`: "TLSServerName",
	} {
		if code, msg, _ := s.raw(t, "PUT", "/v1/agent/service/register", body); code != 400 || !strings.Contains(msg, want) {
			t.Errorf("%s: %d %q, want 400 naming %s", body, code, msg, want)
		}
	}
}
