package main

import (
	"strings"
	"testing"
)

// TestWakeAddr: --cluster-wake's auto takes --http's host, or the route to
// the database when that host is unspecified; off and explicit addresses
// pass as given.
func TestWakeAddr(t *testing.T) {
	const db = "mysql://root@tcp(127.0.0.1:3306)/test"
	for _, c := range []struct{ flag, http, store, want string }{
		{"auto", "127.0.0.1:7400", db, "127.0.0.1:0"},
		{"auto", "10.1.2.3:7400", db, "10.1.2.3:0"},
		{"auto", "0.0.0.0:7400", db, "127.0.0.1:0"}, // the route to 127.0.0.1
		{"auto", "[::]:7400", "mysql://root@unix(/run/mysqld/mysqld.sock)/test", "127.0.0.1:0"},
		{"off", "127.0.0.1:7400", db, ""},
		{"10.0.0.9:7499", "127.0.0.1:7400", db, "10.0.0.9:7499"},
	} {
		got, err := wakeAddr(c.flag, c.http, c.store)
		if err != nil || got != c.want {
			t.Errorf("wakeAddr(%q, %q, %q) = %q, %v; want %q", c.flag, c.http, c.store, got, err, c.want)
		}
	}
	if _, err := wakeAddr("auto", "nonsense", db); err == nil || !strings.Contains(err.Error(), `--cluster-wake auto: the HTTP address "nonsense"`) {
		t.Errorf("a bad HTTP address: %v", err)
	}
}
