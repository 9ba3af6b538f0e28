package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/bench/kubepush"
)

// TestBenchPushPeerIstiod runs "bench push --peer istiod" tiny: a real
// kube-apiserver (test/kube), a stock istiod (tools/istiod) and Sextant,
// each in its own process, in turn; both must deliver every kind of change
// to every subscriber, and the ratios must come out of real figures.
func TestBenchPushPeerIstiod(t *testing.T) {
	istiod := toolBinary(t, "SEXTANT_ISTIOD", "tools/istiod", "istio.io/istio/pilot/cmd/pilot-discovery", "istiod")
	kts := toolBinary(t, "SEXTANT_KUBE_TESTSERVER", "test/kube", "./cmd/kube-testserver", "kube-testserver")
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "bench", "push", "--peer", "istiod", "--istiod", istiod, "--kube-testserver", kts,
		"--services", "4", "--endpoints", "40", "--subscribers", "4", "--duration", "3s", "--churn", "20",
		"--config-every", "300ms", "--dr-changes", "3", "--protocol", "sotw")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bench push --peer istiod: %v\n%s\nstderr:\n%s", err, out, tail(stderr.String(), 6000))
	}
	var res kubepush.Result
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("%s", out)
	if len(res.Rounds) != 2 || res.Rounds[0].Peer != "sextant" || res.Rounds[1].Peer != "istiod" {
		t.Fatalf("rounds: %+v", res.Rounds)
	}
	for _, f := range []kubepush.Figures{res.Sextant, res.Istiod} {
		if f.Responses == 0 || f.EndpointChanges == 0 || f.EndpointAllP99MS <= 0 || f.ConfigChanges == 0 || f.ConfigAllP99MS <= 0 ||
			f.DRChanges != 3 || f.DRAllP99MS <= 0 || f.SyncS <= 0 || f.RSSIdleMB <= 0 {
			t.Errorf("%s: not every kind of change was delivered to every subscriber: %+v", f.Peer, f)
		}
		if f.Undelivered != 0 {
			t.Errorf("%s: %d changes undelivered", f.Peer, f.Undelivered)
		}
	}
	if res.Ratio.EndpointAllP99 <= 0 || res.Ratio.ConfigAllP99 <= 0 || res.Ratio.SyncS <= 0 {
		t.Errorf("ratios not computed: %+v", res.Ratio)
	}
}

// toolBinary is a binary "make test" built before the tests and passed in
// env (the builds take minutes, outside the tests' timeout); without it, it
// builds pkg in the module dir (relative to the repository) into the
// user's cache, once per go.mod and go.sum. A binary named but missing
// fails the test: CI must not pass without the peer.
func toolBinary(t *testing.T, env, dir, pkg, name string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		return p
	}
	src, err := filepath.Abs(filepath.Join("..", "..", dir))
	if err != nil {
		t.Fatal(err)
	}
	var files [2][]byte
	for i, f := range []string{"go.mod", "go.sum"} {
		if files[i], err = os.ReadFile(filepath.Join(src, f)); err != nil {
			t.Fatal(err)
		}
	}
	sum := sha256.Sum256(append(append(files[0], 0), files[1]...))
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	out := filepath.Join(cache, "sextant-test", name+"-"+hex.EncodeToString(sum[:8]))
	bin := filepath.Join(out, name)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	// Build beside, then rename: a concurrent run sees all or nothing.
	tmp := fmt.Sprintf("%s.%d", bin, os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	t.Logf("building %s into %s (minutes, once; %s skips it)", name, out, env)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, pkg)
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s in %s: %v\n%s", pkg, src, err, b)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
