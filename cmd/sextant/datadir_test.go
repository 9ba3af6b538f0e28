package main

import (
	"context"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/secret/secrettest"
)

// TestDataDirPrivate runs the real server under the usual umask (022):
// the data directory it creates is 0700 and every file in it, the store's
// included, 0600, after it has stored a TLS secret and the mesh CA. A data
// directory left readable by others (as the server made them before) is
// made private at the next start, and the log says so.
func TestDataDirPrivate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real server")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	data := filepath.Join(t.TempDir(), "data")
	addr := freeAddr(t)
	run := func() (stop func(), stderr *syncWriter) {
		stderr = &syncWriter{}
		cmd := exec.Command(bin, "server", "--data", data, "--http", addr, "--xds", "", "--log-level", "warn",
			"--audit-log", filepath.Join(data, "audit.json"))
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitTrue(t, 30*time.Second, func() bool {
			resp, err := http.Get("http://" + addr + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
		return func() {
			cmd.Process.Signal(syscall.SIGTERM)
			if err := cmd.Wait(); err != nil {
				t.Errorf("server: %v\n%s", err, stderr.String())
			}
		}, stderr
	}
	stop, _ := run()
	ctx := context.Background()
	api, err := client.New("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM := secrettest.Pair(t, time.Now().Add(24*time.Hour), "shop.example.com")
	if _, err := api.PutSecret(ctx, client.TLSSecret{Name: "shop-cert", Cert: string(certPEM), Key: string(keyPEM)}, false); err != nil {
		t.Fatal(err)
	}
	if err := api.Do(ctx, "GET", "/v1/identity/bundle", nil, nil); err != nil { // makes the mesh CA
		t.Fatal(err)
	}
	stop() // flushed, closed: every file the store keeps is written
	checkPrivate(t, data)

	// A directory as the server left it before: 0755, files 0644.
	if err := os.Chmod(data, 0o755); err != nil {
		t.Fatal(err)
	}
	var opened []string
	filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			os.Chmod(path, 0o644)
			opened = append(opened, path)
		}
		return err
	})
	stop, stderr := run()
	stop()
	checkPrivate(t, data)
	if s := stderr.String(); !strings.Contains(s, "made it private") {
		t.Errorf("no warning about the data directory made private:\n%s", s)
	}
	if len(opened) < 3 {
		t.Fatalf("only %d files in the data directory: %v", len(opened), opened)
	}
}

// checkPrivate fails unless dir and everything in it is its owner's only.
func checkPrivate(t *testing.T, dir string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n++
		want := os.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf("%s: mode %#o, want %#o", path, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 4 {
		t.Fatalf("only %d entries under %s", n, dir)
	}
}
