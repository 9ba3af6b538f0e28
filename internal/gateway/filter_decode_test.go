package gateway

import (
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func filterRoute(mod func(r *route.Route)) *route.RouteConfiguration {
	r := &route.Route{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
		Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: "c"}}}}
	mod(r)
	return &route.RouteConfiguration{Name: "r", VirtualHosts: []*route.VirtualHost{{Name: "v", Domains: []string{"*"}, Routes: []*route.Route{r}}}}
}

func faultAny(f *faultv3.HTTPFault) map[string]*anypb.Any {
	a, _ := anypb.New(f)
	return map[string]*anypb.Any{faultFilterName: a}
}

// TestFilterConfigRefused: a filter config the gateway cannot follow is
// refused (the route config NACKed) with the field named.
func TestFilterConfigRefused(t *testing.T) {
	wrongType, _ := anypb.New(&core.HeaderValue{Key: "x"})
	for _, tc := range []struct {
		name, want string
		mod        func(r *route.Route)
	}{
		{"abort status", `typed_per_filter_config["envoy.filters.http.fault"].abort.http_status: 99 not in [200, 599]`, func(r *route.Route) {
			r.TypedPerFilterConfig = faultAny(&faultv3.HTTPFault{Abort: &faultv3.FaultAbort{ErrorType: &faultv3.FaultAbort_HttpStatus{HttpStatus: 99}}})
		}},
		{"grpc status", "abort.grpc_status: 17 is not a gRPC status", func(r *route.Route) {
			r.TypedPerFilterConfig = faultAny(&faultv3.HTTPFault{Abort: &faultv3.FaultAbort{ErrorType: &faultv3.FaultAbort_GrpcStatus{GrpcStatus: 17}}})
		}},
		{"header delay", "only fixed_delay is supported", func(r *route.Route) {
			r.TypedPerFilterConfig = faultAny(&faultv3.HTTPFault{Delay: &faultcommon.FaultDelay{
				FaultDelaySecifier: &faultcommon.FaultDelay_HeaderDelay_{HeaderDelay: &faultcommon.FaultDelay_HeaderDelay{}}}})
		}},
		{"fault type", `the fault filter needs "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault"`, func(r *route.Route) {
			r.TypedPerFilterConfig = map[string]*anypb.Any{faultFilterName: wrongType}
		}},
		{"pseudo header", "request_headers_to_add[0].header.key: \":path\": pseudo-headers cannot be changed", func(r *route.Route) {
			r.RequestHeadersToAdd = []*core.HeaderValueOption{{Header: &core.HeaderValue{Key: ":path", Value: "/x"}}}
		}},
		{"host", "request_headers_to_remove[0]: \"Host\": the Host header cannot be changed", func(r *route.Route) {
			r.RequestHeadersToRemove = []string{"Host"}
		}},
		{"both appends", "response_headers_to_add[0]: append and append_action are both set", func(r *route.Route) {
			r.ResponseHeadersToAdd = []*core.HeaderValueOption{{Header: &core.HeaderValue{Key: "x", Value: "y"}, Append: wrapperspb.Bool(true),
				AppendAction: core.HeaderValueOption_OVERWRITE_IF_EXISTS}}
		}},
		{"value newline", "header.value: control characters", func(r *route.Route) {
			r.ResponseHeadersToAdd = []*core.HeaderValueOption{{Header: &core.HeaderValue{Key: "x", Value: "a\r\nb: c"}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeRouteConfig(filterRoute(tc.mod))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// TestNoFilterNoChain: a route without fault or header changes (or with a
// fault that injects nothing) has a nil chain, the no-cost path.
func TestNoFilterNoChain(t *testing.T) {
	for _, mod := range []func(r *route.Route){
		func(r *route.Route) {},
		func(r *route.Route) {
			r.TypedPerFilterConfig = faultAny(&faultv3.HTTPFault{Abort: &faultv3.FaultAbort{ErrorType: &faultv3.FaultAbort_HttpStatus{HttpStatus: 500}}})
		},
		func(r *route.Route) {
			r.TypedPerFilterConfig = faultAny(&faultv3.HTTPFault{Abort: &faultv3.FaultAbort{ErrorType: &faultv3.FaultAbort_HttpStatus{HttpStatus: 500},
				Percentage: &typev3.FractionalPercent{Numerator: 100}}, MaxActiveFaults: wrapperspb.UInt32(0)})
		},
	} {
		rc, err := decodeRouteConfig(filterRoute(mod))
		if err != nil {
			t.Fatal(err)
		}
		if fc := rc.vhosts[0].routes[0].filters; fc != nil {
			t.Fatalf("chain %v, want nil", fc)
		}
	}
	rc, err := decodeRouteConfig(filterRoute(func(r *route.Route) { r.RequestHeadersToRemove = []string{"x-a"} }))
	if err != nil || len(rc.vhosts[0].routes[0].filters) != 1 {
		t.Fatalf("a header change: %v %v", rc, err)
	}
}

// fuzzFilterSeeds are route configs using the filter chain (FuzzDecodeResources).
func fuzzFilterSeeds() []proto.Message {
	withFilters := filterRoute(func(r *route.Route) {
		r.TypedPerFilterConfig = faultAny(&faultv3.HTTPFault{
			Delay: &faultcommon.FaultDelay{FaultDelaySecifier: &faultcommon.FaultDelay_FixedDelay{FixedDelay: durationpb.New(time.Millisecond)},
				Percentage: &typev3.FractionalPercent{Numerator: 5, Denominator: typev3.FractionalPercent_TEN_THOUSAND}},
			Abort: &faultv3.FaultAbort{ErrorType: &faultv3.FaultAbort_GrpcStatus{GrpcStatus: 14},
				Percentage: &typev3.FractionalPercent{Numerator: 1}}})
		r.RequestHeadersToAdd = []*core.HeaderValueOption{{Header: &core.HeaderValue{Key: "x-a", Value: "b"},
			AppendAction: core.HeaderValueOption_ADD_IF_ABSENT}, {Header: &core.HeaderValue{Key: "x-c", Value: "d"}, Append: wrapperspb.Bool(false)}}
		r.ResponseHeadersToRemove = []string{"server"}
		r.Action = &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_WeightedClusters{
			WeightedClusters: &route.WeightedCluster{Clusters: []*route.WeightedCluster_ClusterWeight{
				{Name: "a", Weight: wrapperspb.UInt32(1), RequestHeadersToRemove: []string{"x-b"}},
				{Name: "b", Weight: wrapperspb.UInt32(1)}}}}}}
	})
	direct := filterRoute(func(r *route.Route) {
		r.Action = &route.Route_DirectResponse{DirectResponse: &route.DirectResponseAction{Status: 200,
			Body: &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: []byte("ok")}}}}
		r.ResponseHeadersToAdd = []*core.HeaderValueOption{{Header: &core.HeaderValue{Key: "x-a", Value: "b"}}}
	})
	return append([]proto.Message{withFilters, direct}, fuzzRewriteCORSSeeds()...)
}
