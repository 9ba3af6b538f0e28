package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// withFault puts an HTTPFault on route r as Istio does
// (typed_per_filter_config["envoy.filters.http.fault"]).
func withFault(r *route.Route, f *faultv3.HTTPFault) *route.Route {
	a, _ := anypb.New(f)
	r.TypedPerFilterConfig = map[string]*anypb.Any{"envoy.filters.http.fault": a}
	return r
}

func pct(n uint32) *typev3.FractionalPercent {
	return &typev3.FractionalPercent{Numerator: n * 10000, Denominator: typev3.FractionalPercent_MILLION}
}

// TestFaultAbortAndDelay: a route's fault filter aborts every call with
// its status without calling the upstream (recorded with reason
// fault_abort), delays every call of another
// route by at least its delay, and a fault with no percentage injects
// nothing (Envoy's and grpc-go's reading of an unset percentage).
func TestFaultAbortAndDelay(t *testing.T) {
	u := startUpstream(t, "a", nil)
	cp := startControlPlane(t, "")
	abort := withFault(prefixRoute("/abort", "a"), &faultv3.HTTPFault{Abort: &faultv3.FaultAbort{
		ErrorType: &faultv3.FaultAbort_HttpStatus{HttpStatus: 500}, Percentage: pct(100)}})
	delay := withFault(prefixRoute("/delay", "a"), &faultv3.HTTPFault{Delay: &faultcommon.FaultDelay{
		FaultDelaySecifier: &faultcommon.FaultDelay_FixedDelay{FixedDelay: durationpb.New(300 * time.Millisecond)},
		Percentage:         pct(100)}})
	never := withFault(prefixRoute("/never", "a"), &faultv3.HTTPFault{Abort: &faultv3.FaultAbort{
		ErrorType: &faultv3.FaultAbort_HttpStatus{HttpStatus: 500}}})
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, abort, delay, never, prefixRoute("/", "a"))),
		edsCluster("a"), assignment("a", ep{u: u}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/", "upstream=a")

	before := u.calls.Load()
	for range 5 {
		code, body, h := g.get(t, "/abort")
		if code != 500 || body != "fault filter abort" || h.Get("X-Sextant-Error") != "fault_abort" {
			t.Fatalf("abort: %d %q %v", code, body, h)
		}
	}
	if n := u.calls.Load() - before; n != 0 {
		t.Fatalf("aborted calls reached the upstream %d times", n)
	}
	// Each aborted call is counted and recorded, as the call of its route.
	waitFor(t, "the aborted calls' records", func() bool {
		n := 0
		for _, c := range g.calls(t, "a") {
			if c.Reason == "fault_abort" && c.Status == 500 && c.Cluster == "a" {
				n++
			}
		}
		return n == 5
	})
	t0 := time.Now()
	code, body, _ := g.get(t, "/delay")
	if took := time.Since(t0); code != 200 || !strings.Contains(body, "upstream=a") || took < 300*time.Millisecond {
		t.Fatalf("delay: %d %q after %v (want 200 after at least 300ms)", code, body, took)
	}
	if code, body, _ := g.get(t, "/never"); code != 200 || !strings.Contains(body, "upstream=a") {
		t.Fatalf("a fault without percentage injected: %d %q", code, body)
	}
}

func hv(k, v string, action core.HeaderValueOption_HeaderAppendAction) *core.HeaderValueOption {
	return &core.HeaderValueOption{Header: &core.HeaderValue{Key: k, Value: v}, AppendAction: action}
}

// TestRouteHeaders: a route's request header changes reach the upstream
// and its response header changes the client; a weighted cluster's own
// changes apply only when it is the one picked, before the route's.
func TestRouteHeaders(t *testing.T) {
	echo := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Upstream", name)
			w.Header().Set("X-Internal", "secret")
			w.Header().Set("X-Kept", "upstream")
			w.Write([]byte("upstream=" + name + " set=" + r.Header.Get("X-Set") + " add=" + strings.Join(r.Header.Values("X-Add"), "|") +
				" gone=" + r.Header.Get("X-Gone") + " dest=" + r.Header.Get("X-Dest")))
		}
	}
	a := startUpstream(t, "a", echo("a"))
	b := startUpstream(t, "b", echo("b"))
	cp := startControlPlane(t, "")
	r := &route.Route{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
		Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_WeightedClusters{
			WeightedClusters: &route.WeightedCluster{Clusters: []*route.WeightedCluster_ClusterWeight{
				{Name: "a", Weight: wrapperspb.UInt32(1),
					RequestHeadersToAdd:  []*core.HeaderValueOption{hv("x-dest", "to-a", core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)},
					ResponseHeadersToAdd: []*core.HeaderValueOption{hv("x-picked", "a", core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)}},
				{Name: "b", Weight: wrapperspb.UInt32(1)},
			}}}}},
		RequestHeadersToAdd: []*core.HeaderValueOption{
			hv("x-set", "route", core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD),
			hv("x-add", "route", core.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD),
		},
		RequestHeadersToRemove: []string{"x-gone"},
		ResponseHeadersToAdd: []*core.HeaderValueOption{
			hv("x-route", "yes", core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD),
			hv("x-kept", "route", core.HeaderValueOption_ADD_IF_ABSENT),
		},
		ResponseHeadersToRemove: []string{"x-internal"},
	}
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, r)),
		edsCluster("a"), assignment("a", ep{u: a}), edsCluster("b"), assignment("b", ep{u: b}))
	g := startGateway(t, cp.addr)
	g.waitEndpoints(t, 2)
	g.waitServes(t, "/", "upstream=")

	seen := map[string]bool{}
	for i := 0; i < 200 && len(seen) < 2; i++ {
		code, body, h := g.get(t, "/", "X-Set", "client", "X-Add", "client", "X-Gone", "client")
		if code != 200 {
			t.Fatalf("status %d: %s", code, body)
		}
		name := h.Get("X-Upstream")
		seen[name] = true
		wantDest, wantPicked := "", ""
		if name == "a" {
			wantDest, wantPicked = "to-a", "a"
		}
		want := "upstream=" + name + " set=route add=client|route gone= dest=" + wantDest
		if body != want {
			t.Fatalf("upstream saw %q, want %q", body, want)
		}
		if h.Get("X-Route") != "yes" || h.Get("X-Internal") != "" || h.Get("X-Kept") != "upstream" || h.Get("X-Picked") != wantPicked {
			t.Fatalf("answer headers of %s: %v", name, h)
		}
	}
	if len(seen) < 2 {
		t.Fatalf("only %v picked in 200 calls", seen)
	}
}

