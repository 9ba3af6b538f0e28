package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sextant-mesh/sextant/internal/disktest"
	"github.com/sextant-mesh/sextant/internal/xds"
)

var nextPort atomic.Int64

// register registers instance id of service disk (an endpoint of its own)
// and returns the status, the Retry-After header and the body.
func register(t *testing.T, base, id string) (int, string, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"id": id, "service": "disk", "host": "10.9.0.1", "port": 1000 + nextPort.Add(1)})
	resp, err := http.Post(base+"/v1/instances", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("register %s: %v", id, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
}

// countInstances lists service disk and returns how many instances it has.
func countInstances(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Get(base + "/v1/namespaces/default/services/disk/instances")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Instances []json.RawMessage `json:"instances"`
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("list: %d %s", resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return len(body.Instances)
}

// metric is the value of the server's metric name (no labels) in /metrics.
func metric(t *testing.T, base, name string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	t.Fatalf("no metric %s in /metrics", name)
	return ""
}

// edsEndpoints asks the xDS server (SotW ADS, a real gRPC client) for the
// endpoints of service disk and returns how many it answers.
func edsEndpoints(t *testing.T, xdsAddr string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	url := xds.TypeEndpoint.URL()
	if err := s.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "disk-test"}, TypeUrl: url, ResourceNames: []string{"default/disk"}}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Recv()
	if err != nil {
		t.Fatalf("xDS: %v", err)
	}
	n := 0
	for _, a := range r.Resources {
		var cla endpointv3.ClusterLoadAssignment
		if err := a.UnmarshalTo(&cla); err != nil {
			t.Fatal(err)
		}
		for _, le := range cla.Endpoints {
			n += len(le.LbEndpoints)
		}
	}
	return n
}

// TestServerOnFullDisk: a real server on a small tmpfs. With the disk
// nearly full, writes answer 507 with Retry-After and a message naming the
// data directory, while reads and xDS are served; once space is freed,
// writes resume without a restart. Killed and started again on a nearly
// full disk, it starts (read-only), serves everything it had, refuses
// writes, and takes them again once space is freed.
func TestServerOnFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a real server and mounts a tmpfs")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	const reserve = 8 << 20
	mnt := disktest.Tmpfs(t, 48<<20, false)
	data := filepath.Join(mnt, "data")
	addr, xdsAddr := freeAddr(t), freeAddr(t)
	base := "http://" + addr
	flags := []string{"--xds", xdsAddr, "--data-reserve", strconv.Itoa(reserve)}
	srv := startServer(t, bin, data, addr, flags...)
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() }) // before the unmount
	const before = 20
	for i := range before {
		if code, _, body := register(t, base, fmt.Sprintf("d%02d", i)); code != 200 {
			t.Fatalf("register on an empty disk: %d %s", code, body)
		}
	}

	filler := disktest.Fill(t, mnt, reserve/2)
	code, retry, body := register(t, base, "full")
	if code != http.StatusInsufficientStorage || retry == "" || !strings.Contains(body, "insufficient_storage") || !strings.Contains(body, data) {
		t.Fatalf("register on a full disk: %d Retry-After %q %s; want 507 with Retry-After naming %s", code, retry, body, data)
	}
	t.Logf("full disk: %d %s", code, body)
	if n := countInstances(t, base); n != before {
		t.Fatalf("read on a full disk: %d instances, want %d", n, before)
	}
	if n := edsEndpoints(t, xdsAddr); n != before {
		t.Fatalf("xDS on a full disk: %d endpoints, want %d", n, before)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if code, _, body := register(t, base, "resumed"); code != 200 {
		t.Fatalf("register once space is freed, no restart: %d %s", code, body)
	}

	// kill -9 leaves the log to replay; the disk fills meanwhile.
	srv.Process.Kill()
	srv.Wait()
	filler = disktest.Fill(t, mnt, reserve/2)
	srv = startServer(t, bin, data, addr, flags...)
	if n := countInstances(t, base); n != before+1 {
		t.Fatalf("started on a nearly full disk: %d instances, want %d", n, before+1)
	}
	if n := edsEndpoints(t, xdsAddr); n != before+1 {
		t.Fatalf("xDS after a start on a nearly full disk: %d endpoints, want %d", n, before+1)
	}
	if code, _, body := register(t, base, "ro"); code != http.StatusInsufficientStorage || !strings.Contains(body, "read-only") {
		t.Fatalf("register after a start on a nearly full disk: %d %s; want 507, read-only", code, body)
	}
	if v := metric(t, base, "sextant_store_read_only"); v != "1" {
		t.Fatalf("sextant_store_read_only %q on a read-only start, want 1", v)
	}
	if v, err := strconv.ParseFloat(metric(t, base, "sextant_store_disk_free_bytes"), 64); err != nil || v <= 0 || v >= reserve {
		t.Fatalf("sextant_store_disk_free_bytes %v (%v), want between 0 and the reserve", v, err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if code, _, body := register(t, base, "writable"); code != 200 {
		t.Fatalf("register once space is freed after a read-only start: %d %s", code, body)
	}
	if v := metric(t, base, "sextant_store_read_only"); v != "0" {
		t.Fatalf("sextant_store_read_only %q once writable again, want 0", v)
	}
	if n := countInstances(t, base); n != before+2 {
		t.Fatalf("%d instances, want %d", n, before+2)
	}
}

// startExpectingFailure runs the server on dir and returns its output once
// it exits; it fails the test if the server is still running after 30 s.
func startExpectingFailure(t *testing.T, bin, dir, addr string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "server", "--data", dir, "--http", addr, "--xds", "").CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the server started on a damaged log (killed after 30 s):\n%s", out)
	}
	if err == nil {
		t.Fatalf("the server exited 0 on a damaged log:\n%s", out)
	}
	return string(out)
}

