package main

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// curlStatus runs curl with args and returns the status it got and the
// body.
func curlStatus(t *testing.T, args ...string) (string, string) {
	t.Helper()
	out, err := exec.Command("curl", append([]string{"-sS", "--max-time", "20", "-w", "\n%{http_code}"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("curl %q: %v: %s", args, err, out)
	}
	s := string(out)
	i := strings.LastIndexByte(s, '\n')
	return s[i+1:], s[:i]
}

// TestBrowserDoor: without ACLs, on the loopback listener of the
// quick-start server, a web page of another site cannot write through its
// visitor's browser (a text/plain POST carrying its Origin), nor reach
// the API under its own DNS name (rebinding); the CLI's requests (no
// Origin) and the console's (same origin) still write. The Consul API
// is guarded the same way.
func TestBrowserDoor(t *testing.T) {
	addr, consul, data := freeAddr(t), freeAddr(t), t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runServer(ctx, serverFlags{data: data, http: addr, consulAPI: consul, consulNamespace: "default",
			logFormat: "text", logLevel: "error", logSize: 1 << 16, drain: 5 * time.Second, auditLog: "off"})
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitTrue(t, 20*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	base := "http://" + addr
	inst := `{"id":"evil-1","service":"orders","host":"10.0.0.1","port":80}`
	vs := "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: evil, namespace: default}\nspec: {hosts: [orders], http: [{route: [{destination: {host: orders}}]}]}\n"
	for _, c := range []struct {
		name string
		args []string
		want string
		in   string // in the body
		not  string // not in the body
	}{
		{"foreign page registers", []string{"-H", "Origin: http://evil.example", "-H", "Content-Type: text/plain", "--data", inst, base + "/v1/instances"}, "403", "cross-origin write refused", ""},
		{"foreign page applies config", []string{"-H", "Origin: http://evil.example", "-H", "Content-Type: text/plain", "--data-binary", vs, base + "/v1/config:apply"}, "403", "cross-origin write refused", ""},
		{"foreign page via fetch metadata", []string{"-H", "Sec-Fetch-Site: cross-site", "-H", "Content-Type: text/plain", "--data", inst, base + "/v1/instances"}, "403", "cross-origin", ""},
		{"rebound name reads", []string{"-H", "Host: evil.example:7400", base + "/v1/instances"}, "403", "evil.example", ""},
		{"consul, foreign page registers", []string{"-X", "PUT", "-H", "Origin: http://evil.example", "-H", "Content-Type: text/plain", "--data", `{"Name":"evil","Port":80}`, "http://" + consul + "/v1/agent/service/register"}, "403", "cross-origin", ""},
		{"consul, rebound name", []string{"-H", "Host: evil.example", "http://" + consul + "/v1/agent/services"}, "403", "evil.example", ""},
		{"nothing was written", []string{base + "/v1/instances"}, "200", "revision", "evil"},
		{"consul wrote nothing", []string{"http://" + consul + "/v1/agent/services"}, "200", "", "evil"},
		{"console registers", []string{"-H", "Origin: " + base, "-H", "Sec-Fetch-Site: same-origin", "-H", "Content-Type: application/json", "--data", inst, base + "/v1/instances"}, "200", `"ids":["evil-1"]`, ""},
		{"cli deregisters", []string{"-X", "DELETE", base + "/v1/instances/evil-1"}, "200", "revision", ""},
		{"localhost", []string{"-H", "Host: localhost:7400", base + "/v1/instances"}, "200", "revision", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, body := curlStatus(t, c.args...)
			if got != c.want || !strings.Contains(body, c.in) || (c.not != "" && strings.Contains(body, c.not)) {
				t.Fatalf("%s %s, want %s with %q and without %q", got, body, c.want, c.in, c.not)
			}
		})
	}
}
