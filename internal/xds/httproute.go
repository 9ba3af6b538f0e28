//lint:file-ignore SA1019 Istio's deprecated fault.delay.percent is still written in configs; it is read as Istio reads it.

package xds

import (
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/config"
)

// FaultFilterName is Envoy's fault injection HTTP filter: every HTTP
// listener lists it before the router, with no config of its own (a no-op),
// and a route's fault is its typed_per_filter_config under this name, as
// Istio publishes them; grpc-go (gRFC A33) reads both.
const FaultFilterName = "envoy.filters.http.fault"

// FaultHTTPFilter is the listeners' entry of the fault filter, shared:
// nothing may change it.
func FaultHTTPFilter() *hcmv3.HttpFilter { return faultFilter }

var faultFilter = func() *hcmv3.HttpFilter {
	a, _ := anypb.New(&faultv3.HTTPFault{})
	return &hcmv3.HttpFilter{Name: FaultFilterName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}}
}()

// routeExtras reports whether hr uses a field written only from messages
// (EncodeVirtualHost falls back to VirtualHost for it).
func routeExtras(hr *networking.HTTPRoute) bool {
	if hr.Fault != nil || hr.DirectResponse != nil || hr.Headers != nil {
		return true
	}
	for _, d := range hr.Route {
		if d.Headers != nil {
			return true
		}
	}
	return false
}

// httpRoute is one Route of VirtualService route hr: its direct response,
// or action a (with the headers of its one destination, dest, when the
// destinations came down to one), with hr's fault and header changes.
func httpRoute(hr *networking.HTTPRoute, m *routev3.RouteMatch, a *routev3.RouteAction, dest *networking.Headers) *routev3.Route {
	r := &routev3.Route{Name: hr.Name, Match: m}
	if d := hr.DirectResponse; d != nil {
		dr := &routev3.DirectResponseAction{Status: d.Status}
		switch b := d.GetBody().GetSpecifier().(type) {
		case *networking.HTTPBody_String_:
			dr.Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: b.String_}}
		case *networking.HTTPBody_Bytes:
			dr.Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b.Bytes}}
		}
		r.Action = &routev3.Route_DirectResponse{DirectResponse: dr}
	} else {
		r.Action = &routev3.Route_Route{Route: a}
	}
	if f := faultConfig(hr.Fault); f != nil {
		r.TypedPerFilterConfig = map[string]*anypb.Any{FaultFilterName: f}
	}
	// Istio: one destination's header changes join the route's.
	r.RequestHeadersToAdd = append(headerOptions(hr.Headers.GetRequest()), headerOptions(dest.GetRequest())...)
	r.RequestHeadersToRemove = append(slices.Clone(hr.Headers.GetRequest().GetRemove()), dest.GetRequest().GetRemove()...)
	r.ResponseHeadersToAdd = append(headerOptions(hr.Headers.GetResponse()), headerOptions(dest.GetResponse())...)
	r.ResponseHeadersToRemove = append(slices.Clone(hr.Headers.GetResponse().GetRemove()), dest.GetResponse().GetRemove()...)
	return r
}

// destHeaders puts a destination's header changes on its weighted cluster.
func destHeaders(cw *routev3.WeightedCluster_ClusterWeight, h *networking.Headers) {
	if h == nil {
		return
	}
	cw.RequestHeadersToAdd = headerOptions(h.GetRequest())
	cw.RequestHeadersToRemove = slices.Clone(h.GetRequest().GetRemove())
	cw.ResponseHeadersToAdd = headerOptions(h.GetResponse())
	cw.ResponseHeadersToRemove = slices.Clone(h.GetResponse().GetRemove())
}

// headerOptions are one direction's set (overwrite) and add (append)
// changes, each sorted by name, as Istio writes them.
func headerOptions(o *networking.Headers_HeaderOperations) []*corev3.HeaderValueOption {
	var out []*corev3.HeaderValueOption
	for _, op := range []struct {
		m      map[string]string
		action corev3.HeaderValueOption_HeaderAppendAction
	}{{o.GetSet(), corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}, {o.GetAdd(), corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD}} {
		names := make([]string, 0, len(op.m))
		for n := range op.m {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			out = append(out, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: n, Value: op.m[n]}, AppendAction: op.action})
		}
	}
	return out
}

// faultConfig is a route's HTTPFault as Istio translates it: a percentage
// as a share of a million, the deprecated integer percent of a hundred,
// a gRPC status by its code; nil when there is none.
func faultConfig(in *networking.HTTPFaultInjection) *anypb.Any {
	if in == nil {
		return nil
	}
	out := &faultv3.HTTPFault{}
	if d := in.Delay; d != nil && d.GetFixedDelay() != nil {
		out.Delay = &faultcommonv3.FaultDelay{
			FaultDelaySecifier: &faultcommonv3.FaultDelay_FixedDelay{FixedDelay: d.GetFixedDelay()},
			Percentage:         &typev3.FractionalPercent{Numerator: uint32(d.Percent), Denominator: typev3.FractionalPercent_HUNDRED},
		}
		if d.Percentage != nil {
			out.Delay.Percentage = millionths(d.Percentage)
		}
	}
	if ab := in.Abort; ab != nil {
		out.Abort = &faultv3.FaultAbort{}
		if ab.Percentage != nil {
			out.Abort.Percentage = millionths(ab.Percentage)
		}
		switch e := ab.ErrorType.(type) {
		case *networking.HTTPFaultInjection_Abort_HttpStatus:
			out.Abort.ErrorType = &faultv3.FaultAbort_HttpStatus{HttpStatus: uint32(e.HttpStatus)}
		case *networking.HTTPFaultInjection_Abort_GrpcStatus:
			out.Abort.ErrorType = &faultv3.FaultAbort_GrpcStatus{GrpcStatus: config.GRPCStatusCode(e.GrpcStatus)}
		default:
			out.Abort = nil
		}
	}
	if out.Delay == nil && out.Abort == nil {
		return nil
	}
	a, _ := anypb.New(out)
	return a
}

func millionths(p *networking.Percent) *typev3.FractionalPercent {
	return &typev3.FractionalPercent{Numerator: uint32(p.Value * 10000), Denominator: typev3.FractionalPercent_MILLION}
}
