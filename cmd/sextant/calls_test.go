package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/internal/calllog"
	"github.com/sextant-mesh/sextant/internal/gateway"
)

// sextant calls list|stats against a real gateway admin API over a real
// call log; --service orders is default/orders, as the gateway files it.
func TestCallsCommands(t *testing.T) {
	lg, err := calllog.Open(calllog.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	now := time.Now()
	for i := range 5 {
		lg.Record(calllog.Record{Start: now.Add(-time.Duration(5-i) * time.Second).UnixNano(), Latency: time.Duration(i+1) * time.Millisecond,
			Service: "default/orders", Cluster: "default/orders", Endpoint: "10.0.0.1:80", Subset: "version=v1", Status: 200, BytesOut: 10})
	}
	lg.Record(calllog.Record{Start: now.Add(-time.Second).UnixNano(), Latency: 50 * time.Millisecond, Service: "default/orders",
		Cluster: "default/orders", Status: 503, Reason: calllog.ReasonShed})
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
	if _, err := run("calls", "stats", "--service", "a/b/c"); err == nil || !strings.Contains(err.Error(), `service: "a/b/c": want NAME (in namespace default) or NAMESPACE/NAME`) {
		t.Fatalf("bad --service: %v", err)
	}
	if _, err := run("calls", "list", "--service", "orders", "--from", "yesterday"); err == nil || !strings.Contains(err.Error(), "from") {
		t.Fatalf("bad --from: %v", err)
	}
}

// Every column of the calls tables shows what the gateway's JSON answer
// holds under the key docs/gateway.md names: the table and -o json of the
// same window are compared cell by cell, so a reply struct whose keys drift
// from the gateway's zeroes no column silently (AVG_MS..P99_MS once read
// 0.00 in every row).
func TestCallsTablesMatchJSON(t *testing.T) {
	lg, err := calllog.Open(calllog.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	for i := range 40 {
		r := calllog.Record{Start: base.Add(time.Duration(i) * 500 * time.Millisecond).UnixNano(),
			Latency: time.Duration(1+i*i) * 100 * time.Microsecond, Service: "default/orders", Cluster: "default/orders/v1",
			Endpoint: "10.0.0.1:80", Subset: "version=v1", Status: 200, Retries: uint8(i % 2), BytesOut: uint32(100 + i)}
		if i%7 == 0 {
			r.Status, r.Endpoint, r.Subset, r.Reason = 503, "", "", calllog.ReasonShed
		}
		lg.Record(r)
	}
	srv := httptest.NewServer(gateway.New(gateway.Options{}).AdminHandler(lg))
	defer srv.Close()
	window := []string{"--service", "default/orders", "--from", fmt.Sprint(base.UnixMilli()),
		"--to", fmt.Sprint(base.Add(20 * time.Second).UnixMilli()), "--gateway", srv.URL}
	run := func(args ...string) string {
		t.Helper()
		root := &cobra.Command{Use: "sextant", SilenceUsage: true, SilenceErrors: true}
		root.AddCommand(newCallsCmd())
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(io.Discard)
		root.SetArgs(append(args, window...))
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return out.String()
	}
	// rows returns the table's rows after its header, split into fields.
	rows := func(table string) [][]string {
		var out [][]string
		for _, line := range strings.Split(strings.TrimSpace(table), "\n")[1:] {
			out = append(out, strings.Fields(line))
		}
		return out
	}
	// key reads a key the gateway must answer.
	key := func(m map[string]any, k string) any {
		t.Helper()
		v, ok := m[k]
		if !ok {
			t.Fatalf("the gateway's answer has no %q: %v", k, m)
		}
		return v
	}
	ms := func(m map[string]any, k string) string { return fmt.Sprintf("%.2f", key(m, k).(float64)) }
	num := func(m map[string]any, k string) string { return fmt.Sprint(key(m, k).(float64)) }
	orDash := func(m map[string]any, k string) string {
		if s, _ := m[k].(string); s != "" {
			return s
		}
		return "-"
	}

	var stats struct {
		Count float64          `json:"count"`
		Steps []map[string]any `json:"steps"`
	}
	if err := json.Unmarshal([]byte(run("calls", "stats", "--step", "5s", "-o", "json")), &stats); err != nil {
		t.Fatal(err)
	}
	table := rows(run("calls", "stats", "--step", "5s"))
	if len(stats.Steps) != 4 || len(table) != 5 || stats.Count != 40 {
		t.Fatalf("stats: %d steps of %v calls in JSON, table:\n%v", len(stats.Steps), stats.Count, table)
	}
	nonzero := 0
	for i, s := range stats.Steps {
		want := []string{num(s, "count"), num(s, "errors"), ms(s, "avg_ms"), ms(s, "p50_ms"), ms(s, "p90_ms"), ms(s, "p99_ms")}
		if got := table[i][2:]; !slices.Equal(got, want) {
			t.Errorf("stats step %d: table %v, JSON %v", i, got, want)
		}
		if want[5] != "0.00" {
			nonzero++
		}
	}
	if nonzero == 0 {
		t.Fatal("every step's p99 is 0: the test's calls are wrong")
	}

	var list struct {
		Calls []map[string]any `json:"calls"`
	}
	if err := json.Unmarshal([]byte(run("calls", "list", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	table = rows(run("calls", "list"))
	if len(list.Calls) != 40 || len(table) != 40 {
		t.Fatalf("list: %d calls in JSON, %d rows", len(list.Calls), len(table))
	}
	for i, c := range list.Calls {
		lat := (time.Duration(key(c, "latency_us").(float64)) * time.Microsecond).String()
		want := []string{lat, num(c, "status"), orDash(c, "endpoint"), orDash(c, "subset"), num(c, "retries"), num(c, "bytes_out"), orDash(c, "reason"),
			orDash(c, "method"), orDash(c, "path"), orDash(c, "principal")}
		if got := table[i][1:]; !slices.Equal(got, want) {
			t.Errorf("call %d: table %v, JSON %v", i, got, want)
		}
	}
}
