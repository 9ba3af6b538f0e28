package grpcresolver

import (
	"net/url"
	"strings"
	"testing"
)

func TestParseTarget(t *testing.T) {
	tests := []struct {
		target, service, selector, err string
	}{
		{target: "sextant:///orders", service: "orders"},
		{target: "sextant://127.0.0.1:7400/prod/orders?selector=version%3Dv2", service: "prod/orders", selector: "version=v2"},
		{target: "sextant:///orders?selector=zone%20in%20(z1,z2)", service: "orders", selector: "zone in (z1,z2)"},
		{target: "sextant:///", err: "names no service"},
		{target: "sextant:///orders?selectr=a", err: `unknown parameter "selectr"`},
		{target: "sextant:///orders?selector=zone%20in%20(", err: "selector"},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.target)
		if err != nil {
			t.Fatal(err)
		}
		service, sel, err := parseTarget(u)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: err %v, want %q", tt.target, err, tt.err)
			}
			continue
		}
		if err != nil || service != tt.service || (tt.selector != "" && len(sel) == 0) {
			t.Errorf("%s: %q %v %v", tt.target, service, sel, err)
		}
	}
}

// FuzzParseTarget: any target URL is parsed or refused, without a panic,
// and a parsed one names a service.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"sextant:///orders", "sextant://h:1/a/b?selector=x%3Dy", "sextant:///?selector=", "sextant:o", "sextant:///a?selector=a%20in%20(b", "sextant:///a?%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		service, _, err := parseTarget(u)
		if err == nil && service == "" {
			t.Fatalf("%q parsed to no service", s)
		}
	})
}
