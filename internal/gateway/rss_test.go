package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sextant-mesh/sextant/internal/gateway"
	"github.com/sextant-mesh/sextant/internal/gateway/xdsclient"
)

// childEnv names the control plane a child gateway process follows.
const childEnv = "SEXTANT_GATEWAY_TEST_CHILD_XDS"

// TestGatewayChild is not a test: it is the gateway process that
// TestStreamGiBInBoundedMemory starts (this test binary, run again), so
// that its memory is measured alone. It prints its address, then serves
// until its stdin closes.
func TestGatewayChild(t *testing.T) {
	cpAddr := os.Getenv(childEnv)
	if cpAddr == "" {
		t.Skip("run by TestStreamGiBInBoundedMemory")
	}
	g := gateway.New(gateway.Options{})
	conn, err := grpc.NewClient(cpAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	xc, err := xdsclient.New(conn, xdsclient.Options{Node: &core.Node{Id: nodeID}, Types: gateway.XDSTypes(), Handler: g,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = xc.Run(ctx) }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Serve(ln) }()
	fmt.Println("ADDR", ln.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
	defer c()
	_ = g.Shutdown(sctx)
	<-done
}

// openZero opens /dev/zero: bodies of any size, never held.
func openZero(t *testing.T) *os.File {
	f, err := os.Open("/dev/zero")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func vmRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// A 1 GiB upload and a 1 GiB download pass through a gateway process whose
// resident memory grows by less than 64 MiB (sampled every 20 ms). With
// -short or the race detector (make test), 256 MiB each way: under the
// race detector 1 GiB takes about 25 s each way on a loaded 2-core machine.
func TestStreamGiBInBoundedMemory(t *testing.T) {
	size := int64(1 << 30)
	if testing.Short() || raceEnabled {
		size = 256 << 20
	}
	var got atomic.Int64
	zero := openZero(t)
	u := startUpstream(t, "big", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			n, err := io.Copy(io.Discard, r.Body)
			got.Store(n)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			fmt.Fprintf(w, "n=%d", n)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		_, _ = io.Copy(w, io.LimitReader(zero, size))
	})
	rt := prefixRoute("/", "big")
	rt.GetRoute().Timeout = durationpb.New(0) // none: Envoy's default, 15 s, could cut a slow run
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, rt)), edsCluster("big"), assignment("big", ep{u: u}))

	cmd := exec.Command(os.Args[0], "-test.run", "^TestGatewayChild$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+cp.addr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	var addr string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		t.Fatal("the gateway process printed no address")
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 5 * time.Minute}
	waitFor(t, "the gateway process to route", func() bool {
		resp, err := client.Post("http://"+addr+"/warm", "application/octet-stream", strings.NewReader("x"))
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(b) == "n=1"
	})
	pid := cmd.Process.Pid
	base := vmRSS(pid)
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			if r := vmRSS(pid); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-stop:
				return
			case <-tk.C:
			}
		}
	}()

	t0 := time.Now()
	req, _ := http.NewRequest("POST", "http://"+addr+"/up", io.LimitReader(zero, size))
	req.ContentLength = size
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	up := time.Since(t0)
	if resp.StatusCode != 200 || string(b) != "n="+strconv.FormatInt(size, 10) {
		t.Fatalf("upload: %d %q (upstream got %d)", resp.StatusCode, b, got.Load())
	}
	t0 = time.Now()
	resp, err = client.Get("http://" + addr + "/down")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	down := time.Since(t0)
	if err != nil || n != size {
		t.Fatalf("download: %d bytes, %v", n, err)
	}
	close(stop)
	<-sampled
	growth := peak.Load() - base
	t.Logf("%d MiB each way: upload %v (%.0f MB/s), download %v (%.0f MB/s); gateway RSS %d MiB, peak +%d MiB",
		size>>20, up.Round(time.Millisecond), float64(size)/up.Seconds()/1e6, down.Round(time.Millisecond),
		float64(size)/down.Seconds()/1e6, base>>20, growth>>20)
	if base == 0 {
		t.Fatal("could not read the gateway process's RSS")
	}
	if growth >= 64<<20 {
		t.Fatalf("gateway RSS grew by %d MiB moving %d MiB each way (limit 64 MiB)", growth>>20, size>>20)
	}
}
