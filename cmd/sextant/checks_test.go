package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/cluster"
)

// probeLog is an HTTP target of many instances' checks (/i/ID), recording
// when each was probed; /i/ID answers 500 while ID is failing.
type probeLog struct {
	mu      sync.Mutex
	at      map[string][]time.Time
	failing sync.Map
}

func (p *probeLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/i/")
	p.mu.Lock()
	p.at[id] = append(p.at[id], time.Now())
	p.mu.Unlock()
	if _, bad := p.failing.Load(id); bad {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.Write([]byte("ok"))
}

// since returns each instance's probe times after t.
func (p *probeLog) since(t time.Time) map[string][]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string][]time.Time{}
	for id, ts := range p.at {
		for _, x := range ts {
			if x.After(t) {
				out[id] = append(out[id], x)
			}
		}
	}
	return out
}

// instanceChecks is an instance as answered, with its checks.
type instanceChecks struct {
	ID      string `json:"id"`
	Healthy bool   `json:"healthy"`
	Checks  []struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Output string `json:"output"`
	} `json:"checks"`
}

func getChecks(t *testing.T, base, id string) (instanceChecks, int) {
	t.Helper()
	a, err := call("GET", base+"/v1/instances/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	var in instanceChecks
	if a.status == 200 {
		if err := json.Unmarshal(a.body, &in); err != nil {
			t.Fatal(err)
		}
	}
	return in, a.status
}

// waitStatus waits (bounded) until instance id's first check has status
// on the server at base.
func waitStatus(t *testing.T, base, id, status string, within time.Duration) instanceChecks {
	t.Helper()
	var in instanceChecks
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		in, _ = getChecks(t, base, id)
		if len(in.Checks) > 0 && in.Checks[0].Status == status {
			return in
		}
	}
	t.Fatalf("%s: check not %s within %v: %+v", id, status, within, in)
	return in
}

// TestCheckSurvivesRestart: a check's state is durable: a server restarted
// on its data answers the critical status and output its check had, and
// goes on probing (recovery).
func TestCheckSurvivesRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and restarts a real server")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	target := &probeLog{at: map[string][]time.Time{}}
	target.failing.Store("r1", true)
	ts := httptest.NewServer(target)
	defer ts.Close()
	dir, addr := t.TempDir(), freeAddr(t)
	base := "http://" + addr
	srv := startServer(t, bin, dir, addr)
	defer func() { srv.Process.Kill(); srv.Wait() }()
	body := map[string]any{"id": "r1", "service": "web", "host": "127.0.0.1", "port": 1, "checks": []map[string]any{
		{"type": "http", "target": ts.URL + "/i/r1", "interval": "1s", "status": "passing"}}}
	if a, err := call("POST", base+"/v1/instances", body); err != nil || a.status != 200 {
		t.Fatalf("register: %v %d %s", err, a.status, a.body)
	}
	waitStatus(t, base, "r1", "critical", 20*time.Second)
	srv.Process.Signal(syscall.SIGTERM)
	srv.Wait()
	srv = startServer(t, bin, dir, addr)
	in, _ := getChecks(t, base, "r1")
	if in.Healthy || len(in.Checks) != 1 || in.Checks[0].Status != "critical" || !strings.Contains(in.Checks[0].Output, "500") {
		t.Fatalf("after a restart: %+v", in)
	}
	target.failing.Delete("r1")
	if in := waitStatus(t, base, "r1", "passing", 20*time.Second); !in.Healthy {
		t.Fatalf("passing but unhealthy: %+v", in)
	}
}

// TestBadChecks: bad check definitions are 400s naming the field, through
// the API and the CLI, and nothing is written.
func TestBadChecks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a real server")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	srv := startServer(t, bin, t.TempDir(), addr)
	defer func() { srv.Process.Kill(); srv.Wait() }()
	base := "http://" + addr
	for _, tc := range []struct {
		check map[string]any
		field string
	}{
		{map[string]any{"type": "icmp", "interval": "1s"}, "instances[0].checks[0].type"},
		{map[string]any{"type": "tcp", "interval": "0s"}, "instances[0].checks[0].interval"},
		{map[string]any{"type": "tcp", "interval": "100000h"}, "instances[0].checks[0].interval"},
		{map[string]any{"type": "http", "target": "http://[::1:80/x", "interval": "10s"}, "instances[0].checks[0].target"},
	} {
		a, err := call("POST", base+"/v1/instances", map[string]any{"instances": []map[string]any{
			{"id": "bad", "service": "web", "host": "127.0.0.1", "port": 1, "checks": []map[string]any{tc.check}}}})
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error struct{ Field, Message string }
		}
		json.Unmarshal(a.body, &e)
		if a.status != 400 || e.Error.Field != tc.field {
			t.Fatalf("%v: %d %s, want 400 naming %s", tc.check, a.status, a.body, tc.field)
		}
	}
	if _, status := getChecks(t, base, "bad"); status != 404 {
		t.Fatalf("a refused register was written: %d", status)
	}
	out, err := exec.Command(bin, "instances", "register", "--server", base, "--service", "web", "--host", "127.0.0.1", "--port", "1",
		"--check", "tcp,interval=0s").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "checks[0].interval") {
		t.Fatalf("CLI: %v %s", err, out)
	}
}

