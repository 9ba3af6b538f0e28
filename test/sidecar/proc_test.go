package sidecar_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binDir holds the sextant binary the tests built once, removed when they end.
var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var buildBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "sextant-sidecar-test")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "sextant")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/sextant-mesh/sextant/cmd/sextant").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

func sextantBin(t *testing.T) string {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// syncBuffer is a process's output, written by exec's copier goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a process the test started; stopped (SIGTERM, then SIGKILL after
// 10 s) when the test ends, its output logged if the test failed.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

func start(t *testing.T, name string, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s's output:\n%s", name, p.out)
		}
	})
	return p
}

// stop sends SIGTERM and waits for the end (SIGKILL after 10 s); it
// returns the exit state.
func (p *proc) stop() *os.ProcessState {
	select {
	case <-p.done:
		return p.cmd.ProcessState
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return p.cmd.ProcessState
}

// waitHTTP waits until GET url answers 200.
func waitHTTP(t *testing.T, p *proc, url string) {
	t.Helper()
	c := &http.Client{Timeout: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		if resp, err := c.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %s not ready\n%s", p.name, url, p.out)
		case <-p.done:
			t.Fatalf("%s exited: %s\n%s", p.name, p.cmd.ProcessState, p.out)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitTrue polls f every 50 ms until it holds or d passes.
func waitTrue(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !f() {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
