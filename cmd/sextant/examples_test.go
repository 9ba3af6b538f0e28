package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// TestReadme follows README.md's commands as written (docRun): the server
// as "make run" starts it, the registry through the CLI and curl, a
// blocking query, routing config, a gateway, a service from examples/ and
// a call through the gateway, the call log, push status and placement.
func TestReadme(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server, a gateway and an example service")
	}
	r := newDocRun(t)
	r.follow("../../README.md")
	r.checkIgnored()
}

// checkIgnored: what the commands wrote in the working directory (./data,
// ./gateway-data, ...) is ignored by the checkout's .gitignore, so a reader
// who follows them at the root of a clone commits none of it.
func (r *docRun) checkIgnored() {
	if _, err := exec.LookPath("git"); err != nil {
		r.t.Log("no git: .gitignore not checked")
		return
	}
	if exec.Command("git", "-C", "../..", "rev-parse").Run() != nil {
		r.t.Log("not a git checkout: .gitignore not checked")
		return
	}
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, e := range entries {
		if e.Type()&os.ModeSymlink != 0 {
			continue // the checkout's own
		}
		path := e.Name()
		if e.IsDir() {
			path += "/x" // a directory pattern matches what is inside
		}
		if exec.Command("git", "-C", "../..", "check-ignore", "-q", "--no-index", path).Run() != nil {
			r.t.Errorf("README's commands write ./%s, which .gitignore does not ignore", e.Name())
		}
	}
}

// exampleCases checks, for each file in examples/, what its header and
// examples/README.md say it does, after examples/README.md's commands ran
// (they apply every file). Every file in examples/ must have a case here.
var exampleCases = []exampleCase{
	{"README.md", func(r *docRun) { // its commands ran; it links every file
		doc := string(readRepoFile(r.t, "examples/README.md"))
		for _, f := range exampleFiles(r.t) {
			if f != "README.md" && !strings.Contains(doc, "]("+f+")") {
				r.t.Errorf("examples/README.md has no link to %s", f)
			}
		}
	}},
	{"routing.yaml", checkRouting},
	{"nodes.yaml", func(r *docRun) {
		l, err := r.api.ListNodes(r.ctx, client.NodeListOptions{Selector: "topology.kubernetes.io/zone in (zone-a,zone-b)"})
		if err != nil {
			r.t.Fatal(err)
		}
		var names []string
		for _, it := range l.Items {
			names = append(names, it.Node.Metadata.Name)
			if it.Node.Spec.Unschedulable != (it.Node.Metadata.Name == "node-old") {
				r.t.Errorf("%s unschedulable: %v", it.Node.Metadata.Name, it.Node.Spec.Unschedulable)
			}
		}
		if !slices.Equal(names, exampleNodes) {
			r.t.Errorf("nodes %v, want %v", names, exampleNodes)
		}
	}},
	{"pods.yaml", func(r *docRun) {
		// docs/placement.md shows where they go: decisions are deterministic.
		doc := readRepoFile(r.t, "docs/placement.md")
		shown := map[string]string{}
		for _, m := range regexp.MustCompile(`(?m)^pod/(\S+) placed on (\S+)$`).FindAllSubmatch(doc, -1) {
			shown[string(m[1])] = string(m[2])
		}
		if !maps.Equal(shown, r.placed) {
			r.t.Errorf("docs/placement.md shows %v, place printed %v", shown, r.placed)
		}
		// Its header: placing them again is refused.
		res := r.sh("bin/sextant place -f examples/pods.yaml")
		if res.code != 1 || !strings.Contains(res.errs, "already placed") {
			r.t.Errorf("placing again: exit %d, %s", res.code, res.errs)
		}
	}},
	{"keepalive/main.go", checkKeepalive},
	// What it does on a gateway's calls is TestTelemetryAccessLogs' and
	// TestTelemetryTracing's; here: it applies, and the server keeps both.
	{"telemetry.yaml", func(r *docRun) {
		out := r.ok("bin/sextant config apply -f examples/telemetry.yaml")
		for _, want := range []string{"telemetry istio-system/mesh-default", "telemetry default/shop-gw"} {
			if !strings.Contains(out, want) {
				r.t.Errorf("applying examples/telemetry.yaml: no %q in %s", want, out)
			}
		}
		if out := r.ok("bin/sextant config get telemetry/default/shop-gw"); !strings.Contains(out, "envoy-json") {
			r.t.Errorf("config get telemetry/default/shop-gw: %s", out)
		}
	}},
	// Run with real sidecars by test/sidecar's TestSidecarWalkthrough
	// (docs/sidecar.md's walkthrough); here: it applies as that page says,
	// in namespace shop, apart from the other examples.
	{"sidecar.yaml", func(r *docRun) {
		out := r.ok("bin/sextant config apply -f examples/sidecar.yaml")
		for _, want := range []string{"destinationrule shop/orders", "peerauthentication shop/default", "authorizationpolicy shop/orders"} {
			if !strings.Contains(out, want) {
				r.t.Errorf("applying examples/sidecar.yaml: no %q in %s", want, out)
			}
		}
		if !strings.Contains(string(readRepoFile(r.t, "docs/sidecar.md")), "config apply -f examples/sidecar.yaml") {
			r.t.Error("docs/sidecar.md's walkthrough does not apply examples/sidecar.yaml")
		}
	}},
}

