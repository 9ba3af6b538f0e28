package sidecar_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/debian"
)

// walkthroughSteps checks each command of docs/sidecar.md's walkthrough,
// keyed by the line as written: what it prints once the sidecars are up
// (a foreground line is run again until it does, as a reader would), or
// "&" for a line that starts a process. A line without a step fails the
// test, and so does a step without its line.
var walkthroughSteps = map[string]string{
	"bin/sextant config apply -f examples/sidecar.yaml --server http://127.0.0.1:7400": "authorizationpolicy shop/orders created",
	"mkdir -p www && echo hello from orders > www/index.html":                          "",
	"python3 -m http.server 8081 --bind 127.0.0.1 --directory www &":                   "&",
	"bin/sextant sidecar --service shop/orders --app-port 8081 --label app=orders --mesh-listen 127.0.0.1:15006 --outbound 127.0.0.1:15001 --admin 127.0.0.1:15000 --xds 127.0.0.1:7402 --registry http://127.0.0.1:7400 --data ./orders-sidecar &": "&",
	"bin/sextant sidecar --service shop/web --app-port 8082 --label app=web --mesh-listen 127.0.0.1:15106 --outbound 127.0.0.1:15101 --admin 127.0.0.1:15100 --xds 127.0.0.1:7402 --registry http://127.0.0.1:7400 --data ./web-sidecar &":          "&",
	"http_proxy=http://127.0.0.1:15101 curl -s http://orders.shop:8080/    # hello from orders: web -> its sidecar -> mutual TLS -> orders' sidecar -> python":                                                                                      "hello from orders",
	"curl -s http://127.0.0.1:15006/ || echo refused    # refused: plaintext to a STRICT mesh port":                                                                                                                                                 "refused",
	"http_proxy=http://127.0.0.1:15001 curl -s http://orders.shop:8080/    # RBAC: access denied (orders' own identity is not web)":                                                                                                                 "RBAC: access denied",
	"bin/sextant calls list --gateway http://127.0.0.1:15000 --service shop/orders    # orders' side: PRINCIPAL spiffe://cluster.local/ns/shop/sa/web, and the denied call":                                                                         "spiffe://cluster.local/ns/shop/sa/web",
	"bin/sextant calls list --gateway http://127.0.0.1:15100 --service shop/orders -o json    # web's side: \"upstream_principal\":\"spiffe://cluster.local/ns/shop/sa/orders\"":                                                                    `"upstream_principal":"spiffe://cluster.local/ns/shop/sa/orders"`,
}

// walkthrough returns the lines of the first sh block after the page's
// "## Walkthrough" heading.
func walkthrough(t *testing.T, page string) []string {
	t.Helper()
	f, err := os.Open(page)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	seen, in := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "## Walkthrough"):
			seen = true
		case seen && !in && l == "```sh":
			in = true
		case in && l == "```":
			return lines
		case in:
			lines = append(lines, l)
		}
	}
	t.Fatalf("%s: no sh block after ## Walkthrough", page)
	return nil
}

// TestSidecarWalkthrough runs docs/sidecar.md's walkthrough as written,
// in a folder with bin/sextant and examples/ as at the repository's root,
// with one change: the addresses it names become free ports (its own
// server's, on them).
func TestSidecarWalkthrough(t *testing.T) {
	for _, tool := range [][]string{{"python3", "python3"}, {"curl", "curl"}} {
		if _, err := debian.Ensure(tool[0], tool[1]); err != nil {
			t.Fatal(err)
		}
	}
	page, err := filepath.Abs("../../docs/sidecar.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := walkthrough(t, page)
	for _, l := range lines {
		if _, ok := walkthroughSteps[l]; !ok {
			t.Errorf("docs/sidecar.md: a walkthrough line without a step in walkthroughSteps:\n%s", l)
		}
	}
	if len(lines) != len(walkthroughSteps) {
		t.Errorf("walkthroughSteps has %d steps, the walkthrough %d lines", len(walkthroughSteps), len(lines))
	}
	if t.Failed() {
		return
	}
	bin := sextantBin(t)
	dir := t.TempDir()
	examples, _ := filepath.Abs("../../examples")
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"bin/sextant": bin, "examples": examples} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	// The page's ports, each a free one here.
	ports := map[string]string{}
	for _, p := range []string{"7400", "7402", "8081", "8082", "15000", "15001", "15006", "15100", "15101", "15106"} {
		a := freeAddr(t)
		ports[p] = a[strings.LastIndexByte(a, ':')+1:]
	}
	portRE := regexp.MustCompile(`\b(7400|7402|8081|8082|15000|15001|15006|15100|15101|15106)\b`)
	srv := start(t, "server", bin, "server", "--data", filepath.Join(dir, "data"), "--http", "127.0.0.1:"+ports["7400"],
		"--xds", "127.0.0.1:"+ports["7402"], "--log-level", "warn")
	waitHTTP(t, srv, "http://127.0.0.1:"+ports["7400"]+"/readyz")

	for _, l := range lines {
		run := portRE.ReplaceAllStringFunc(l, func(p string) string { return ports[p] })
		want := walkthroughSteps[l]
		if want == "&" {
			start(t, l, "sh", "-c", "cd "+dir+" && exec "+strings.TrimSuffix(strings.TrimSpace(run), "&"))
			continue
		}
		var out []byte
		var err error
		end := time.Now().Add(30 * time.Second)
		for {
			cmd := exec.Command("sh", "-c", run)
			cmd.Dir = dir
			out, err = cmd.CombinedOutput()
			if err == nil && strings.Contains(string(out), want) {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("%s\n(run as %s)\n%v, printed:\n%s\nwant it to print %q", l, run, err, out, want)
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("$ %s\n%s", l, out)
	}
}
