package main

import (
	"strings"
	"testing"
	"time"
)

// TestParseDataReserve: sizes, off, and empty (serverFlags built in code:
// the store's default); anything else names the flag.
func TestParseDataReserve(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "256MiB": 256 << 20, "1GiB": 1 << 30, "5000000": 5000000, "off": -1} {
		if got, err := parseDataReserve(in); err != nil || got != want {
			t.Errorf("parseDataReserve(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "-1", "lots", "12XB"} {
		if _, err := parseDataReserve(in); err == nil || !strings.Contains(err.Error(), "--data-reserve") {
			t.Errorf("parseDataReserve(%q): %v, want an error naming --data-reserve", in, err)
		}
	}
}

// TestRepairNeedsTheEmbeddedStore: --repair with --store is refused before
// anything starts, naming the flag.
func TestRepairNeedsTheEmbeddedStore(t *testing.T) {
	err := serverFlags{store: "mysql://root@tcp(127.0.0.1:3306)/test", repair: true, clusterLease: 5 * time.Second}.validate()
	if err == nil || !strings.Contains(err.Error(), "--repair") {
		t.Fatalf("validate: %v, want an error naming --repair", err)
	}
}
