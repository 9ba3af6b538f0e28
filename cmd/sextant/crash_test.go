package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// buildBinary compiles sextant once per test binary run.
var buildBinary = sync.OnceValues(func() (string, error) { return goBuild(".", "sextant") })

// goBuild compiles the main package in dir to a temporary file named name.
func goBuild(dir, name string) (string, error) {
	tmp, err := os.MkdirTemp("", "sextant-bin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(tmp, name)
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", dir, err, out)
	}
	return bin, nil
}

func freeAddr(t *testing.T) string {
	t.Helper()
	// Below the kernel's ephemeral range (32768-60999 here): a port the
	// kernel hands out for ":0" is free only until any outgoing connection
	// of any test takes it as its source port, before the server binds it
	// (TestIstioCORS: bind: address already in use). Random, so the test
	// binaries running beside this one pick other ports. A port is handed
	// out once per process: one picked, closed and not yet bound by its
	// server is free to the next pick too (TestIstioRedirect: its server
	// found the port it had been given taken, by another of its own).
	for range 200 {
		port := freePortLow + rand.IntN(freePortHigh-freePortLow)
		if !handOut(port) {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		ln.Close()
		return ln.Addr().String()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// freePortLow and freePortHigh bound the ports freeAddr picks from.
const freePortLow, freePortHigh = 20000, 32000

// handedOut holds the ports freeAddr has given this process.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// handOut reports whether port was not handed out before, and marks it.
func handOut(port int) bool {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = make(map[int]bool)
	}
	if handedOut.ports[port] {
		return false
	}
	handedOut.ports[port] = true
	return true
}

// startServer runs the real binary on dir, with the extra flags, and waits
// until it is ready. No xDS: its default address is shared by every server
// on the machine.
func startServer(t *testing.T, bin, dir, addr string, extra ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"server", "--data", dir, "--http", addr, "--xds", "", "--log-level", "warn"}, extra...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return cmd
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	t.Fatal("server not ready in 30s")
	return nil
}

type acked struct {
	id   string
	meta map[string]string
	port int
}

// TestKillDuringRegistrations kills the server with SIGKILL while hundreds of
// registrations are in flight, restarts it on the same data, and checks that
// every acknowledged write is there, intact.
func TestKillDuringRegistrations(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a real server")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	addr := freeAddr(t)
	srv := startServer(t, bin, dir, addr)
	base := "http://" + addr

	const workers = 256
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}, Timeout: 30 * time.Second}
	var (
		mu    sync.Mutex
		acks  []acked
		count atomic.Int64
		wg    sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil && i < 10000; i++ {
				id := fmt.Sprintf("w%03d-%05d", w, i)
				meta := map[string]string{"worker": fmt.Sprint(w), "seq": fmt.Sprint(i), "zone": "z" + fmt.Sprint(i%3)}
				body, _ := json.Marshal(map[string]any{"id": id, "service": fmt.Sprintf("svc%d", w%8), "host": "10.1.0.1", "port": 1 + i%60000, "metadata": meta})
				resp, err := client.Post(base+"/v1/instances", "application/json", bytes.NewReader(body))
				if err != nil {
					return // the server died: this write is not acknowledged
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					return
				}
				mu.Lock()
				acks = append(acks, acked{id: id, meta: meta, port: 1 + i%60000})
				mu.Unlock()
				count.Add(1)
			}
		}()
	}
	for count.Load() < 3000 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	if err := srv.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	srv.Wait()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d registrations acknowledged before SIGKILL", len(acks))
	if len(acks) < 3000 {
		t.Fatalf("only %d acknowledged; the load did not run", len(acks))
	}

	srv = startServer(t, bin, dir, addr)
	defer func() { srv.Process.Signal(syscall.SIGTERM); srv.Wait() }()
	var list struct {
		Instances []struct {
			ID       string            `json:"id"`
			Port     int               `json:"port"`
			Service  string            `json:"service"`
			Metadata map[string]string `json:"metadata"`
			Healthy  bool              `json:"healthy"`
		} `json:"instances"`
		NextPageToken string `json:"next_page_token"`
	}
	got := map[string]int{}
	gotMeta := map[string]map[string]string{}
	token := ""
	for range 1000 {
		resp, err := client.Get(base + "/v1/instances?limit=10000&page_token=" + token)
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range list.Instances {
			got[in.ID] = in.Port
			gotMeta[in.ID] = in.Metadata
			if !in.Healthy {
				t.Fatalf("%s unhealthy after restart", in.ID)
			}
		}
		if token = list.NextPageToken; token == "" {
			break
		}
	}
	for _, a := range acks {
		port, ok := got[a.id]
		if !ok {
			t.Fatalf("acknowledged %s lost after SIGKILL (%d instances after restart, %d acknowledged)", a.id, len(got), len(acks))
		}
		if port != a.port || fmt.Sprint(gotMeta[a.id]) != fmt.Sprint(a.meta) {
			t.Fatalf("%s changed: port %d meta %v, want %d %v", a.id, port, gotMeta[a.id], a.port, a.meta)
		}
	}
	// At most the writes in flight at the kill may be there unacknowledged.
	if extra := len(got) - len(acks); extra < 0 || extra > workers {
		t.Fatalf("%d instances after restart for %d acknowledged: %d extra, at most %d were in flight", len(got), len(acks), extra, workers)
	}
}
