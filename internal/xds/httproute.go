//lint:file-ignore SA1019 Istio's deprecated fault.delay.percent is still written in configs; it is read as Istio reads it.

package xds

import (
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
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
	if hr.Fault != nil || hr.DirectResponse != nil || hr.Headers != nil || hr.Rewrite != nil || hr.Redirect != nil || hr.CorsPolicy != nil ||
		hr.Mirror != nil || len(hr.Mirrors) > 0 {
		return true
	}
	for _, d := range hr.Route {
		if d.Headers != nil {
			return true
		}
	}
	return slices.ContainsFunc(hr.Match, matchExtras) || hr.Retries.GetBackoff() != nil || hr.Retries.GetRetryIgnorePreviousHosts() != nil
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
	} else if rd := hr.Redirect; rd != nil {
		redirectAction(r, rd)
	} else {
		rewrite(a, hr.Rewrite)
		r.Action = &routev3.Route_Route{Route: a}
	}
	if f := faultConfig(hr.Fault); f != nil {
		r.TypedPerFilterConfig = map[string]*anypb.Any{FaultFilterName: f}
	}
	if c := corsConfig(hr.CorsPolicy); c != nil {
		if r.TypedPerFilterConfig == nil {
			r.TypedPerFilterConfig = map[string]*anypb.Any{}
		}
		r.TypedPerFilterConfig[CORSFilterName] = c
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

// rewrite puts a route's rewrite on its action as Istio does: the uri as
// prefix_rewrite (Envoy swaps the matched prefix, or the whole exact
// path), the authority as host_rewrite_literal, uriRegexRewrite as
// regex_rewrite (RE2, \1 for a group).
func rewrite(a *routev3.RouteAction, rw *networking.HTTPRewrite) {
	if rw == nil {
		return
	}
	a.PrefixRewrite = rw.Uri
	if rr := rw.UriRegexRewrite; rr != nil {
		a.PrefixRewrite = ""
		a.RegexRewrite = &matcherv3.RegexMatchAndSubstitute{Pattern: &matcherv3.RegexMatcher{Regex: rr.Match}, Substitution: rr.Rewrite}
	}
	if rw.Authority != "" {
		a.HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: rw.Authority}
	}
}

// RedirectPortField is the field of a route's "sextant" filter metadata
// that says a redirect keeps the request's port (Istio's derivePort
// FROM_REQUEST_PORT): Envoy's RedirectAction cannot say it, and one route
// config serves proxies listening on different ports. The gateway reads
// it; Envoy keeps the request's port only when the authority is unchanged.
const RedirectPortField = "redirect_port"

// redirectAction makes r answer with Istio's redirect: the path replaced
// (or the matched prefix, prefixRewrite), the authority, port and scheme,
// the code (301 unless set).
func redirectAction(r *routev3.Route, in *networking.HTTPRedirect) {
	rd := &routev3.RedirectAction{HostRedirect: in.Authority}
	switch {
	case in.PrefixRewrite != "":
		rd.PathRewriteSpecifier = &routev3.RedirectAction_PrefixRewrite{PrefixRewrite: in.PrefixRewrite}
	case in.Uri != "":
		rd.PathRewriteSpecifier = &routev3.RedirectAction_PathRedirect{PathRedirect: in.Uri}
	}
	if in.Scheme != "" {
		rd.SchemeRewriteSpecifier = &routev3.RedirectAction_SchemeRedirect{SchemeRedirect: in.Scheme}
	}
	switch p := in.RedirectPort.(type) {
	case *networking.HTTPRedirect_Port:
		rd.PortRedirect = p.Port
	case *networking.HTTPRedirect_DerivePort:
		if p.DerivePort == networking.HTTPRedirect_FROM_REQUEST_PORT {
			r.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
				"sextant": {Fields: map[string]*structpb.Value{RedirectPortField: structpb.NewStringValue("FROM_REQUEST_PORT")}}}}
		}
	}
	switch in.RedirectCode {
	case 302:
		rd.ResponseCode = routev3.RedirectAction_FOUND
	case 303:
		rd.ResponseCode = routev3.RedirectAction_SEE_OTHER
	case 307:
		rd.ResponseCode = routev3.RedirectAction_TEMPORARY_REDIRECT
	case 308:
		rd.ResponseCode = routev3.RedirectAction_PERMANENT_REDIRECT
	default: // 0, 301 (validated)
		rd.ResponseCode = routev3.RedirectAction_MOVED_PERMANENTLY
	}
	r.Action = &routev3.Route_Redirect{Redirect: rd}
}
