package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// A docRun follows the commands of a markdown page's ```sh blocks as a
// reader would: each line runs as written, with sh, in a folder that looks
// like a checkout (every top-level entry of the repository linked, bin/sextant
// the binary built from it), so "bin/sextant", "go run ./examples/..." and
// "-f examples/x.yaml" mean what they mean at the root of a clone. Writes
// such as ./data and ./gateway-data land in that folder, not in the checkout.
//
// The one change made to a command: the addresses the docs use (docAddrs,
// as 127.0.0.1:PORT, localhost:PORT, or examples/keepalive's --port PORT)
// become free ports of this machine, so the test never meets another server
// on the defaults. $SEXTANT_SERVER and $SEXTANT_GATEWAY_ADMIN point the CLI's
// defaults at them too. Placeholders such as <id> are filled from earlier
// answers, as the docs tell the reader to.
//
// Each line must have a step in docSteps, keyed by the line exactly as
// written: a step runs the command and checks what the docs say it does. A
// line added or edited without its step fails the test (TestDocSteps checks
// the other direction: no step is left for a line that is gone).
type docRun struct {
	t    *testing.T
	dir  string // the working directory
	env  []string
	repl *strings.Replacer // the docs' addresses -> this run's
	addr map[string]string // this run's address by the docs' port: "7400" -> "127.0.0.1:41234"
	vars map[string]string // placeholders filled by earlier steps: "<id>" -> "6c1e..."
	api  *client.Client    // the server's, to check what the commands did
	ctx  context.Context   // bounds the checks' API calls; ends with the test
	bg   map[string]*bgProc

	placed map[string]string // pod -> node, as place printed it
}

// docAddrs are the docs' addresses: the server's HTTP API and xDS, the
// gateway's proxy and admin API, two instances of examples/keepalive, and
// examples/grpcmtls's server (docs/security.md's walkthrough).
var docAddrs = []string{"7400", "7402", "7403", "8080", "9001", "9002", "50051"}

type bgProc struct {
	cmd       *exec.Cmd
	out, errs syncBuffer
	done      chan struct{} // closed when it has exited and its output is read
	err       error         // its exit; read after done
	over      bool          // its end was asked for (stop) or awaited (a step)
}

// newDocRun prepares the working directory and addresses of one run.
func newDocRun(t *testing.T) *docRun {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	r := &docRun{t: t, dir: t.TempDir(), addr: map[string]string{}, vars: map[string]string{}, bg: map[string]*bgProc{}}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case "bin", "data", "gateway-data", ".git": // made by a run, or not needed
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(r.dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(r.dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(r.dir, "bin", "sextant")); err != nil {
		t.Fatal(err)
	}
	var pairs []string
	for _, port := range docAddrs {
		a := freeAddr(t)
		r.addr[port] = a
		_, p, _ := net.SplitHostPort(a)
		pairs = append(pairs, "127.0.0.1:"+port, a, "localhost:"+port, "localhost:"+p)
		if port == "9001" || port == "9002" || port == "50051" { // examples/keepalive's flag, instances register's
			pairs = append(pairs, "--port "+port, "--port "+p)
		}
	}
	r.repl = strings.NewReplacer(pairs...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SEXTANT_") {
			r.env = append(r.env, kv)
		}
	}
	r.env = append(r.env, "SEXTANT_SERVER=http://"+r.addr["7400"], "SEXTANT_GATEWAY_ADMIN=http://"+r.addr["7403"])
	if r.api, err = client.New("http://" + r.addr["7400"]); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	r.ctx = ctx
	return r
}

// port is the port this run uses for the docs' port p.
func (r *docRun) port(p string) string {
	_, port, _ := net.SplitHostPort(r.addr[p])
	return port
}

// shLines returns the command lines of the ```sh blocks of the markdown
// file at path, in order (docCommands).
func shLines(t *testing.T, path string) []string {
	t.Helper()
	var lines []string
	for _, c := range docCommands(t, path) {
		if c.sh {
			lines = append(lines, c.line)
		}
	}
	return lines
}

var placeholder = regexp.MustCompile(`<[a-z]+>`)

// follow runs every ```sh line of the page at path with its step, in order.
func (r *docRun) follow(path string) {
	t := r.t
	t.Helper()
	lines := shLines(t, path)
	if len(lines) == 0 {
		t.Fatalf("%s has no ```sh block", path)
	}
	var missing []string
	for _, l := range lines {
		if docSteps[l] == nil {
			missing = append(missing, "\t"+l)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%s: no step in docSteps (cmd/sextant/docsteps_test.go) for these lines; add one that checks what the page says each does:\n%s",
			path, strings.Join(missing, "\n"))
	}
	for _, l := range lines {
		cmd := r.repl.Replace(l)
		cmd = placeholder.ReplaceAllStringFunc(cmd, func(p string) string {
			v, ok := r.vars[p]
			if !ok {
				t.Fatalf("%s: %q: no earlier step filled %s", path, l, p)
			}
			return v
		})
		t.Logf("$ %s", cmd)
		docSteps[l](r, cmd)
	}
	// What runs in the background must still be running.
	for name, p := range r.bg {
		select {
		case <-p.done:
			if !p.over {
				t.Errorf("%q ended early (%v): %s%s", name, p.err, p.out.String(), p.errs.String())
			}
		default:
		}
	}
}

