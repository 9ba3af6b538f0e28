package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// pushLatency reads the server's sextant_push_{sent,acked}_seconds sums and
// counts by type: "acked clusters sum" -> value.
func pushLatency(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, kind := range []string{"sent", "acked"} {
			for _, part := range []string{"sum", "count"} {
				prefix := "sextant_push_" + kind + "_seconds_" + part + `{type="`
				if !strings.HasPrefix(line, prefix) {
					continue
				}
				typ, rest, _ := strings.Cut(line[len(prefix):], `"} `)
				v, err := strconv.ParseFloat(rest, 64)
				if err != nil {
					t.Fatalf("metrics line %q: %v", line, err)
				}
				out[kind+" "+typ+" "+part] = v
			}
		}
	}
	return out
}

// synced reports whether push status shows node's stream with every type
// it asked for ACKed and nothing pending.
func synced(base, node string) bool {
	resp, err := http.Get(base + "/v1/push/status?node=" + node)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var st struct {
		Subscribers []struct {
			Types []struct {
				VersionSent  string `json:"version_sent"`
				VersionAcked string `json:"version_acked"`
				Pending      int    `json:"pending"`
			}
		}
	}
	if json.NewDecoder(resp.Body).Decode(&st) != nil || len(st.Subscribers) != 1 || len(st.Subscribers[0].Types) == 0 {
		return false
	}
	for _, ts := range st.Subscribers[0].Types {
		if ts.Pending != 0 || ts.VersionSent == "" || ts.VersionSent != ts.VersionAcked {
			return false
		}
	}
	return true
}

// TestPushLatencyFromTheChange: on an idle server with a gateway
// subscribed, registering one instance adds milliseconds to the push
// latency histograms (commit -> sent, commit -> ACK), not the time since
// an older change or since the server started; before and after a restart
// of the server (same store), the gateway reconnecting.
func TestPushLatencyFromTheChange(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server restarted, gateway")
	}
	httpAddr, xdsAddr := freeAddr(t), freeAddr(t)
	base := "http://" + httpAddr
	data := t.TempDir()
	start := func() func() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- runServer(ctx, serverFlags{data: data, http: httpAddr, xds: xdsAddr, logFormat: "text",
				logLevel: "error", logSize: 1 << 16, drain: time.Second})
		}()
		waitTrue(t, 60*time.Second, func() bool {
			resp, err := http.Get(base + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("server: %v", err)
			}
		}
	}
	stop := start()
	defer func() { stop() }()
	const node = "latency-gateway"
	gctx, gcancel := context.WithCancel(context.Background())
	gdone := make(chan error, 1)
	go func() {
		gdone <- runGateway(gctx, gatewayFlags{xds: xdsAddr, listen: freeAddr(t), admin: freeAddr(t),
			data: filepath.Join(t.TempDir(), "gw"), node: node, service: "sextant-gateway",
			maxBody: 1 << 20, retainAge: time.Hour, retainBytes: 1 << 30, drain: time.Second,
			logFormat: "text", logLevel: "error"})
	}()
	defer func() {
		gcancel()
		if err := <-gdone; err != nil {
			t.Errorf("gateway: %v", err)
		}
	}()
	api, err := client.New(base)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	register := func(svc, id string) {
		t.Helper()
		if _, err := api.Register(ctx, client.Instance{ID: id, Service: svc, Host: "127.0.0.1", Port: 8080}); err != nil {
			t.Fatal(err)
		}
	}
	// check registers one instance of a new service on an idle server and
	// checks what it added to the histograms.
	check := func(when, svc string) {
		t.Helper()
		// An endpoint change first: the gateway's answer to its response
		// is an ACK; a later request of the gateway naming new endpoints
		// carries the same nonce again, which is no second ACK.
		register("warm", "warm-"+svc)
		waitTrue(t, 30*time.Second, func() bool { return synced(base, node) })
		// Idle: whatever a stale timestamp would add grows meanwhile.
		time.Sleep(3 * time.Second)
		before := pushLatency(t, base)
		register(svc, svc+"-1")
		waitTrue(t, 30*time.Second, func() bool {
			return synced(base, node) && pushLatency(t, base)["acked clusters count"] > before["acked clusters count"]
		})
		after := pushLatency(t, base)
		for _, kind := range []string{"sent", "acked"} {
			for _, typ := range []string{"clusters", "endpoints", "listeners", "routes"} {
				k := kind + " " + typ
				n := after[k+" count"] - before[k+" count"]
				if n == 0 {
					continue
				}
				mean := (after[k+" sum"] - before[k+" sum"]) / n
				t.Logf("%s: %s: %v observations, mean %.1f ms", when, k, n, mean*1000)
				if mean > 1 {
					t.Errorf("%s: one registration added %v observations of %s_seconds{type=%q} averaging %.2f s: want milliseconds",
						when, n, "sextant_push_"+kind, typ, mean)
				}
			}
		}
	}
	register("warm", "warm-1")
	// A config change that touches no service's clusters or routes (a
	// mesh-wide security policy): its commit time must not be taken as
	// the origin of the next push.
	if _, err := api.ApplyConfig(ctx, []byte(`
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: istio-system}
spec: {mtls: {mode: PERMISSIVE}}
`), false); err != nil {
		t.Fatal(err)
	}
	check("first start", "web")
	stop()
	stop = start()
	if _, err := api.ApplyConfig(ctx, []byte(`
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: other}
spec: {mtls: {mode: PERMISSIVE}}
`), false); err != nil {
		t.Fatal(err)
	}
	check("after a restart", "api")
}
