package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	gw "github.com/sextant-mesh/sextant/internal/gateway"
)

// checkFilters passes only when the filters proxy's answer carries both
// headers its filters add and every other proxy's carries neither; each
// proxy is sent the figure's request (the path of a route, the Origin).
func TestCheckFilters(t *testing.T) {
	serve := func(filters bool) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != filtersPath || r.Header.Get("Origin") != filtersOrigin {
				http.Error(w, "wrong request", http.StatusBadRequest)
				return
			}
			if filters {
				w.Header().Set("X-Served-By", "gw")
				w.Header().Set("Access-Control-Allow-Origin", filtersOrigin)
			}
		}))
		t.Cleanup(s.Close)
		return strings.TrimPrefix(s.URL, "http://")
	}
	with, without := serve(true), serve(false)
	for _, c := range []struct {
		filters, plain string
		err            string
	}{
		{with, without, ""},
		{without, without, "sextant-filters's filters did not run"},
		{with, with, "sextant should run no filters"},
	} {
		proxies := map[string]*dataplaneProxy{FiltersProxy: {h1: c.filters}, "sextant": {h1: c.plain}}
		err := checkFilters(proxies, []string{FiltersProxy, "sextant"})
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("want %q, got %v", c.err, err)
		}
	}
	if err := checkFilterScenarios([]string{"h1", "grpc-unary"}); err == nil || !strings.Contains(err.Error(), "grpc-unary") {
		t.Errorf("grpc-unary accepted with %s: %v", FiltersProxy, err)
	}
}

// The 10 routes of both sides are ones the gateway accepts, each with the
// header changes and CORS policy on the filters side only.
func TestFilterRoutesAccepted(t *testing.T) {
	for _, filters := range []bool{false, true} {
		rc := filterRoutes(0, filters)
		if n := len(rc.VirtualHosts[0].Routes); n != 10 {
			t.Fatalf("%d routes", n)
		}
		for _, r := range rc.VirtualHosts[0].Routes {
			if got := len(r.RequestHeadersToAdd) == 2 && len(r.RequestHeadersToRemove) == 1 && len(r.ResponseHeadersToAdd) == 1 &&
				r.TypedPerFilterConfig["envoy.filters.http.cors"] != nil; got != filters {
				t.Errorf("filters %v: route %s", filters, r.Match.GetPrefix())
			}
		}
		a, _ := anypb.New(proto.Message(rc))
		decoded := false
		for _, typ := range gw.XDSTypes() {
			if typ.URL == a.TypeUrl {
				if _, _, err := typ.Decode(a); err != nil {
					t.Errorf("filters %v: refused: %v", filters, err)
				}
				decoded = true
			}
		}
		if !decoded {
			t.Errorf("the gateway follows no %s", a.TypeUrl)
		}
	}
}
