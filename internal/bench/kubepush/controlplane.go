package kubepush

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// controlPlane is one control plane process reading the API server: Sextant
// ("sextant server --kubeconfig") or a stock istiod.
type controlPlane struct {
	name string
	xds  string // plaintext ADS address
	cmd  *exec.Cmd
	dir  string
	done chan struct{} // closed when the process has exited
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("kubepush: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startSextant runs bin as "sextant server" on an embedded store in a
// temporary directory, syncing the bench namespace of the API server.
func startSextant(ctx context.Context, bin, kubeconfig string, logs io.Writer) (*controlPlane, error) {
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	xdsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sextant-bench-sextant-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "server", "--data", dir, "--http", httpAddr, "--xds", xdsAddr, "--log-level", "warn",
		"--kubeconfig", kubeconfig, "--kube-namespaces", Namespace, "--kube-ready-timeout", "0")
	cp, err := start("sextant", cmd, dir, xdsAddr, logs)
	if err != nil {
		return nil, err
	}
	if err := cp.waitHTTP(ctx, "http://"+httpAddr+"/readyz"); err != nil {
		cp.stop()
		return nil, err
	}
	return cp, nil
}

// meshConfig is istiod's mesh config file: Istio's defaults, with the
// domain and trust domain of the API server's cluster.
const meshConfig = `trustDomain: cluster.local
rootNamespace: istio-system
defaultConfig:
  discoveryAddress: istiod.istio-system.svc:15012
`

// startIstiod runs a stock istiod (pilot-discovery discovery), configured
// only by flags and environment: the API server's kubeconfig, namespace
// istio-system, its CA server and the certificates it would serve off (no
// TLS xDS port, no webhook port), its plaintext xDS port on loopback.
func startIstiod(ctx context.Context, bin, kubeconfig string, logs io.Writer) (*controlPlane, error) {
	var addrs [3]string
	for i := range addrs {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	xdsAddr, httpAddr, monAddr := addrs[0], addrs[1], addrs[2]
	dir, err := os.MkdirTemp("", "sextant-bench-istiod-")
	if err != nil {
		return nil, err
	}
	mesh := filepath.Join(dir, "mesh")
	if err := os.WriteFile(mesh, []byte(meshConfig), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "discovery",
		"--kubeconfig", kubeconfig,
		"--meshConfig", mesh,
		"--networksConfig", filepath.Join(dir, "meshNetworks"), // absent: no networks
		"--namespace", "istio-system",
		"--clusterID", "Kubernetes",
		"--domain", "cluster.local",
		"--grpcAddr", xdsAddr,
		"--httpAddr", httpAddr,
		"--monitoringAddr", monAddr,
		"--secureGRPCAddr", "",
		"--httpsAddr", "",
		"--shutdownDuration", "1s",
		"--log_output_level", "default:warn")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"POD_NAMESPACE=istio-system",
		"POD_NAME=istiod-bench",
		"REVISION=default",
		"CLUSTER_ID=Kubernetes",
		"ENABLE_CA_SERVER=false",
		"PILOT_CERT_PROVIDER=none",
		"VALIDATION_WEBHOOK_CONFIG_NAME=",
		"INJECTION_WEBHOOK_CONFIG_NAME=",
		"PILOT_ENABLE_GATEWAY_API=false",
		"PILOT_ENABLE_GATEWAY_API_STATUS=false",
		"PILOT_ENABLE_GATEWAY_API_DEPLOYMENT_CONTROLLER=false",
		"PILOT_ENABLE_ANALYSIS=false",
	)
	cp, err := start("istiod", cmd, dir, xdsAddr, logs)
	if err != nil {
		return nil, err
	}
	if err := cp.waitHTTP(ctx, "http://"+httpAddr+"/ready"); err != nil {
		cp.stop()
		return nil, err
	}
	return cp, nil
}

func start(name string, cmd *exec.Cmd, dir, xds string, logs io.Writer) (*controlPlane, error) {
	if logs != nil {
		cmd.Stdout, cmd.Stderr = logs, logs
	}
	// Its own process group: a stop reaches any child it starts.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("kubepush: start %s (%s): %w", name, cmd.Path, err)
	}
	cp := &controlPlane{name: name, xds: xds, cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() { cmd.Wait(); close(cp.done) }()
	return cp, nil
}

// waitHTTP waits until GET u answers 200, the process exits, or 5 minutes.
func (cp *controlPlane) waitHTTP(ctx context.Context, u string) error {
	deadline := time.Now().Add(5 * time.Minute)
	c := &http.Client{Timeout: 5 * time.Second}
	var last string
	for {
		if r, err := c.Get(u); err == nil {
			b, _ := io.ReadAll(io.LimitReader(r.Body, 512))
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", r.StatusCode, strings.TrimSpace(string(b)))
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubepush: %s not ready after 5 minutes (%s: %s)", cp.name, u, last)
		}
		select {
		case <-cp.done:
			return fmt.Errorf("kubepush: %s exited before it was ready (%s) (--server-logs shows its log)", cp.name, cp.cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stop ends the process (SIGTERM, SIGKILL after 15 s) and removes its
// directory.
func (cp *controlPlane) stop() {
	pid := cp.cmd.Process.Pid
	syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-cp.done:
	case <-time.After(15 * time.Second):
		syscall.Kill(-pid, syscall.SIGKILL)
		<-cp.done
	}
	os.RemoveAll(cp.dir)
}

// cpuSeconds is the process's user and system CPU time so far
// (/proc/PID/stat), the same measure for both control planes.
func (cp *controlPlane) cpuSeconds() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cp.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("kubepush: %s's CPU: %w", cp.name, err)
	}
	// Fields after the command name, which may hold spaces: state is
	// field 3, utime 14, stime 15.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("kubepush: %s's /proc stat: %q", cp.name, s)
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100, nil // USER_HZ: 100 on Linux
}

// rssBytes is the process's resident memory (/proc/PID/status VmRSS).
func (cp *controlPlane) rssBytes() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cp.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("kubepush: %s's memory: %w", cp.name, err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("kubepush: %s's /proc status has no VmRSS", cp.name)
}
