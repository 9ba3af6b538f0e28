package main

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/internal/calllog"
	"github.com/sextant-mesh/sextant/internal/gateway"
)

// sextant calls list|stats against a real gateway admin API over a real
// call log.
func TestCallsCommands(t *testing.T) {
	lg, err := calllog.Open(calllog.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	now := time.Now()
	for i := range 5 {
		lg.Record(calllog.Record{Start: now.Add(-time.Duration(5-i) * time.Second).UnixNano(), Latency: time.Duration(i+1) * time.Millisecond,
			Service: "orders", Cluster: "orders", Endpoint: "10.0.0.1:80", Subset: "version=v1", Status: 200, BytesOut: 10})
	}
	lg.Record(calllog.Record{Start: now.Add(-time.Second).UnixNano(), Latency: 50 * time.Millisecond, Service: "orders",
		Cluster: "orders", Status: 503, Reason: calllog.ReasonShed})
	srv := httptest.NewServer(gateway.New(gateway.Options{}).AdminHandler(lg))
	defer srv.Close()
	run := func(args ...string) (string, error) {
		root := &cobra.Command{Use: "sextant", SilenceUsage: true, SilenceErrors: true}
		root.AddCommand(newCallsCmd())
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append(args, "--gateway", srv.URL))
		err := root.Execute()
		return out.String(), err
	}
	out, err := run("calls", "list", "--service", "orders", "--since", "1m")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "10.0.0.1:80"); n != 5 || !strings.Contains(out, "shed") || !strings.Contains(out, "version=v1") {
		t.Fatalf("list:\n%s", out)
	}
	out, err = run("calls", "list", "--service", "orders", "--since", "1m", "--min-latency", "20ms", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"latency_us":50000`) || strings.Contains(out, "10.0.0.1:80") {
		t.Fatalf("list --min-latency -o json:\n%s", out)
	}
	out, err = run("calls", "stats", "--service", "orders", "--since", "1m", "--step", "1m")
	if err != nil {
		t.Fatal(err)
	}
	var total []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "total" {
			total = f
		}
	}
	if len(total) < 3 || total[1] != "6" || total[2] != "1" {
		t.Fatalf("stats: want total 6 calls, 1 error:\n%s", out)
	}
	if _, err := run("calls", "list"); err == nil || !strings.Contains(err.Error(), "--service") {
		t.Fatalf("missing --service: %v", err)
	}
	if _, err := run("calls", "list", "--service", "orders", "--from", "yesterday"); err == nil || !strings.Contains(err.Error(), "from") {
		t.Fatalf("bad --from: %v", err)
	}
}