// newestLog is the highest-numbered write-ahead log in dir.
func newestLog(t *testing.T, dir string) string {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no write-ahead log in %s: %v", dir, err)
	}
	newest := logs[0]
	for _, l := range logs {
		if len(l) > len(newest) || (len(l) == len(newest) && l > newest) {
			newest = l
		}
	}
	return newest
}

// registerMany registers instances from..from+n-1 from 16 clients at once
// (so that commits carry several each) and returns how many were
// acknowledged.
func registerMany(t *testing.T, base string, from, n int) int {
	t.Helper()
	var (
		wg sync.WaitGroup
		mu sync.Mutex
		ok int
	)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := from + w; i < from+n; i += 16 {
				body, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("w%05d", i), "service": "disk", "host": "10.9.0.2", "port": 1 + i})
				resp, err := http.Post(base+"/v1/instances", "application/json", bytes.NewReader(body))
				if err != nil {
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return ok
}

// TestServerOnDamagedLog: after a kill -9, 16 bytes flipped in the middle
// of the newest write-ahead log stop the start with an error naming the
// file and the offset (pebble alone started "ready" without the commits
// after the damage); --repair starts, says what it dropped, and keeps the
// rest; a torn tail (a record cut short, as a crash in its write leaves
// it) starts with every acknowledged write.
func TestServerOnDamagedLog(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a real server")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	addr := freeAddr(t)
	base := "http://" + addr
	srv := startServer(t, bin, dir, addr)
	const n = 2000
	acked := registerMany(t, base, 0, n)
	if acked != n {
		t.Fatalf("%d of %d registers acknowledged", acked, n)
	}
	srv.Process.Kill()
	srv.Wait()
	wal := newestLog(t, dir)
	intact, err := os.ReadFile(wal)
	if err != nil {
		t.Fatal(err)
	}

	// A torn tail: the first bytes of one more record, whose write a crash
	// cut short (never acknowledged).
	torn := binary.LittleEndian.AppendUint32(nil, 0xdeadbeef) // checksum
	torn = binary.LittleEndian.AppendUint16(torn, 2000)       // length
	torn = append(torn, 5)                                    // a full record
	torn = append(torn, intact[len(intact)-4:len(intact)]...) // not the log number: any bytes
	torn = append(torn, bytes.Repeat([]byte{7}, 100)...)
	if err := os.WriteFile(wal, append(bytes.Clone(intact), torn...), 0o644); err != nil {
		t.Fatal(err)
	}
	srv = startServer(t, bin, dir, addr)
	if got := countInstances(t, base); got != acked {
		t.Fatalf("after a torn tail: %d instances, want the %d acknowledged", got, acked)
	}
	// The start flushed that log: a new one for the damage, of two blocks
	// at least. Pebble's memtables start small and double, and each full
	// one starts a new log: bounded rounds until the newest is large.
	before := acked
	for round := 0; ; round++ {
		if round == 20 {
			t.Fatalf("after %d registers the newest log is still under 64 KiB", acked-before)
		}
		if more := registerMany(t, base, acked, n); more != n {
			t.Fatalf("%d of %d registers acknowledged", more, n)
		}
		acked += n
		if fi, err := os.Stat(newestLog(t, dir)); err == nil && fi.Size() >= 64<<10 {
			break
		}
	}
	srv.Process.Kill()
	srv.Wait()

	// Damage in the middle of the log the kill left.
	wal = newestLog(t, dir)
	b, err := os.ReadFile(wal)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 64<<10 {
		t.Fatalf("newest log %s has %d bytes after %d registers: want at least two blocks", wal, len(b), n)
	}
	at := len(b)/2 + 101
	for i := at; i < at+16; i++ {
		b[i] ^= 0x5a
	}
	if err := os.WriteFile(wal, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out := startExpectingFailure(t, bin, dir, addr)
	if !strings.Contains(out, wal) || !strings.Contains(out, "damaged at offset") || !strings.Contains(out, "--repair") {
		t.Fatalf("start on a damaged log; want an error naming %s and the offset:\n%s", wal, out)
	}
	t.Logf("refused: %s", out)

	srv = startServer(t, bin, dir, addr, "--repair", "--log-level", "info")
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	got := countInstances(t, base)
	if got <= before || got >= acked {
		t.Fatalf("after --repair: %d instances; want fewer than the %d acknowledged (the ones after the damage dropped), more than the %d before this log", got, acked, before)
	}
	t.Logf("after --repair: %d of %d acknowledged instances", got, acked)
	if code, _, body := register(t, base, "after-repair"); code != 200 {
		t.Fatalf("register after --repair: %d %s", code, body)
	}
}

// registerBatch registers 10 instances of service disk with 24 KiB of
// metadata each and returns the status and body.
func registerBatch(t *testing.T, base string, n int) (int, string) {
	t.Helper()
	var insts []map[string]any
	for i := range 10 {
		md := map[string]string{}
		for k := range 8 {
			md[fmt.Sprintf("k%d", k)] = strings.Repeat(string(rune('a'+k)), 3000)
		}
		insts = append(insts, map[string]any{"id": fmt.Sprintf("b%04d-%d", n, i), "service": "disk", "host": "10.9.0.3",
			"port": 1000 + nextPort.Add(1), "metadata": md})
	}
	body, _ := json.Marshal(map[string]any{"instances": insts})
	resp, err := http.Post(base+"/v1/instances", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("register batch %d: %v (the server is down?)", n, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServerOnFullDiskWithoutReserve: with --data-reserve off pebble meets
// the full disk itself, as in the issue, where the server answered a few
// 500s and then panicked inside pebble's commit. Now the write that meets
// it answers 503 (outcome unknown), the next ones 503 at once, the server
// stays up and serves reads, and restarted once space is freed it has
// every acknowledged write.
func TestServerOnFullDiskWithoutReserve(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a real server and mounts a tmpfs")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	mnt := disktest.Tmpfs(t, 24<<20, false)
	data := filepath.Join(mnt, "data")
	addr := freeAddr(t)
	base := "http://" + addr
	srv := startServer(t, bin, data, addr, "--data-reserve", "off")
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() }) // before the unmount
	filler := disktest.Fill(t, mnt, 2<<20)
	acked, code, body := 0, 0, ""
	for n := 0; ; n++ {
		if n == 200 {
			t.Fatal("200 batches of 240 KiB into 2 MiB were all acknowledged")
		}
		if code, body = registerBatch(t, base, n); code != 200 {
			break
		}
		acked += 10
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "may or may not") || !strings.Contains(body, data) {
		t.Fatalf("write that met the full disk: %d %s; want 503, outcome unknown, naming %s", code, body, data)
	}
	t.Logf("after %d acknowledged: %d %s", acked, code, body)
	if code, _, body := register(t, base, "next"); code != http.StatusServiceUnavailable {
		t.Fatalf("write after the failure: %d %s", code, body)
	}
	if n := countInstances(t, base); n < acked {
		t.Fatalf("read after the failure: %d instances, want the %d acknowledged", n, acked)
	}
	srv.Process.Kill()
	srv.Wait()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	srv = startServer(t, bin, data, addr, "--data-reserve", "1MiB")
	if n := countInstances(t, base); n < acked {
		t.Fatalf("restarted once space is freed: %d instances, want the %d acknowledged", n, acked)
	}
	if code, _, body := register(t, base, "after"); code != 200 {
		t.Fatalf("write after the restart: %d %s", code, body)
	}
}
