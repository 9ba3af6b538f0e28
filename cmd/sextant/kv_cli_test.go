package main

import (
	"bufio"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestKVCommands: "sextant kv" through the real binary against a real
// server's Consul API: put (a value, standard input, --flags, --cas),
// get (a value, --recurse, --keys, -o json), a missing key and a lost
// check-and-set fail naming why, delete (one, --recurse), and watch
// prints the current value, then the next write, then the delete.
func TestKVCommands(t *testing.T) {
	_, consulAddr := startConsulServer(t)
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	run := func(stdin string, args ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"kv", "--consul", consulAddr}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	must := func(want string, args ...string) {
		t.Helper()
		out, err := run("", args...)
		if err != nil || out != want {
			t.Fatalf("sextant kv %s: %v\n%q, want %q", strings.Join(args, " "), err, out, want)
		}
	}
	fails := func(want string, args ...string) {
		t.Helper()
		out, err := run("", args...)
		if err == nil || !strings.Contains(out, want) {
			t.Fatalf("sextant kv %s: %v\n%q, want a failure naming %q", strings.Join(args, " "), err, out, want)
		}
	}
	must("app/config/db: written\n", "put", "app/config/db", "postgres://db:5432")
	if out, err := run("on\n", "put", "--flags", "42", "app/feature/x", "-"); err != nil {
		t.Fatalf("put from stdin: %v %s", err, out)
	}
	must("postgres://db:5432\n", "get", "app/config/db")
	must("on\n\n", "get", "app/feature/x") // the value's own newline, then get's
	must("app/config/db:postgres://db:5432\napp/feature/x:on\n\n", "get", "--recurse", "app/")
	must("app/config/\napp/feature/\n", "get", "--keys", "app/")
	if out, err := run("", "get", "-o", "json", "app/feature/x"); err != nil || !strings.Contains(out, `"Flags": 42`) || !strings.Contains(out, `"Value": "b24K"`) {
		t.Fatalf("get -o json: %v\n%s", err, out)
	}
	fails(`no key "app/none"`, "get", "app/none")
	fails(`"app/config/db" exists; --cas 0 writes only a new key`, "put", "--cas", "0", "app/config/db", "x")
	must("app/owner: written\n", "put", "--cas", "0", "app/owner", "me")
	fails(`unknown --output "yaml"`, "get", "-o", "yaml", "app/owner")

	// watch: the current value, the next write, the delete.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := exec.CommandContext(ctx, bin, "kv", "--consul", consulAddr, "watch", "--count", "3", "app/config/db")
	stdout, err := w.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	next := func() string {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("kv watch ended: %v", lines.Err())
		}
		return lines.Text()
	}
	if got := next(); got != "postgres://db:5432" {
		t.Fatalf("watch's first line %q, want the current value", got)
	}
	must("app/config/db: written\n", "put", "app/config/db", "postgres://db2:5432")
	if got := next(); got != "postgres://db2:5432" {
		t.Fatalf("watch after a put: %q", got)
	}
	must("app/config/db: deleted\n", "delete", "app/config/db")
	if got := next(); got != "app/config/db deleted" {
		t.Fatalf("watch after the delete: %q", got)
	}
	if err := w.Wait(); err != nil {
		t.Fatalf("kv watch --count 3: %v", err)
	}
	must(`every key under "app/": deleted`+"\n", "delete", "--recurse", "app/")
	fails(`no key under "app/"`, "get", "--recurse", "app/")
}