// shResult is what a command did.
type shResult struct {
	out, errs string
	code      int
}

// sh runs cmd with sh in the working directory, bounded by 2 minutes.
func (r *docRun) sh(cmd string) shResult {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "sh", "-c", cmd)
	c.Dir, c.Env = r.dir, r.env
	var out, errs strings.Builder
	c.Stdout, c.Stderr = &out, &errs
	err := c.Run()
	res := shResult{out: out.String(), errs: errs.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	case err != nil:
		r.t.Fatalf("%s: %v", cmd, err)
	}
	if ctx.Err() != nil {
		r.t.Fatalf("%s: still running after 2 minutes", cmd)
	}
	return res
}

// ok runs cmd and fails the test unless it exits 0.
func (r *docRun) ok(cmd string) string {
	r.t.Helper()
	res := r.sh(cmd)
	if res.code != 0 {
		r.t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", cmd, res.code, res.out, res.errs)
	}
	return res.out
}

// start runs cmd (a trailing & dropped) in the background, in a process
// group of its own, as a shell's job. The test's end stops it as Ctrl-C does
// (SIGINT to the group), after everything started later.
func (r *docRun) start(name, cmd string) *bgProc {
	r.t.Helper()
	if r.bg[name] != nil {
		r.t.Fatalf("%s started twice", name)
	}
	p := &bgProc{done: make(chan struct{})}
	p.cmd = exec.Command("sh", "-c", strings.TrimSuffix(strings.TrimSpace(cmd), "&"))
	p.cmd.Dir, p.cmd.Env = r.dir, r.env
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errs
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() { // ends when the job has exited and closed its output
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	r.bg[name] = p
	r.t.Cleanup(func() { r.stop(name, syscall.SIGINT) })
	return p
}

// stop signals a background job's process group and waits for it to end
// (20 s, then SIGKILL); a job already ended is left as it is.
func (r *docRun) stop(name string, sig syscall.Signal) {
	p := r.bg[name]
	p.over = true
	select {
	case <-p.done:
		return
	default:
	}
	syscall.Kill(-p.cmd.Process.Pid, sig)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		r.t.Errorf("%s did not end within 20s of %v; killed. stderr: %s", name, sig, p.errs.String())
	}
}

// eventually retries cond (at most every 50 ms) until it holds or d
// passes; then it fails the test with what the last try said.
func (r *docRun) eventually(d time.Duration, what string, cond func() (bool, string)) {
	r.t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: not within %v; last: %s", what, d, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ready waits until url answers 200, failing early if the job ended.
func (r *docRun) ready(name, url string, d time.Duration) {
	r.t.Helper()
	p := r.bg[name]
	r.eventually(d, name+" ready at "+url, func() (bool, string) {
		select {
		case <-p.done:
			r.t.Fatalf("%s ended (%v): %s%s", name, p.err, p.out.String(), p.errs.String())
		default:
		}
		resp, err := http.Get(url)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// instances returns the instances of default/svc.
func (r *docRun) instances(svc string) []client.Instance {
	r.t.Helper()
	res, err := r.api.Query(r.ctx, "default", svc, client.QueryOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	return res.Instances
}

// waitInstance waits until default/svc has a healthy instance at 127.0.0.1
// and this run's port for the docs' port p, and returns it.
func (r *docRun) waitInstance(svc, p string, d time.Duration) client.Instance {
	r.t.Helper()
	var found client.Instance
	r.eventually(d, fmt.Sprintf("%s registered at %s", svc, r.addr[p]), func() (bool, string) {
		ins := r.instances(svc)
		for _, in := range ins {
			if net.JoinHostPort(in.Host, fmt.Sprint(in.Port)) == r.addr[p] && in.Healthy {
				found = in
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", ins)
	})
	return found
}

// gone waits until default/svc has no instance at the docs' port p.
func (r *docRun) gone(svc, p string, d time.Duration) {
	r.t.Helper()
	r.eventually(d, fmt.Sprintf("%s at %s deregistered", svc, r.addr[p]), func() (bool, string) {
		ins := r.instances(svc)
		for _, in := range ins {
			if net.JoinHostPort(in.Host, fmt.Sprint(in.Port)) == r.addr[p] {
				return false, fmt.Sprintf("%+v", in)
			}
		}
		return true, ""
	})
}
