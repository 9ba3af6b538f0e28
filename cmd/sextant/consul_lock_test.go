package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"
)

// lockHolderEnv names the server a lock holder process (this test binary
// run again as TestConsulLockHolderProcess) locks on.
const lockHolderEnv = "SEXTANT_LOCK_HOLDER_CONSUL"

// TestConsulLockHolderProcess is not a test: run by
// TestConsulLockHolderKilled as a separate process, it takes the lock
// "leader" with hashicorp's api.Lock (a session of TTL 1s, renewed by the
// client), prints "locked SESSION" and holds it until killed.
func TestConsulLockHolderProcess(t *testing.T) {
	addr := os.Getenv(lockHolderEnv)
	if addr == "" {
		t.Skip("a helper process of TestConsulLockHolderKilled")
	}
	cfg := capi.DefaultConfig()
	cfg.Address = addr
	c, err := capi.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The least lock delay the client can ask (it sends 1ms; 0 would be
	// the default 15s), so that the test measures the TTL. An acquire that
	// still meets it (woken within 1ms of the invalidation) is retried by
	// the client after 5s.
	l, err := c.LockOpts(&capi.LockOptions{Key: "leader", Value: []byte(fmt.Sprint(os.Getpid())), SessionTTL: "1s", LockDelay: time.Millisecond, LockWaitTime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("waiting")
	lost, err := l.Lock(nil)
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := c.KV().Get("leader", nil)
	if err != nil || p == nil {
		t.Fatalf("reading the lock held: %v", err)
	}
	fmt.Println("locked", p.Session)
	<-lost
	fmt.Println("lost")
	os.Exit(3)
}

// lockHolder is a running TestConsulLockHolderProcess and its output lines.
type lockHolder struct {
	cmd   *exec.Cmd
	lines chan string
}

func startLockHolder(t *testing.T, consulAddr string) *lockHolder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestConsulLockHolderProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), lockHolderEnv+"="+consulAddr)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &lockHolder{cmd: cmd, lines: make(chan string, 16)}
	go func() { // ends when the process's stdout closes
		defer close(h.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return h
}

// next is the holder's next line starting with prefix, within d ("" if
// none came).
func (h *lockHolder) next(prefix string, d time.Duration) string {
	deadline := time.After(d)
	for {
		select {
		case l, ok := <-h.lines:
			if !ok {
				return ""
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			return ""
		}
	}
}

// TestConsulLockHolderKilled: a process holding a lock through
// hashicorp's api.Lock is killed with -9. While it lived, its renewals
// kept its session, and a second process waiting for the lock did not get
// it; once dead, its session expires (twice its TTL of 1s, with
// --consul-session-ttl-min 1s) and the second process gets the lock,
// never while the first held it.
func TestConsulLockHolderKilled(t *testing.T) {
	_, consulAddr := startConsulServer(t, "--consul-session-ttl-min", "1s")
	a := startLockHolder(t, consulAddr)
	locked := a.next("locked ", 20*time.Second)
	if locked == "" {
		t.Fatal("the first process did not take the free lock")
	}
	aSession := strings.TrimPrefix(locked, "locked ")
	b := startLockHolder(t, consulAddr)
	if b.next("waiting", 20*time.Second) == "" {
		t.Fatal("the second process did not start")
	}
	// Three times the TTL, more than the 2×TTL after which a session not
	// renewed expires: the living holder's renewals keep its lock.
	if l := b.next("locked", 3*time.Second); l != "" {
		t.Fatalf("the second process took the lock while the first held it: %s", l)
	}
	kv := consulClient(t, consulAddr, "").KV()
	if p, _, err := kv.Get("leader", nil); err != nil || p == nil || p.Session != aSession {
		t.Fatalf("the lock is not the first process's (session %s): %+v %v", aSession, p, err)
	}
	if err := a.cmd.Process.Kill(); err != nil { // SIGKILL: no release, no destroy
		t.Fatal(err)
	}
	killed := time.Now()
	a.cmd.Wait()
	locked = b.next("locked ", 15*time.Second)
	if locked == "" {
		t.Fatal("the second process did not get the lock within 15s of the first's death")
	}
	took := time.Since(killed)
	// The dead holder's session was renewed every 0.5 s until the kill and
	// lives twice its TTL past its last renewal: at least 1.5 s more.
	if took < time.Second {
		t.Fatalf("the lock passed %v after the kill: before the holder's session could expire", took)
	}
	bSession := strings.TrimPrefix(locked, "locked ")
	if bSession == aSession {
		t.Fatal("the second process holds the dead one's session")
	}
	if p, _, err := kv.Get("leader", nil); err != nil || p == nil || p.Session != bSession {
		t.Fatalf("the lock is not the second process's (session %s): %+v %v", bSession, p, err)
	}
	t.Logf("the lock passed %v after the holder was killed", took.Round(10*time.Millisecond))
}
