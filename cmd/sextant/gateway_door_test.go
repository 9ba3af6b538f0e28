package main

import (
	"slices"
	"strings"
	"testing"
)

// TestAdminOrigins: the gateway's admin API is readable by the console of
// its --registry (under each loopback name when the registry is on
// loopback) and the origins of --admin-cors-origin, which must be origins.
func TestAdminOrigins(t *testing.T) {
	for _, c := range []struct {
		name     string
		f        gatewayFlags
		want     []string
		errNamed string
	}{
		{"no registry", gatewayFlags{}, nil, ""},
		{"loopback registry", gatewayFlags{registry: "http://127.0.0.1:7400"},
			[]string{"http://127.0.0.1:7400", "http://localhost:7400", "http://[::1]:7400"}, ""},
		{"localhost registry", gatewayFlags{registry: "http://localhost:7400/"},
			[]string{"http://localhost:7400", "http://127.0.0.1:7400", "http://[::1]:7400"}, ""},
		{"remote registry", gatewayFlags{registry: "https://sextant.example:7400"}, []string{"https://sextant.example:7400"}, ""},
		{"more origins", gatewayFlags{registry: "https://sextant.example", adminOrigins: []string{"https://ops.example:8443/"}},
			[]string{"https://ops.example:8443", "https://sextant.example"}, ""},
		{"not an origin", gatewayFlags{adminOrigins: []string{"ops.example"}}, nil, "--admin-cors-origin"},
		{"a path", gatewayFlags{adminOrigins: []string{"https://ops.example/console"}}, nil, "--admin-cors-origin"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := adminOrigins(c.f)
			if c.errNamed != "" {
				if err == nil || !strings.Contains(err.Error(), c.errNamed) {
					t.Fatalf("error %v, want one naming %s", err, c.errNamed)
				}
				return
			}
			if err != nil || !slices.Equal(got, c.want) {
				t.Fatalf("%q %v, want %q", got, err, c.want)
			}
		})
	}
}
