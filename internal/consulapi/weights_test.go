package consulapi_test

import (
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"

	"github.com/sextant-mesh/sextant/internal/acl"
)

// TestConsulWeights: a service registered without weights answers
// Consul's {1, 1} and has Sextant's weight 100; Consul's weight W is the
// Sextant weight 100×W, so Consul's proportions hold in Sextant's
// balancing; weights the instance weight cannot say (Warning apart from
// Passing, Passing over 655) answer back as given; an instance registered
// through Sextant's API answers its weight over 100.
func TestConsulWeights(t *testing.T) {
	s := newStack(t, acl.Options{}, "default")
	agent := s.client(t, "").Agent()
	cases := []struct {
		id     string
		given  *capi.AgentWeights
		answer capi.AgentWeights
		weight int
	}{
		{"none", nil, capi.AgentWeights{Passing: 1, Warning: 1}, 100},
		{"three", &capi.AgentWeights{Passing: 3, Warning: 3}, capi.AgentWeights{Passing: 3, Warning: 3}, 300},
		{"warning", &capi.AgentWeights{Passing: 10, Warning: 1}, capi.AgentWeights{Passing: 10, Warning: 1}, 1000},
		{"passing-only", &capi.AgentWeights{Passing: 2}, capi.AgentWeights{Passing: 2}, 200},
		{"large", &capi.AgentWeights{Passing: 1000, Warning: 1000}, capi.AgentWeights{Passing: 1000, Warning: 1000}, 65500},
	}
	for _, c := range cases {
		if err := agent.ServiceRegister(&capi.AgentServiceRegistration{ID: c.id, Name: "web", Port: 80, Weights: c.given}); err != nil {
			t.Fatalf("register %s: %v", c.id, err)
		}
	}
	all, err := agent.Services()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if got := all[c.id]; got == nil || got.Weights != c.answer {
			t.Errorf("%s: answered %+v, want weights %+v", c.id, got, c.answer)
		}
		if in := s.Registry.Instances().Get(c.id); in == nil || in.Weight != c.weight {
			t.Errorf("%s: instance %+v, want weight %d", c.id, in, c.weight)
		}
	}
	if err := agent.ServiceRegister(&capi.AgentServiceRegistration{Name: "web", Port: 80, Weights: &capi.AgentWeights{Passing: 0}}); err == nil {
		t.Error("Weights.Passing 0 taken, want Consul's refusal")
	}
	entries, _, err := s.client(t, "").Catalog().Service("web", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.ServiceID == "warning" && e.ServiceWeights != (capi.Weights{Passing: 10, Warning: 1}) {
			t.Errorf("catalog weights of %s: %+v", e.ServiceID, e.ServiceWeights)
		}
	}
}

// TestConsulContentHash: the agent's answer of one service carries
// Consul's own ContentHash for it (the value consul/api's
// TestAPI_AgentService expects of a Consul agent), a different one once
// the service changes, and a blocking read with the hash waits for that
// change.
func TestConsulContentHash(t *testing.T) {
	s := newStack(t, acl.Options{}, "default")
	agent := s.client(t, "").Agent()
	reg := &capi.AgentServiceRegistration{Name: "foo", Tags: []string{"bar", "baz"}, Port: 8000,
		Checks: capi.AgentServiceChecks{{TTL: "15s"}, {TTL: "30s"}}}
	if err := agent.ServiceRegister(reg); err != nil {
		t.Fatal(err)
	}
	got, qm, err := agent.Service("foo", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.ContentHash != "1d5d568c14309fa8" || qm.LastContentHash != got.ContentHash {
		t.Fatalf("ContentHash %q (header %q), want Consul's 1d5d568c14309fa8", got.ContentHash, qm.LastContentHash)
	}
	// An unchanged service holds the read for its wait.
	start := time.Now()
	if _, _, err := agent.Service("foo", &capi.QueryOptions{WaitHash: got.ContentHash, WaitTime: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("blocking read with an unchanged hash answered after %v, want its wait", d)
	}
	// Another instance of the service changes the service, not foo: the
	// read keeps waiting; foo's own change answers it with a new hash.
	woke := make(chan *capi.AgentService, 1)
	go func() {
		svc, _, err := agent.Service("foo", &capi.QueryOptions{WaitHash: got.ContentHash, WaitTime: 30 * time.Second})
		if err != nil {
			t.Error(err)
		}
		woke <- svc
	}()
	time.Sleep(100 * time.Millisecond)
	if err := agent.ServiceRegister(&capi.AgentServiceRegistration{ID: "foo-2", Name: "foo", Port: 8001}); err != nil {
		t.Fatal(err)
	}
	select {
	case svc := <-woke:
		t.Fatalf("woken by another instance's change: %+v", svc)
	case <-time.After(300 * time.Millisecond):
	}
	reg.Port = 8002
	if err := agent.ServiceRegister(reg); err != nil {
		t.Fatal(err)
	}
	select {
	case svc := <-woke:
		if svc == nil || svc.Port != 8002 || svc.ContentHash == got.ContentHash || svc.ContentHash == "" {
			t.Fatalf("woken with %+v, want port 8002 and a new hash", svc)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a change of the service did not wake the read with its old hash")
	}
}

// TestConsulSocketPath: a Unix socket service is kept as a record: no
// address, no port, its SocketPath answered back.
func TestConsulSocketPath(t *testing.T) {
	s := newStack(t, acl.Options{}, "default")
	agent := s.client(t, "").Agent()
	if err := agent.ServiceRegister(&capi.AgentServiceRegistration{Name: "foo2", SocketPath: "/tmp/foo2.sock"}); err != nil {
		t.Fatal(err)
	}
	all, err := agent.Services()
	if err != nil {
		t.Fatal(err)
	}
	if got := all["foo2"]; got == nil || got.SocketPath != "/tmp/foo2.sock" || got.Address != "" || got.Port != 0 {
		t.Errorf("foo2: %+v", got)
	}
	if err := agent.ServiceRegister(&capi.AgentServiceRegistration{Name: "foo3", Port: 80, SocketPath: "/tmp/foo3.sock"}); err == nil {
		t.Error("a Port and a SocketPath taken together")
	}
}
