package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// syncBuffer is a bytes.Buffer safe to read while the command writes.
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

// TestRegisterKeepalive runs "sextant register --keepalive" against the
// real server stack: the instance stays healthy past 3 x TTL, and ending
// the command (Ctrl-C is its context ending) deregisters it.
func TestRegisterKeepalive(t *testing.T) {
	srv := apitest.Start(t)
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.HTTPClient().CloseIdleConnections()
	root := &cobra.Command{Use: "sextant", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newTopRegisterCmd())
	var out, errOut syncBuffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"register", "--server", srv.URL, "--id", "ka-1", "--service", "orders",
		"--host", "10.0.0.1", "--port", "8080", "--ttl", "1s", "--keepalive", "-o", "json"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(errOut.String(), "keeping 1 instance") {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no keepalive message; stdout %q stderr %q, err %v", out.String(), errOut.String(), <-done)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var ids struct{ IDs []string }
	if err := json.Unmarshal([]byte(out.String()), &ids); err != nil || len(ids.IDs) != 1 || ids.IDs[0] != "ka-1" {
		t.Fatalf("stdout %q: %v", out.String(), err)
	}
	time.Sleep(3500 * time.Millisecond) // past 3 x TTL
	in, err := c.Get(context.Background(), "ka-1")
	if err != nil || !in.Healthy {
		t.Fatalf("after 3.5s: %+v, %v; want healthy", in, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(context.Background(), "ka-1"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("after the command ended: %v, want not found", err)
	}
	if !strings.Contains(errOut.String(), "deregistered 1 instance") {
		t.Errorf("stderr %q", errOut.String())
	}
}

func TestVersion(t *testing.T) {
	root := &cobra.Command{Use: "sextant"}
	root.AddCommand(newVersionCmd())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"version", "-o", "json"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	var bi buildInfo
	if err := json.Unmarshal(out.Bytes(), &bi); err != nil {
		t.Fatal(err)
	}
	if bi.Version == "" || bi.Commit == "" || !strings.HasPrefix(bi.GoVersion, "go") {
		t.Errorf("version %+v", bi)
	}
	version, gitCommit = "v9.9.9", "abc123"
	defer func() { version, gitCommit = "", "" }()
	if s := readBuildInfo().String(); !strings.HasPrefix(s, "sextant v9.9.9, commit abc123") {
		t.Errorf("with -ldflags values: %q", s)
	}
}
