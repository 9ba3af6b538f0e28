package main

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/internal/calllog"
	"github.com/sextant-mesh/sextant/internal/gateway"
)

// calls stats names a service the gateway never recorded and exits
// non-zero instead of printing a table of zeros, and starts its table at
// the first step with a call; a known service idle in the window is no
// error.
func TestCallsStatsUnknownServiceAndLeadingSteps(t *testing.T) {
	lg, err := calllog.Open(calllog.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	for i := range 3 {
		lg.Record(calllog.Record{Start: base.Add(time.Duration(i) * time.Second).UnixNano(), Latency: time.Millisecond,
			Service: "default/orders", Cluster: "default/orders", Endpoint: "10.0.0.1:80", Status: 200})
	}
	srv := httptest.NewServer(gateway.New(gateway.Options{}).AdminHandler(lg))
	defer srv.Close()
	run := func(args ...string) (stdout, stderr string, err error) {
		root := &cobra.Command{Use: "sextant", SilenceUsage: true, SilenceErrors: true}
		root.AddCommand(newCallsCmd())
		var out, errOut bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errOut)
		root.SetArgs(append(args, "--gateway", srv.URL))
		err = root.Execute()
		return out.String(), errOut.String(), err
	}

	for _, output := range []string{"table", "json"} {
		out, _, err := run("calls", "stats", "--service", "nosuch", "-o", output)
		if err == nil || err.Error() != "no calls recorded for default/nosuch" || out != "" {
			t.Fatalf("-o %s: unknown service: err %v, output:\n%s", output, err, out)
		}
	}

	// 10 steps of 5s from 10s before base: the first two have no call.
	from := fmt.Sprint(base.Add(-10 * time.Second).UnixMilli())
	to := fmt.Sprint(base.Add(40 * time.Second).UnixMilli())
	out, _, err := run("calls", "stats", "--service", "orders", "--from", from, "--to", to, "--step", "5s")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 3 {
		t.Fatalf("stats:\n%s", out)
	}
	if f := strings.Fields(lines[1]); len(f) < 3 || f[2] != "3" {
		t.Fatalf("the first row is not the step with the 3 calls:\n%s", out)
	}
	if want := 1 + 8 + 1; len(lines) != want { // header, 8 steps from base, total
		t.Fatalf("%d lines, want %d:\n%s", len(lines), want, out)
	}
	if !strings.Contains(out, base.Local().Format("01-02 15:04:05")) {
		t.Fatalf("no row starts at %s:\n%s", base.Local().Format("15:04:05"), out)
	}

	// A known service with no call in the window: a total of 0, and a note.
	out, errOut, err := run("calls", "stats", "--service", "orders", "--since", "5s")
	if err != nil {
		t.Fatalf("idle known service: %v", err)
	}
	if !strings.Contains(out, "total") || !strings.Contains(errOut, "no calls to default/orders in the window") {
		t.Fatalf("idle known service:\n%s\nstderr:\n%s", out, errOut)
	}
}