type exampleCase struct {
	file  string // under examples/
	check func(r *docRun)
}

// TestExamples applies every file of examples/ to a real server by
// following examples/README.md's commands (docRun), then checks each file
// does what it says; a file without a case in exampleCases fails it.
func TestExamples(t *testing.T) {
	files := exampleFiles(t)
	for _, f := range files {
		if !slices.ContainsFunc(exampleCases, func(c exampleCase) bool { return c.file == f }) {
			t.Errorf("examples/%s has no case in exampleCases (cmd/sextant/examples_test.go): add one that applies it and checks what it says it does", f)
		}
	}
	for _, c := range exampleCases {
		if !slices.Contains(files, c.file) {
			t.Errorf("exampleCases has a case for examples/%s, which is gone", c.file)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if testing.Short() {
		t.Skip("builds and runs the server, a gateway and example services")
	}
	r := newDocRun(t)
	r.makeRun() // "while the server runs"
	r.follow("../../examples/README.md")
	for _, c := range exampleCases {
		t.Run(c.file, func(sub *testing.T) {
			r.t = sub
			defer func() { r.t = t }()
			c.check(r)
		})
	}
}

// exampleFiles lists the files under examples/, by their path there.
func exampleFiles(t *testing.T) []string {
	var files []string
	err := filepath.WalkDir("../../examples", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, strings.TrimPrefix(filepath.ToSlash(path), "../../examples/"))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// checkRouting: examples/routing.yaml sends x-canary: yes to v2 and the
// rest 90/10 to v1 and v2 (examples/README.md ran one instance of each).
func checkRouting(r *docRun) {
	v1, v2 := "default/orders v1 at "+r.addr["9001"], "default/orders v2 at "+r.addr["9002"]
	call := func(canary bool) string {
		req, _ := http.NewRequest("GET", "http://"+r.addr["8080"]+"/", nil)
		req.Host = "orders"
		if canary {
			req.Header.Set("x-canary", "yes")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			r.t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		s := string(b)
		switch {
		case strings.HasPrefix(s, v1):
			return "v1"
		case strings.HasPrefix(s, v2):
			return "v2"
		}
		return fmt.Sprintf("%d %s", resp.StatusCode, s)
	}
	got := map[string]int{}
	for range 20 {
		got[call(true)]++
	}
	if got["v2"] != 20 {
		r.t.Errorf("x-canary: yes reached %v, want v2 only", got)
	}
	clear(got)
	for range 200 {
		got[call(false)]++
	}
	// 90/10 of 200: v2 has no call with probability 0.9^200 (7e-10).
	if got["v1"]+got["v2"] != 200 || got["v1"] < 150 || got["v2"] == 0 {
		r.t.Errorf("the default route reached %v, want about 180 v1 and 20 v2", got)
	}
}

// buildKeepalive compiles examples/keepalive once per test binary run.
var buildKeepalive = sync.OnceValues(func() (string, error) { return goBuild("../../examples/keepalive", "keepalive") })

// checkKeepalive runs examples/keepalive built on its own (SIGTERM then
// reaches it, not go run), and stops the go run instance of
// examples/README.md as "kill %N" does: each deregisters before it exits,
// and the gateway stops routing to it.
func checkKeepalive(r *docRun) {
	bin, err := buildKeepalive()
	if err != nil {
		r.t.Fatal(err)
	}
	env := r.env
	run := func(args ...string) (*exec.Cmd, *syncBuffer) {
		c := exec.Command(bin, args...)
		c.Env = env
		var errs syncBuffer
		c.Stderr = &errs
		if err := c.Start(); err != nil {
			r.t.Fatal(err)
		}
		return c, &errs
	}
	// Bad input: a clear error, exit 1.
	for _, bad := range []struct{ args, want string }{
		{"--port 1", "keepalive: --service is required"},
		{"--service orders --host localhost", `keepalive: --host "localhost": not an IP address`},
		{"--service orders --port 70000", "keepalive: --port 70000: not in 0..65535"},
	} {
		c, errs := run(strings.Fields(bad.args)...)
		err := c.Wait()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(errs.String(), bad.want) {
			r.t.Errorf("keepalive %s: %v, stderr %q; want exit 1 and %q", bad.args, err, errs.String(), bad.want)
		}
	}

	// --port 0: a free port, named in the "registered" line.
	c, errs := run("--service", "inventory", "--port", "0", "--ttl", "2s")
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	var addr string
	r.eventually(time.Minute, "keepalive logs its registration", func() (bool, string) {
		m := regexp.MustCompile(`msg=registered service=default/inventory id=(\S+) addr=(\S+)`).FindStringSubmatch(errs.String())
		if m != nil {
			addr = m[2]
		}
		return m != nil, errs.String()
	})
	r.addr["inventory"] = addr
	// Heartbeats keep it healthy past 3 x TTL.
	time.Sleep(6500 * time.Millisecond)
	r.waitInstance("inventory", "inventory", time.Second)
	resp, err := http.Get("http://" + addr + "/anything")
	if err != nil {
		r.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(string(body), "default/inventory v1 at "+addr+" (pid ") {
		r.t.Errorf("it answered %q", body)
	}
	if err := c.Process.Signal(syscall.SIGTERM); err != nil {
		r.t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			r.t.Errorf("after SIGTERM: %v (want exit 0); stderr %s", err, errs.String())
		}
	case <-time.After(20 * time.Second):
		c.Process.Kill()
		r.t.Fatalf("still running 20s after SIGTERM; stderr %s", errs.String())
	}
	if !strings.Contains(errs.String(), "msg=deregistered") {
		r.t.Errorf("no deregistered line: %s", errs.String())
	}
	if ins := r.instances("inventory"); len(ins) != 0 { // deregistered before it exited
		r.t.Errorf("after SIGTERM: %+v", ins)
	}

	// The v2 instance of examples/README.md, stopped as "kill %N" stops
	// a job: canary calls fall through to v1 once it has left.
	r.stop("keepalive 9002", syscall.SIGTERM)
	r.gone("orders", "9002", 5*time.Second)
	r.answers("curl -s -H 'Host: orders' -H 'x-canary: yes' "+r.addr["8080"]+"/", "default/orders v1 at "+r.addr["9001"]+" (")
	if s := r.bg["keepalive 9002"].errs.String(); !strings.Contains(s, "msg=deregistered") {
		r.t.Errorf("the go run instance did not deregister: %s", s)
	}
}