// TestDirectResponseBytesAndHeaders: a direct response's inline_bytes
// body is answered, with the route's response headers.
func TestDirectResponseBytesAndHeaders(t *testing.T) {
	u := startUpstream(t, "a", nil)
	cp := startControlPlane(t, "")
	dr := &route.Route{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/direct"}},
		Action: &route.Route_DirectResponse{DirectResponse: &route.DirectResponseAction{Status: 418,
			Body: &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: []byte("short and stout")}}}},
		ResponseHeadersToAdd: []*core.HeaderValueOption{hv("x-teapot", "yes", core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)}}
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, dr, prefixRoute("/", "a"))),
		edsCluster("a"), assignment("a", ep{u: u}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/", "upstream=a")
	code, body, h := g.get(t, "/direct")
	if code != 418 || body != "short and stout" || h.Get("X-Teapot") != "yes" {
		t.Fatalf("direct response: %d %q %v", code, body, h)
	}
}

// headerRoute is prefixRoute("/", cluster) for calls whose header name
// is value.
func headerRoute(name, value, clusterName string) *route.Route {
	r := prefixRoute("/", clusterName)
	r.Match.Headers = []*route.HeaderMatcher{{Name: name, HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{
		StringMatch: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: value}}}}}
	return r
}

// TestGRPCFaultAndHeadersThroughGateway: grpc-go calls through the
// gateway to an HTTP/2 cluster: a grpc_status abort fails the call with
// that status, an HTTP 503 abort with UNAVAILABLE (gRPC's mapping), neither
// reaching the server; a delay holds the call; the route's response header changes apply to the
// HTTP/2 answer's headers.
func TestGRPCFaultAndHeadersThroughGateway(t *testing.T) {
	s := startGRPCServer(t, "g1")
	cp := startControlPlane(t, "")
	grpcAbort := withFault(headerRoute("x-fault", "grpc", "grpc"), &faultv3.HTTPFault{Abort: &faultv3.FaultAbort{
		ErrorType: &faultv3.FaultAbort_GrpcStatus{GrpcStatus: uint32(codes.PermissionDenied)}, Percentage: pct(100)}})
	httpAbort := withFault(headerRoute("x-fault", "http", "grpc"), &faultv3.HTTPFault{Abort: &faultv3.FaultAbort{
		ErrorType: &faultv3.FaultAbort_HttpStatus{HttpStatus: 503}, Percentage: pct(100)}})
	delay := withFault(headerRoute("x-fault", "delay", "grpc"), &faultv3.HTTPFault{Delay: &faultcommon.FaultDelay{
		FaultDelaySecifier: &faultcommon.FaultDelay_FixedDelay{FixedDelay: durationpb.New(200 * time.Millisecond)}, Percentage: pct(100)}})
	def := prefixRoute("/", "grpc")
	def.ResponseHeadersToAdd = []*core.HeaderValueOption{hv("x-route", "yes", core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)}
	def.ResponseHeadersToRemove = []string{"x-hdr"}
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, grpcAbort, httpAbort, delay, def)),
		h2cCluster("grpc"), assignment("grpc", ep{u: s.up}))
	g := startGateway(t, cp.addr)
	g.waitEndpoints(t, 1)
	c := grpcClient(t, g)

	var hdr metadata.MD
	if _, err := c.UnaryCall(callCtx(t, ""), &testgrpc.SimpleRequest{}, grpc.Header(&hdr)); err != nil {
		t.Fatal(err)
	}
	if got := hdr.Get("x-route"); len(got) != 1 || got[0] != "yes" || len(hdr.Get("x-hdr")) != 0 {
		t.Fatalf("answer headers: %v", hdr)
	}
	before := s.calls.Load()
	for _, tc := range []struct {
		fault string
		code  codes.Code
	}{{"grpc", codes.PermissionDenied}, {"http", codes.Unavailable}} {
		ctx := metadata.AppendToOutgoingContext(callCtx(t, ""), "x-fault", tc.fault)
		if _, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}); grpcstatus.Code(err) != tc.code {
			t.Fatalf("x-fault %s: %v, want %v", tc.fault, err, tc.code)
		}
	}
	if n := s.calls.Load() - before; n != 0 {
		t.Fatalf("aborted calls reached the server %d times", n)
	}
	t0 := time.Now()
	_, err := c.UnaryCall(metadata.AppendToOutgoingContext(callCtx(t, ""), "x-fault", "delay"), &testgrpc.SimpleRequest{})
	if took := time.Since(t0); err != nil || took < 200*time.Millisecond {
		t.Fatalf("delayed call: %v after %v, want an answer after at least 200ms", err, took)
	}
}
