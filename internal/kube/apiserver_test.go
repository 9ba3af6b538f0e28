package kube

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The tests run against a real kube-apiserver over an embedded etcd:
// test/kube's kube-testserver, a nested Go module (k8s.io/kubernetes stays
// out of Sextant's go.mod). `make test` builds it once and passes it in
// SEXTANT_KUBE_TESTSERVER; without it, the first test builds it here.

var (
	buildOnce sync.Once
	built     string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedStop != nil {
		sharedStop()
	}
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func testServerBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SEXTANT_KUBE_TESTSERVER"); p != "" {
		return p
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "kube-testserver")
		if buildErr != nil {
			return
		}
		built = filepath.Join(buildDir, "kube-testserver")
		cmd := exec.Command("go", "build", "-o", built, "./cmd/kube-testserver")
		cmd.Dir = filepath.Join("..", "..", "test", "kube")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("building test/kube's kube-testserver (a real kube-apiserver, from the module proxy): %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// apiServer is a running kube-testserver.
type apiServer struct {
	kubeconfig string
	cfg        *rest.Config
}

// startAPIServerProcess starts a kube-apiserver; stop stops it, and so
// does the end of the test process (its stdin closes).
func startAPIServerProcess(t *testing.T) (_ *apiServer, stop func()) {
	t.Helper()
	bin := testServerBinary(t)
	// Not t.TempDir: the server outlives the test that starts it.
	dir, err := os.MkdirTemp("", "kube-testserver-run")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-dir", dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop = func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		os.RemoveAll(dir)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
				ready <- p
			}
		}
		close(ready)
	}()
	var kubeconfig string
	ok := false
	defer func() {
		if !ok {
			stop()
		}
	}()
	select {
	case p, running := <-ready:
		if !running {
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("kube-testserver exited before it was ready:\n%s", tail(log))
		}
		kubeconfig = p
	case <-time.After(3 * time.Minute):
		log, _ := os.ReadFile(logf.Name())
		t.Fatalf("kube-testserver not ready after 3 minutes:\n%s", tail(log))
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ok = true
	return &apiServer{kubeconfig: kubeconfig, cfg: cfg}, stop
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
