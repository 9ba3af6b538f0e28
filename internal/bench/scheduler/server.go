package scheduler

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sextant-mesh/sextant/internal/placement"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

// WriteStore writes a scheduler_perf-like cluster of nodes and placements
// (the basic pod, round robin) into the embedded store in dir, as the
// server's writes would have left it, in commits of 10,000 records.
func WriteStore(dir string, nodes, placements int) error {
	st, err := embedded.Open(dir)
	if err != nil {
		return err
	}
	defer st.Close()
	const chunk = 10000
	var ops []store.Op
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		_, err := st.Commit([]store.Txn{{Ops: ops}}, false)
		ops = ops[:0]
		return err
	}
	for i := range nodes {
		rec, err := placement.CompileNode(Node(i), "")
		if err != nil {
			return err
		}
		rec.Seq = uint64(i + 1)
		b, _ := rec.MarshalBinary()
		ops = append(ops, store.Op{Kind: store.Nodes, Key: rec.Name, Value: b})
		if len(ops) == chunk {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	w, err := placement.CompilePod(Pod("startup", 0), "")
	if err != nil {
		return err
	}
	for i := range placements {
		p := w.Placement(fmt.Sprintf("node-%06d", i%nodes))
		p.Name = fmt.Sprintf("startup-%07d", i)
		b, _ := p.MarshalBinary()
		ops = append(ops, store.Op{Kind: store.Placements, Key: p.Key.String(), Value: b})
		if len(ops) == chunk {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	// One durable commit at the end makes everything before it durable.
	_, err = st.Commit([]store.Txn{{Ops: []store.Op{{Kind: store.System, Key: "bench-startup", Value: []byte{1}}}}}, true)
	return err
}

// ServerStartup is the start-up of a real "sextant server" process over a
// store holding the cluster: from exec to /readyz answering 200.
type ServerStartup struct {
	Nodes        int     `json:"nodes"`
	Placements   int     `json:"placements"`
	WriteSeconds float64 `json:"write_store_seconds"`
	ReadySeconds float64 `json:"ready_seconds"`     // exec to /readyz 200: process start, store open, load, index
	ReadyCPU     float64 `json:"ready_cpu_seconds"` // user+system CPU of the server until ready: robust to other load
	PeakRSSBytes int64   `json:"peak_rss_bytes"`    // VmHWM of the server process
	RSSBytes     int64   `json:"rss_bytes"`         // VmRSS once ready
	ServerNodes  int     `json:"server_nodes"`      // what the server reports holding (its gauges)
	ServerPlaced int     `json:"server_placements"`
}

// RunServerStartup writes the cluster into a store in a temporary
// directory, starts bin ("sextant") as a server over it, and times it
// until ready.
func RunServerStartup(ctx context.Context, bin string, nodes, placements int) (*ServerStartup, error) {
	dir, err := os.MkdirTemp("", "sextant-bench-startup-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := &ServerStartup{Nodes: nodes, Placements: placements}
	t0 := time.Now()
	if err := WriteStore(filepath.Join(dir, "data"), nodes, placements); err != nil {
		return nil, fmt.Errorf("bench: write store: %w", err)
	}
	out.WriteSeconds = time.Since(t0).Seconds()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.CommandContext(ctx, bin, "server", "--data", filepath.Join(dir, "data"), "--http", addr, "--xds", "", "--log-level", "warn")
	cmd.Stderr = os.Stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Since(start) > 2*time.Minute {
			return nil, fmt.Errorf("bench: the server was not ready in 2 minutes")
		}
		resp, err := hc.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	out.ReadySeconds = time.Since(start).Seconds()
	out.ReadyCPU = procCPU(cmd.Process.Pid)
	out.PeakRSSBytes, out.RSSBytes = procMemory(cmd.Process.Pid)
	resp, err := hc.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 64<<10)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	out.ServerNodes = gauge(sb.String(), "sextant_scheduler_nodes")
	out.ServerPlaced = gauge(sb.String(), "sextant_scheduler_placements")
	if out.ServerNodes != nodes || out.ServerPlaced != placements {
		return nil, fmt.Errorf("bench: the server holds %d nodes and %d placements, want %d and %d", out.ServerNodes, out.ServerPlaced, nodes, placements)
	}
	return out, nil
}

// procMemory reads a process's peak and current resident set (bytes).
func procMemory(pid int) (peak, cur int64) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmHWM:":
			peak = kb * 1024
		case "VmRSS:":
			cur = kb * 1024
		}
	}
	return peak, cur
}

// procCPU reads a process's user+system CPU seconds from /proc (in clock
// ticks of 1/100 s, Linux's USER_HZ).
func procCPU(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses: utime and
	// stime are the 12th and 13th of them.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

// gauge reads one unlabelled metric from Prometheus text.
func gauge(text, name string) int {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f)
		}
	}
	return -1
}
