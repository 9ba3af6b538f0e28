package main

import (
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"
)

// TestConsulIndexesSurviveRestart: a real server restarted on its data
// keeps each service's index (X-Consul-Index), not the registry's revision
// for all, so a blocking query holding the index it had waits its wait
// rather than waking every watcher.
func TestConsulIndexesSurviveRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and restarts a real server")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir, addr, consulAddr := t.TempDir(), freeAddr(t), freeAddr(t)
	srv := startServer(t, bin, dir, addr, "--consul-api", consulAddr)
	c := consulClient(t, consulAddr, "")
	for _, r := range []struct {
		id, name string
		port     int
	}{{"a-1", "alpha", 1}, {"b-1", "beta", 1}, {"a-2", "alpha", 2}, {"g-1", "gamma", 1}, {"b-1", "beta", 2}, {"a-1", "alpha", 3}, {"z-1", "zeta", 1}} {
		if err := c.Agent().ServiceRegister(&capi.AgentServiceRegistration{ID: r.id, Name: r.name, Address: "10.0.0.1", Port: r.port}); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"alpha", "beta", "gamma", "zeta"}
	index := func(name string) uint64 {
		t.Helper()
		_, meta, err := c.Health().Service(name, "", false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return meta.LastIndex
	}
	before := map[string]uint64{}
	for _, n := range names {
		before[n] = index(n)
	}
	stopServer(t, srv)
	srv = startServer(t, bin, dir, addr, "--consul-api", consulAddr)
	t.Cleanup(func() { stopServer(t, srv) })
	for _, n := range names {
		if got := index(n); got != before[n] {
			t.Errorf("%s: X-Consul-Index %d after the restart, %d before (all before: %v)", n, got, before[n], before)
		}
	}
	start := time.Now()
	_, meta, err := c.Health().Service("beta", "", false, &capi.QueryOptions{WaitIndex: before["beta"], WaitTime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if meta.LastIndex != before["beta"] || time.Since(start) < 900*time.Millisecond {
		t.Errorf("blocking query with the index of before the restart: index %d after %v, want %d after its 1s wait", meta.LastIndex, time.Since(start), before["beta"])
	}
}
