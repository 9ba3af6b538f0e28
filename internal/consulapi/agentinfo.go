package consulapi

import (
	"bufio"
	"bytes"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sextant-mesh/sextant/internal/acl"
)

// The agent's own process, as Consul's tools read it: /v1/agent/metrics
// (Consul's in-memory telemetry summary) answers the Go runtime's gauges
// under Consul's names, consul.<hostname>.runtime.* (Sextant's own
// metrics are Prometheus', /metrics on --http); /v1/agent/host the
// machine's host, memory and CPU count. Any valid token reads them, as
// any reads /metrics.

// metricsGauge is one of Consul's GaugeValue.
type metricsGauge struct {
	Name   string
	Value  float32
	Labels map[string]string
}

// GET /v1/agent/metrics
func (a *API) agentMetrics(w http.ResponseWriter, r *http.Request) error {
	if err := acl.Authenticated(r.Context()); err != nil {
		return err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	host, _ := os.Hostname()
	prefix := "consul."
	if host != "" {
		prefix += host + "."
	}
	var gauges []metricsGauge
	for _, g := range []struct {
		name string
		v    float64
	}{
		{"runtime.alloc_bytes", float64(ms.Alloc)},
		{"runtime.free_count", float64(ms.Frees)},
		{"runtime.heap_objects", float64(ms.HeapObjects)},
		{"runtime.malloc_count", float64(ms.Mallocs)},
		{"runtime.num_goroutines", float64(runtime.NumGoroutine())},
		{"runtime.sys_bytes", float64(ms.Sys)},
		{"runtime.total_gc_pause_ns", float64(ms.PauseTotalNs)},
		{"runtime.total_gc_runs", float64(ms.NumGC)},
	} {
		gauges = append(gauges, metricsGauge{Name: prefix + g.name, Value: float32(g.v), Labels: map[string]string{}})
	}
	// Consul's summary is of the current 10 s interval, named by its
	// start in Go's time format.
	start := time.Now().UTC().Truncate(10 * time.Second)
	return writeJSON(w, map[string]any{
		"Timestamp": start.String(), "Gauges": gauges,
		"Points": []any{}, "Counters": []any{}, "Samples": []any{},
	})
}

// GET /v1/agent/host
func (a *API) agentHost(w http.ResponseWriter, r *http.Request) error {
	if err := acl.Authenticated(r.Context()); err != nil {
		return err
	}
	var errs []string
	host, _ := os.Hostname()
	info := map[string]any{"hostname": host, "os": runtime.GOOS, "kernelArch": runtime.GOARCH}
	var u syscall.Utsname
	if err := syscall.Uname(&u); err == nil {
		info["kernelVersion"] = utsString(u.Release[:])
	}
	if b, err := os.ReadFile("/proc/uptime"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if up, err := strconv.ParseFloat(f[0], 64); err == nil {
				info["uptime"] = uint64(up)
				info["bootTime"] = uint64(time.Now().Unix() - int64(up))
			}
		}
	}
	mem, err := memInfo()
	if err != nil {
		errs = append(errs, "memory: "+err.Error())
	}
	return writeJSON(w, map[string]any{
		"CollectionTime": time.Now().UnixNano(), "Host": info, "Memory": mem,
		"CPU": map[string]any{"count": runtime.NumCPU()}, "Errors": errs,
	})
}

func utsString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

// memInfo is the machine's memory in bytes, from /proc/meminfo.
func memInfo() (map[string]uint64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return nil, err
	}
	kb := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err == nil {
			kb[k] = n * 1024
		}
	}
	total, avail := kb["MemTotal"], kb["MemAvailable"]
	return map[string]uint64{"total": total, "available": avail, "used": total - min(avail, total), "free": kb["MemFree"]}, nil
}