// TestClusterChecks: three servers over MariaDB; each instance's check is
// probed by exactly one of them (the target sees about one probe per
// interval, never four within two), a status change is seen through every
// server, and when the server judging some of them is killed, their checks
// move to the survivors.
func TestClusterChecks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three servers over MariaDB")
	}
	target := &probeLog{at: map[string][]time.Time{}}
	ts := httptest.NewServer(target)
	defer ts.Close()
	servers, _ := startCluster(t, 3, "")
	const n = 30
	var ids []string
	var batch []map[string]any
	for i := range n {
		id := fmt.Sprintf("chk-%02d", i)
		ids = append(ids, id)
		batch = append(batch, map[string]any{"id": id, "service": "checked", "host": "127.0.0.1", "port": 1000 + i,
			"checks": []map[string]any{{"type": "http", "target": ts.URL + "/i/" + id, "interval": "1s"}}})
	}
	if a, err := call("POST", servers[0].base()+"/v1/instances", map[string]any{"instances": batch}); err != nil || a.status != 200 {
		t.Fatalf("register: %v %d %s", err, a.status, a.body)
	}
	owners := map[string][]string{}
	for _, id := range ids {
		o := cluster.OwnerOf([]string{"s1", "s2", "s3"}, id)
		owners[o] = append(owners[o], id)
	}
	if len(owners["s2"]) == 0 {
		t.Fatalf("s2 judges none of the instances: %v", owners)
	}
	for _, id := range ids {
		waitStatus(t, servers[2].base(), id, "passing", 30*time.Second)
	}
	// Exactly one prober per check: over a window, about one probe per
	// interval, and never four within two intervals. One prober starts
	// each probe an interval (+-5%) after the last one started, so a probe
	// that reaches the target late under load (a busy machine delayed one
	// by 600 ms) can land close to the next, but four land within two
	// intervals only if a probe is late by most of an interval; two
	// probers put four there within about two intervals of overlap.
	onePerInterval := func(from time.Time, window time.Duration, which []string) {
		t.Helper()
		time.Sleep(window)
		got := target.since(from)
		for _, id := range which {
			ps := got[id]
			if len(ps) == 0 {
				t.Fatalf("%s not probed in %v", id, window)
			}
			if max := int(window/time.Second) + 2; len(ps) > max {
				t.Fatalf("%s probed %d times in %v at a 1s interval: by more than one server", id, len(ps), window)
			}
			for i := 3; i < len(ps); i++ {
				if span := ps[i].Sub(ps[i-3]); span < 2*time.Second {
					t.Fatalf("%s probed 4 times within %v at a 1s interval: by more than one server (%v)", id, span, ps)
				}
			}
		}
	}
	onePerInterval(time.Now(), 5*time.Second, ids)
	// A failing target turns critical, seen through every server.
	target.failing.Store(ids[0], true)
	for _, s := range servers {
		waitStatus(t, s.base(), ids[0], "critical", 30*time.Second)
	}
	target.failing.Delete(ids[0])
	// Kill s2: its checks move to the survivors once its lease (2s)
	// lapses, and are probed once per interval there.
	servers[1].kill()
	killed := time.Now()
	moved := owners["s2"]
	for _, id := range moved {
		for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if len(target.since(killed.Add(2 * time.Second))[id]) > 0 {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("%s (judged by the killed s2) not probed in 30s after the kill", id)
			}
		}
	}
	t.Logf("the checks of s2 (%d) probed by the survivors %v after it was killed", len(moved), time.Since(killed))
	onePerInterval(time.Now(), 5*time.Second, ids)
	waitStatus(t, servers[0].base(), ids[0], "passing", 30*time.Second)
	var probed atomic.Int64
	for _, ps := range target.since(time.Time{}) {
		probed.Add(int64(len(ps)))
	}
	t.Logf("%d probes of %d checks in all", probed.Load(), n)
}
