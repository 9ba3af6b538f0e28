package gateway

import (
	"testing"

	"github.com/valyala/fasthttp"
)

func TestHeaderMatchers(t *testing.T) {
	var h fasthttp.RequestHeader
	h.Set("X-Env", "Prod-EU")
	for _, tc := range []struct {
		name string
		m    headerMatch
		want bool
	}{
		{"exact", headerMatch{name: "x-env", kind: strExact, value: "Prod-EU"}, true},
		{"exact is case sensitive", headerMatch{name: "x-env", kind: strExact, value: "prod-eu"}, false},
		{"exact ignore case", headerMatch{name: "x-env", kind: strExact, value: "prod-eu", ignoreCase: true}, true},
		{"prefix", headerMatch{name: "x-env", kind: strPrefix, value: "Prod"}, true},
		{"prefix ignore case", headerMatch{name: "x-env", kind: strPrefix, value: "prod", ignoreCase: true}, true},
		{"suffix", headerMatch{name: "x-env", kind: strSuffix, value: "-EU"}, true},
		{"suffix ignore case", headerMatch{name: "x-env", kind: strSuffix, value: "-eu", ignoreCase: true}, true},
		{"suffix longer than value", headerMatch{name: "x-env", kind: strSuffix, value: "xxProd-EU"}, false},
		{"contains", headerMatch{name: "x-env", kind: strContains, value: "d-E"}, true},
		{"contains ignore case", headerMatch{name: "x-env", kind: strContains, value: "d-e", ignoreCase: true}, true},
		{"present", headerMatch{name: "x-env", kind: strPresent}, true},
		{"absent", headerMatch{name: "x-other", kind: strPresent}, false},
		{"absent inverted", headerMatch{name: "x-other", kind: strPresent, invert: true}, true},
		{"absent never matches a value, even inverted", headerMatch{name: "x-other", kind: strExact, value: "a", invert: true}, false},
		{"inverted exact", headerMatch{name: "x-env", kind: strExact, value: "x", invert: true}, true},
	} {
		if got := tc.m.matches(&h, false); got != tc.want {
			t.Errorf("%s: got %v", tc.name, got)
		}
	}
	re, _ := compileRegex("prod-[a-z]+", true)
	if !(&headerMatch{name: "x-env", kind: strRegex, re: re}).matches(&h, false) {
		t.Error("regex ignore case")
	}
}

func TestVirtualHostOrder(t *testing.T) {
	rc := &routeConfigSpec{vhosts: []*vhostSpec{
		{name: "any", domains: []string{"*"}},
		{name: "prefix", domains: []string{"api.*"}},
		{name: "suffix", domains: []string{"*.example.com"}},
		{name: "longer-suffix", domains: []string{"*.eu.example.com"}},
		{name: "exact", domains: []string{"api.example.com"}},
	}}
	tb := newTable(rc, nil)
	for host, want := range map[string]string{
		"api.example.com":      "exact",
		"API.example.com:8080": "exact", // the caller lowercases; the port is dropped
		"x.eu.example.com":     "longer-suffix",
		"x.example.com":        "suffix",
		"api.other.org":        "prefix",
		"other.org":            "any",
		"[::1]:80":             "any",
	} {
		var buf [64]byte
		if got := tb.vhost(lower(buf[:0], []byte(host))); got == nil || got.name != want {
			t.Errorf("%s: got %v, want %s", host, got, want)
		}
	}
}

// TestLower: lower lower-cases ASCII letters only, appending to dst, from
// the first letter to change or with none to change.
func TestLower(t *testing.T) {
	for in, want := range map[string]string{
		"": "", "shop.example": "shop.example", "Shop.Example:8080": "shop.example:8080",
		"shop.EXAMPLE": "shop.example", "[::1]:80": "[::1]:80", "Zé.Ü": "zé.Ü",
	} {
		buf := make([]byte, 1, 64)
		if got := lower(buf, []byte(in)); string(got[1:]) != want || got[0] != 0 {
			t.Errorf("lower(%q) = %q, want %q after dst's byte", in, got[1:], want)
		}
	}
}
