package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/sextant-mesh/sextant/internal/manifest"
)

// checkFlag checks one --name=value argument against fs without setting it
// (the command's flags are the process's: other tests parse them).
func checkFlag(fs *pflag.FlagSet, arg string) error {
	name, value, hasValue := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
	if !strings.HasPrefix(arg, "--") {
		return fmt.Errorf("want --name=value")
	}
	f := fs.Lookup(name)
	if f == nil {
		return fmt.Errorf("no such flag")
	}
	switch f.Value.Type() {
	case "bool":
		if hasValue {
			_, err := strconv.ParseBool(value)
			return err
		}
	case "duration":
		_, err := time.ParseDuration(value)
		return err
	case "int":
		_, err := strconv.Atoi(value)
		return err
	default:
		if !hasValue {
			return fmt.Errorf("no value")
		}
	}
	return nil
}

// TestDeployManifestArgs: every container of deploy/kubernetes/ runs a
// sextant command with flags that command has, valued as it parses them
// (internal/kube's TestDeployManifests checks the manifests against a real
// API server; this, against the binary's own flags).
func TestDeployManifestArgs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "deploy", "kubernetes", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob(filepath.Join("..", "..", "deploy", "kubernetes", "*", "*.yaml"))
	files = append(files, more...)
	containers := 0
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range manifest.Split(data) {
			js, err := d.JSON()
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			var obj struct {
				Kind string
				Spec struct {
					Template struct {
						Spec struct {
							Containers []struct {
								Name string
								Args []string
							}
						}
					}
				}
			}
			if err := json.Unmarshal(js, &obj); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			for _, c := range obj.Spec.Template.Spec.Containers {
				containers++
				if len(c.Args) == 0 {
					t.Errorf("%s: container %s has no args", path, c.Name)
					continue
				}
				cmd, rest, err := rootCmd.Find(c.Args[:1])
				if err != nil || cmd == rootCmd || len(rest) != 0 {
					t.Errorf("%s: container %s: %q is not a sextant command", path, c.Name, c.Args[0])
					continue
				}
				for _, a := range c.Args[1:] {
					if err := checkFlag(cmd.Flags(), a); err != nil {
						t.Errorf("%s: container %s: sextant %s %s: %v", path, c.Name, c.Args[0], a, err)
					}
				}
			}
		}
	}
	if containers < 3 {
		t.Errorf("%d containers in deploy/kubernetes/: want the server's two forms and the gateway", containers)
	}
}

type fixedSource bool

func (f fixedSource) Synced() bool { return bool(f) }

// TestBoundedSource: a Kubernetes source counts as synced for /readyz once
// synced, or once --kube-ready-timeout has passed; with 0, never before.
func TestBoundedSource(t *testing.T) {
	past, future := time.Now().Add(-time.Second), time.Now().Add(time.Hour)
	for _, c := range []struct {
		src      fixedSource
		deadline time.Time
		want     bool
	}{
		{true, time.Time{}, true},
		{false, time.Time{}, false},
		{false, future, false},
		{false, past, true},
	} {
		if got := (boundedSource{c.src, c.deadline}).Synced(); got != c.want {
			t.Errorf("synced %v, deadline %v: %v, want %v", c.src, c.deadline, got, c.want)
		}
	}
}

// TestReadyzWaitsForKubernetes: a server syncing a cluster whose API
// server does not answer is live (/healthz 200) but not ready (/readyz 503
// "syncing", naming the Kubernetes sync) until --kube-ready-timeout has
// passed; then it serves what its store holds.
func TestReadyzWaitsForKubernetes(t *testing.T) {
	dead := freeAddr(t) // nothing listens there
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://`+dead+`"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {token: x}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	httpAddr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runServer(ctx, serverFlags{data: t.TempDir(), http: httpAddr, logFormat: "text", logLevel: "error",
			logSize: 1 << 16, drain: time.Second, kubeconfig: kubeconfig, kubeIstio: true, kubeReady: 5 * time.Second})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + httpAddr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	start := time.Now()
	// Past the catalog's load: syncing, naming the source.
	sawSyncing := false
	waitTrue(t, 30*time.Second, func() bool {
		code, body := get("/readyz")
		sawSyncing = code == http.StatusServiceUnavailable && body == `{"status":"syncing","source":"kubernetes"}`
		return sawSyncing || code == http.StatusOK
	})
	if !sawSyncing {
		t.Fatalf("/readyz was 200 after %v without saying it waited for the unreachable cluster", time.Since(start))
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	waitTrue(t, 30*time.Second, func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
	if d := time.Since(start); d < 5*time.Second {
		t.Errorf("ready after %v, before --kube-ready-timeout (5s)", d)
	}
}
