package consulapi_test

import (
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"

	"github.com/sextant-mesh/sextant/internal/consulapi"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// newStackIn is newStack on the store in dir, stopped by the returned
// function (a restart starts another on the same dir).
func newStackIn(t *testing.T, dir string) (*stack, func()) {
	t.Helper()
	s := apitest.StartWith(t, apitest.Options{Dir: dir})
	api, err := consulapi.New(s.Registry, consulapi.Options{Addr: "127.0.0.1:8300", Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	stop := func() {
		api.Shutdown()
		srv.CloseClientConnections()
		srv.Close()
		s.Close()
	}
	t.Cleanup(stop)
	return &stack{Server: s, consul: srv, api: api}, stop
}

// TestIndexesSurviveRestart: each service keeps its own index across a
// restart (not the registry's revision for all), so X-Consul-Index does
// not jump and a blocking query holding the index it had does not wake.
func TestIndexesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	s, stop := newStackIn(t, dir)
	c := s.client(t, "")
	// Interleaved, so that each service's last change is at its own revision.
	for _, r := range []struct {
		id, name string
		port     int
	}{{"a-1", "alpha", 1}, {"b-1", "beta", 1}, {"a-2", "alpha", 2}, {"g-1", "gamma", 1}, {"b-1", "beta", 2}, {"a-2", "alpha", 3}, {"g-2", "gamma", 2}, {"z-1", "zeta", 9}} {
		if err := c.Agent().ServiceRegister(&capi.AgentServiceRegistration{ID: r.id, Name: r.name, Address: "10.0.0.1", Port: r.port}); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"alpha", "beta", "gamma"}
	index := func(c *capi.Client, name string) uint64 {
		t.Helper()
		_, meta, err := c.Health().Service(name, "", false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return meta.LastIndex
	}
	before := map[string]uint64{}
	for _, n := range names {
		before[n] = index(c, n)
	}
	if before["alpha"] == before["beta"] || before["beta"] == before["gamma"] {
		t.Fatalf("indexes before the restart %v: want each service's own", before)
	}

	stop()
	s, _ = newStackIn(t, dir)
	c = s.client(t, "")
	for _, n := range names {
		if got := index(c, n); got != before[n] {
			t.Errorf("%s: X-Consul-Index %d after the restart, %d before", n, got, before[n])
		}
		code, _, h := s.raw(t, "GET", "/v1/catalog/service/"+n, "")
		if code != 200 || h.Get("X-Consul-Index") != strconv.FormatUint(before[n], 10) {
			t.Errorf("%s: catalog answers %d with X-Consul-Index %q, want %d", n, code, h.Get("X-Consul-Index"), before[n])
		}
	}
	// A blocking query with the index held before the restart waits its
	// whole wait and answers the same index.
	start := time.Now()
	_, meta, err := c.Health().Service("beta", "", false, &capi.QueryOptions{WaitIndex: before["beta"], WaitTime: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if meta.LastIndex != before["beta"] || time.Since(start) < 250*time.Millisecond {
		t.Errorf("blocking query with the old index: index %d after %v, want %d after the wait", meta.LastIndex, time.Since(start), before["beta"])
	}
	// A change still wakes it.
	if err := c.Agent().ServiceRegister(&capi.AgentServiceRegistration{ID: "b-2", Name: "beta", Address: "10.0.0.2", Port: 1}); err != nil {
		t.Fatal(err)
	}
	if got := index(c, "beta"); got <= before["beta"] {
		t.Errorf("beta after a register: index %d, want above %d", got, before["beta"])
	}
}
