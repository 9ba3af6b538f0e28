package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

const healthCheckedRule = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: orders
  annotations:
    sextant.io/health-check: '{"http": {"path": "/healthz"}, "interval": "%s", "unhealthy_threshold": %d, "healthy_threshold": 1}'
spec:
  host: orders
`

// checkedUpstream answers its name, and /healthz with status (when the
// Host header is the rule's host).
type checkedUpstream struct {
	name   string
	ln     net.Listener
	srv    *http.Server
	status atomic.Int32
	app    atomic.Int64
}

func (u *checkedUpstream) serve(t *testing.T, ln net.Listener) {
	u.ln = ln
	u.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			if r.Host != "orders" {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			w.WriteHeader(int(u.status.Load()))
			return
		}
		u.app.Add(1)
		io.WriteString(w, u.name)
	})}
	go u.srv.Serve(ln)
	srv := u.srv
	t.Cleanup(func() { srv.Close() })
}

func startCheckedUpstream(t *testing.T, name string) *checkedUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &checkedUpstream{name: name}
	u.status.Store(200)
	u.serve(t, ln)
	return u
}

// gatewayHealthFlags returns addr's health_flags in the gateway's
// /v1/clusters ("" if it is in no cluster).
func gatewayHealthFlags(t *testing.T, admin, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/v1/clusters")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Clusters []struct {
			Endpoints []struct {
				Address     string `json:"address"`
				HealthFlags string `json:"health_flags"`
			} `json:"endpoints"`
		} `json:"clusters"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	for _, c := range out.Clusters {
		for _, e := range c.Endpoints {
			if e.Address == addr {
				return e.HealthFlags
			}
		}
	}
	return ""
}

// TestGatewayActiveHealthCheckEndToEnd: a DestinationRule's
// sextant.io/health-check, applied with `sextant config apply`, makes the
// gateway check the endpoints itself. An endpoint whose health endpoint
// starts failing, and one whose listener closes, leave rotation within
// interval x unhealthy_threshold (and slack for a loaded machine), get no
// call afterwards, and return once healthy. A bad annotation is refused at
// apply, naming the field.
func TestGatewayActiveHealthCheckEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and upstreams")
	}
	api, proxy, admin, server := startMeshTLS(t, "")
	a, b := startCheckedUpstream(t, "a"), startCheckedUpstream(t, "b")
	for _, u := range []*checkedUpstream{a, b} {
		if _, err := api.Register(context.Background(), client.Instance{ID: u.name, Service: "orders", Host: "127.0.0.1",
			Port: u.ln.Addr().(*net.TCPAddr).Port}); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := runOn(t, server, fmt.Sprintf(healthCheckedRule, "soon", 2), "config", "apply", "-f", "-"); err == nil ||
		!strings.Contains(out+err.Error(), "metadata.annotations[sextant.io/health-check].interval") {
		t.Fatalf("bad annotation: %v\n%s", err, out)
	}
	const interval, threshold = 300 * time.Millisecond, 2
	if out, err := runOn(t, server, fmt.Sprintf(healthCheckedRule, interval, threshold), "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("config apply: %v\n%s", err, out)
	}
	waitTrue(t, 15*time.Second, func() bool {
		return gatewayHealthFlags(t, admin, a.ln.Addr().String()) == "healthy" && gatewayHealthFlags(t, admin, b.ln.Addr().String()) == "healthy"
	})
	waitTrue(t, 15*time.Second, func() bool { got := tally(t, proxy, 10, nil); return got["a"] > 0 && got["b"] > 0 })

	// leaves waits until u is out of rotation by its check, calling the
	// gateway meanwhile (checks run at interval once a cluster has calls),
	// and returns how long it took.
	leaves := func(u *checkedUpstream) time.Duration {
		start := time.Now()
		waitTrue(t, 30*time.Second, func() bool {
			tally(t, proxy, 2, nil)
			return strings.Contains(gatewayHealthFlags(t, admin, u.ln.Addr().String()), "/failed_active_hc")
		})
		return time.Since(start)
	}
	// The bound: interval x unhealthy_threshold (+10% jitter), and 3 s of
	// slack for a loaded machine.
	bound := interval*threshold*11/10 + 3*time.Second

	// a's health endpoint fails: out at its next check.
	a.status.Store(503)
	took := leaves(a)
	t.Logf("a (health endpoint failing) left rotation after %v", took)
	if took > bound {
		t.Errorf("a left rotation after %v, bound %v", took, bound)
	}
	n := a.app.Load()
	if got := tally(t, proxy, 40, nil); got["b"] != 40 {
		t.Fatalf("calls with a failing: %v", got)
	}
	if a.app.Load() != n {
		t.Fatalf("a got %d calls after it left rotation", a.app.Load()-n)
	}
	a.status.Store(200)
	waitTrue(t, 15*time.Second, func() bool { return tally(t, proxy, 4, nil)["a"] > 0 })

	// b's listener closes (its process died): out after threshold failed
	// connects.
	baddr := b.ln.Addr().String()
	b.srv.Close()
	took = leaves(b)
	t.Logf("b (listener closed) left rotation after %v", took)
	if took > bound {
		t.Errorf("b left rotation after %v, bound %v", took, bound)
	}
	if got := tally(t, proxy, 40, nil); got["a"] != 40 {
		t.Fatalf("calls with b dead: %v", got)
	}
	// b comes back on its address.
	var ln net.Listener
	waitTrue(t, 10*time.Second, func() bool {
		var err error
		ln, err = net.Listen("tcp", baddr)
		return err == nil
	})
	n = b.app.Load()
	b.serve(t, ln)
	waitTrue(t, 15*time.Second, func() bool { return tally(t, proxy, 4, nil)["b"] > 0 })
	if b.app.Load() == n {
		t.Fatal("b counted no call")
	}
}
