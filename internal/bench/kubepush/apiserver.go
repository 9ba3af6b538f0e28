package kubepush

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// apiServer is a running kube-testserver (test/kube): a real
// kube-apiserver over an embedded etcd, on loopback.
type apiServer struct {
	kubeconfig string
	cfg        *rest.Config
	cs         *kubernetes.Clientset
	dyn        dynamic.Interface
	stop       func()
}

// startAPIServer runs bin and waits until it prints "ready KUBECONFIG". Its
// stdin is a pipe: closing it (stop) ends the server, and so does the end
// of this process.
func startAPIServer(ctx context.Context, bin string, logs io.Writer) (*apiServer, error) {
	dir, err := os.MkdirTemp("", "sextant-bench-kube-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-dir", dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var tail bytes.Buffer
	cmd.Stderr = &tailWriter{buf: &tail, also: logs}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("kubepush: start %s: %w", bin, err)
	}
	stop := func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		os.RemoveAll(dir)
	}
	ready := make(chan string, 1)
	go func() {
		defer close(ready)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
				ready <- p
			}
		}
	}()
	var kubeconfig string
	select {
	case p, ok := <-ready:
		if !ok {
			stop()
			return nil, fmt.Errorf("kubepush: kube-testserver exited before it was ready:\n%s", tail.String())
		}
		kubeconfig = p
	case <-time.After(3 * time.Minute):
		stop()
		return nil, fmt.Errorf("kubepush: kube-testserver not ready after 3 minutes:\n%s", tail.String())
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		stop()
		return nil, err
	}
	// The bench writes hundreds of objects a second: the client's default
	// 5 QPS would be the bottleneck, not the control planes.
	cfg.QPS, cfg.Burst = 5000, 5000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		stop()
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		stop()
		return nil, err
	}
	return &apiServer{kubeconfig: kubeconfig, cfg: cfg, cs: cs, dyn: dyn, stop: stop}, nil
}

// tailWriter keeps the last 8 KB written (a failed start's reason) and
// passes everything to also, when set.
type tailWriter struct {
	buf  *bytes.Buffer
	also io.Writer
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if w.buf.Len() > 8<<10 {
		b := w.buf.Bytes()[w.buf.Len()-8<<10:]
		w.buf.Reset()
		w.buf.Write(b)
	}
	if w.also != nil {
		w.also.Write(p)
	}
	return len(p), nil
}

// IstioModule is the istio.io/istio whose CRDs (manifests/charts/base) the
// bench installs when not given a file: the version tools/istiod pins and
// internal/kube's tests read.
const IstioModule = "istio.io/istio@v0.0.0-20260827124520-eed52ebb66ad"

// IstioCRDFile finds Istio's crd-all.gen.yaml in the module cache (go mod
// download: the module proxy or the cache is needed).
func IstioCRDFile(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", IstioModule)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GO111MODULE=on", "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("kubepush: go mod download %s (give --istio-crds instead): %w\n%s", IstioModule, err, out)
	}
	var mod struct{ Dir string }
	if err := yaml.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("kubepush: go mod download %s: %s", IstioModule, out)
	}
	return filepath.Join(mod.Dir, "manifests", "charts", "base", "files", "crd-all.gen.yaml"), nil
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// installCRDs creates the CustomResourceDefinitions of file (a multi-document
// YAML) and waits until they are established and the Istio kinds the bench
// writes are served.
func (a *apiServer) installCRDs(ctx context.Context, file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("kubepush: Istio's CRDs: %w", err)
	}
	var names []string
	for _, doc := range bytes.Split(b, []byte("\n---")) {
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return fmt.Errorf("kubepush: %s: %w", file, err)
		}
		if m == nil || m["kind"] != "CustomResourceDefinition" {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if _, err := a.dyn.Resource(crdGVR).Create(ctx, u, createOpts); err != nil {
			return fmt.Errorf("kubepush: create CRD %s: %w", u.GetName(), err)
		}
		names = append(names, u.GetName())
	}
	if len(names) == 0 {
		return fmt.Errorf("kubepush: %s holds no CustomResourceDefinition", file)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, n := range names {
		for {
			u, err := a.dyn.Resource(crdGVR).Get(ctx, n, getOpts)
			if err == nil && established(u) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("kubepush: CRD %s not established after 2 minutes (%v)", n, err)
			}
			if err := sleep(ctx, 100*time.Millisecond); err != nil {
				return err
			}
		}
	}
	// Established may come a moment before the kind is served.
	for _, gvr := range []schema.GroupVersionResource{vsGVR, drGVR} {
		for {
			_, err := a.dyn.Resource(gvr).Namespace("default").List(ctx, listOne)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("kubepush: %s not served: %w", gvr.Resource, err)
			}
			if err := sleep(ctx, 100*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

func established(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
