// Command kube-testserver runs a real kube-apiserver (k8s.io/kubernetes'
// own test server) over an embedded etcd, both on loopback, for Sextant's
// Kubernetes tests. It writes a kubeconfig for a cluster-admin client, prints
// "ready KUBECONFIG" on stdout and serves until its stdin closes or it gets
// SIGINT/SIGTERM, so a test that dies takes the server with it.
//
// It lives in its own Go module (test/kube) so that Sextant's main go.mod
// does not carry kube-apiserver and etcd. No controllers run: tests write
// the objects (EndpointSlices included) themselves.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubetesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
)

func main() {
	dir := flag.String("dir", "", "directory for etcd's data and the kubeconfig (required)")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "kube-testserver: -dir is required")
		os.Exit(2)
	}
	if err := run(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "kube-testserver:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// The parent holds our stdin: EOF means it is gone.
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()

	etcd, etcdURL, err := startEtcd(filepath.Join(dir, "etcd"))
	if err != nil {
		return err
	}
	defer etcd.Close()

	tb := newProgramTB()
	defer tb.runCleanups()
	storage := storagebackend.NewDefaultConfig("/registry", nil)
	storage.Transport.ServerList = []string{etcdURL}
	opts := kubetesting.NewDefaultTestServerOptions()
	opts.DisableInvariantChecks = true
	// RBAC, as a cluster authorizes: tests check that deploy/kubernetes'
	// roles are what Sextant needs (the admin client is system:masters).
	server, err := kubetesting.StartTestServer(tb, opts, []string{"--endpoint-reconciler-type=none", "--authorization-mode=RBAC"}, storage)
	if err != nil {
		return fmt.Errorf("start kube-apiserver: %w", err)
	}
	defer server.TearDownFn()

	kubeconfig := filepath.Join(dir, "kubeconfig")
	cc := server.ClientConfig
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{
		Server:                   cc.Host,
		CertificateAuthorityData: cc.TLSClientConfig.CAData,
		TLSServerName:            cc.TLSClientConfig.ServerName,
	}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: cc.BearerToken}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin"}
	cfg.CurrentContext = "test"
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	fmt.Printf("ready %s\n", kubeconfig)
	<-ctx.Done()
	return nil
}

// startEtcd runs an embedded single-member etcd on loopback.
func startEtcd(dir string) (*embed.Etcd, string, error) {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.LogLevel = "error"
	cfg.UnsafeNoFsync = true // test data; fsync only slows the shared machine
	clientURL, err := freeURL()
	if err != nil {
		return nil, "", err
	}
	peerURL, err := freeURL()
	if err != nil {
		return nil, "", err
	}
	cfg.ListenClientUrls = []url.URL{*clientURL}
	cfg.AdvertiseClientUrls = []url.URL{*clientURL}
	cfg.ListenPeerUrls = []url.URL{*peerURL}
	cfg.AdvertisePeerUrls = []url.URL{*peerURL}
	cfg.InitialCluster = cfg.Name + "=" + peerURL.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		e.Close()
		return nil, "", fmt.Errorf("etcd not ready after a minute")
	}
	return e, clientURL.String(), nil
}

func freeURL() (*url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("free port: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	return &url.URL{Scheme: "http", Host: addr}, nil
}

// programTB is the ktesting.TB the test server asks for, outside of
// `go test`: it logs to stderr and runs cleanups at exit.
type programTB struct {
	mu       sync.Mutex
	cleanups []func()
	failed   bool
	tmp      string
}

func newProgramTB() *programTB { return &programTB{} }

func (t *programTB) runCleanups() {
	t.mu.Lock()
	c := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(c) - 1; i >= 0; i-- {
		c[i]()
	}
	if t.tmp != "" {
		os.RemoveAll(t.tmp)
	}
}

func (t *programTB) Attr(key, value string) {}
func (t *programTB) Chdir(dir string)       { _ = os.Chdir(dir) }
func (t *programTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}
func (t *programTB) Error(args ...any) { t.Log(args...); t.Fail() }
func (t *programTB) Errorf(format string, args ...any) {
	t.Logf(format, args...)
	t.Fail()
}
func (t *programTB) Fail() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = true
}
func (t *programTB) FailNow() { t.Fail(); panic("kube-testserver: FailNow") }
func (t *programTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}
func (t *programTB) Fatal(args ...any)                 { t.Log(args...); t.FailNow() }
func (t *programTB) Fatalf(format string, args ...any) { t.Logf(format, args...); t.FailNow() }
func (t *programTB) Helper()                           {}
func (t *programTB) Log(args ...any)                   { fmt.Fprintln(os.Stderr, args...) }
func (t *programTB) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}
func (t *programTB) Name() string                { return "kube-testserver" }
func (t *programTB) Setenv(key, value string)    { _ = os.Setenv(key, value) }
func (t *programTB) Skip(args ...any)            { t.Log(args...) }
func (t *programTB) Skipf(f string, args ...any) { t.Logf(f, args...) }
func (t *programTB) SkipNow()                    {}
func (t *programTB) Skipped() bool               { return false }
func (t *programTB) TempDir() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tmp == "" {
		t.tmp, _ = os.MkdirTemp("", "kube-testserver")
	}
	return t.tmp
}
