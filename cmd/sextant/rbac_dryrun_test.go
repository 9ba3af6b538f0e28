package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// TestConfigApplyDryRunRecordedCalls: calls from two SPIFFE identities
// through an ISTIO_MUTUAL gateway that enforces no policy yet; then
// "sextant config apply --dry-run" of an AuthorizationPolicy allowing only
// one of them prints, for the registered gateway, exactly the other
// identity's calls as the ones it would start denying, and applies
// nothing: the policy is not stored and the other identity is still
// served.
func TestConfigApplyDryRunRecordedCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway with an identity, workload certificates")
	}
	tlsAddr := freeAddr(t)
	api, _, _, server := startMeshWith(t, tlsAddr, 30*time.Second, func(f *gatewayFlags, server string) {
		f.registry, f.identityNS, f.identitySA, f.node = server, "edge", "sextant-gateway", "dry-run-gateway"
	})
	ctx := context.Background()
	frontend, batch, td, tp := meshWorkloads(t, api, tlsAddr)
	// The Gateway and its route, without the policy.
	noPolicy, _, _ := strings.Cut(meshGateway, "---\napiVersion: security.istio.io/v1")
	if _, err := api.ApplyConfig(ctx, []byte(fmt.Sprintf(noPolicy, tp)), false); err != nil {
		t.Fatal(err)
	}
	call := func(c *client.Certificate, path string) (int, error) {
		kp, err := tls.X509KeyPair([]byte(c.CertificateChain), []byte(c.KeyPEM))
		if err != nil {
			t.Fatal(err)
		}
		conf := &tls.Config{ServerName: "shop.example.com", InsecureSkipVerify: true, Certificates: []tls.Certificate{kp}}
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: conf, ForceAttemptHTTP2: true,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, tlsAddr)
			}}}
		defer hc.CloseIdleConnections()
		resp, err := hc.Get("https://shop.example.com" + path)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	waitTrue(t, 30*time.Second, func() bool {
		code, err := call(&frontend, "/buy")
		return err == nil && code == 200
	})
	for range 2 {
		if code, err := call(&frontend, "/buy"); err != nil || code != 200 {
			t.Fatalf("frontend: %d %v", code, err)
		}
	}
	const batchCalls = 3
	for range batchCalls {
		if code, err := call(&batch, "/buy?item=7"); err != nil || code != 200 {
			t.Fatalf("batch before the dry run: %d %v", code, err)
		}
	}

	// The gateway registered itself (the server asks the registered ones).
	waitTrue(t, 15*time.Second, func() bool {
		resp, err := http.Get(server + "/v1/instances?selector=sextant.role%3Dgateway")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var l struct {
			Instances []struct {
				Metadata map[string]string `json:"metadata"`
			} `json:"instances"`
		}
		return json.NewDecoder(resp.Body).Decode(&l) == nil && len(l.Instances) == 1 && l.Instances[0].Metadata["sextant.admin"] != ""
	})

	policy := fmt.Sprintf(`apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: edge-callers}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: ALLOW
  rules:
  - from: [{source: {principals: ["%s/ns/default/sa/frontend"]}}]
`, td)
	out, err := runOn(t, server, policy, "config", "apply", "-f", "-", "--dry-run")
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	t.Logf("dry run:\n%s", out)
	batchID, frontendID := "spiffe://"+td+"/ns/default/sa/batch", "spiffe://"+td+"/ns/default/sa/frontend"
	if !strings.Contains(out, "authorizationpolicy default/edge-callers created (dry run)") ||
		!strings.Contains(out, "proxyless gRPC calls are not recorded") {
		t.Fatalf("dry run output:\n%s", out)
	}
	if !regexp.MustCompile(`gateway \S+ \(default/sextant-gateway, http://[^)]+\): \d+ calls read, ` + fmt.Sprint(batchCalls) + ` newly denied, 0 newly allowed, 0 undetermined`).MatchString(out) {
		t.Fatalf("the gateway's summary: want %d newly denied, none undetermined:\n%s", batchCalls, out)
	}
	// Exactly one group: batch's calls (the path without its query).
	group := regexp.MustCompile(`(?m)^\s+` + fmt.Sprint(batchCalls) + `\s+default/orders\s+\S+\s+` + regexp.QuoteMeta(batchID) +
		`\s+GET\s+/buy\s+` + fmt.Sprint(tp) + `\s+sextant\.rbac\.allow: no policy allowed the call$`)
	if !group.MatchString(out) || strings.Contains(out, frontendID) || strings.Count(out, "sextant.rbac.allow:") != 1 ||
		strings.Contains(out, "could not be asked") {
		t.Fatalf("want exactly batch's %d calls as newly denied, frontend's not at all:\n%s", batchCalls, out)
	}

	// Nothing was applied: no policy stored, batch still served.
	list, err := api.ListConfig(ctx, "AuthorizationPolicy", "")
	if err != nil || len(list.Items) != 0 {
		t.Fatalf("a dry run stored policies: %v %v", list.Items, err)
	}
	if code, err := call(&batch, "/buy"); err != nil || code != 200 {
		t.Fatalf("batch after the dry run: %d %v", code, err)
	}
}
