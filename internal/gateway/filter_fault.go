package gateway

import (
	"math/rand/v2"
	"strconv"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/valyala/fasthttp"
	"google.golang.org/protobuf/types/known/anypb"
)

// Envoy's fault injection filter, as Istio configures it per route
// (VirtualService http[].fault): the route's typed_per_filter_config under
// the filter's name holds an HTTPFault.
const (
	faultFilterName = "envoy.filters.http.fault"
	faultTypeURL    = "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault"
	reasonFault     = "fault_abort"
)

// faultFilter delays and/or aborts a share of a route's calls.
type faultFilter struct {
	delay              time.Duration
	delayNum, delayDen uint32 // the share delayed: num out of den
	abortHTTP          int    // 0: none (then abortGRPC, if set)
	abortGRPC          int    // -1: none
	abortNum, abortDen uint32
}

// buildFaultFilter reads the route's fault config; nil if it has none or
// one that injects nothing.
func buildFaultFilter(r *route.Route, path string) (httpFilter, error) {
	a, ok := r.GetTypedPerFilterConfig()[faultFilterName]
	if !ok {
		return nil, nil
	}
	p := path + `.typed_per_filter_config["` + faultFilterName + `"]`
	if a.GetTypeUrl() == filterConfigURL {
		fc := new(route.FilterConfig)
		if err := a.UnmarshalTo(fc); err != nil {
			return nil, fieldErr(p, "%v", err)
		}
		if fc.GetDisabled() || fc.GetConfig() == nil {
			return nil, nil
		}
		a, p = fc.GetConfig(), p+".config"
	}
	if a.GetTypeUrl() != faultTypeURL {
		return nil, fieldErr(p, "type %q: the fault filter needs %q", a.GetTypeUrl(), faultTypeURL)
	}
	return decodeFault(a, p)
}

func decodeFault(a *anypb.Any, p string) (httpFilter, error) {
	cfg := new(faultv3.HTTPFault)
	if err := a.UnmarshalTo(cfg); err != nil {
		return nil, fieldErr(p, "%v", err)
	}
	f := &faultFilter{abortGRPC: -1}
	if d := cfg.GetDelay(); d != nil {
		fd := d.GetFixedDelay()
		if fd == nil {
			return nil, fieldErr(p+".delay", "only fixed_delay is supported (header_delay: %v)", errUnsupported)
		}
		t, err := duration(fd, p+".delay.fixed_delay")
		if err != nil {
			return nil, err
		}
		f.delay = t
		f.delayNum, f.delayDen = fraction(d.GetPercentage())
	}
	if ab := cfg.GetAbort(); ab != nil {
		switch e := ab.GetErrorType().(type) {
		case *faultv3.FaultAbort_HttpStatus:
			if e.HttpStatus < 200 || e.HttpStatus > 599 {
				return nil, fieldErr(p+".abort.http_status", "%d not in [200, 599]", e.HttpStatus)
			}
			f.abortHTTP = int(e.HttpStatus)
		case *faultv3.FaultAbort_GrpcStatus:
			if e.GrpcStatus > 16 {
				return nil, fieldErr(p+".abort.grpc_status", "%d is not a gRPC status (0-16)", e.GrpcStatus)
			}
			f.abortGRPC = int(e.GrpcStatus)
		default:
			return nil, fieldErr(p+".abort", "error type %T: %v (http_status, grpc_status)", e, errUnsupported)
		}
		f.abortNum, f.abortDen = fraction(ab.GetPercentage())
	}
	if cfg.GetMaxActiveFaults() != nil && cfg.GetMaxActiveFaults().GetValue() == 0 {
		return nil, nil // Envoy and grpc-go: no fault may be active
	}
	if (f.delay == 0 || f.delayNum == 0) && f.abortNum == 0 {
		return nil, nil
	}
	return f, nil
}

// fraction is a FractionalPercent as num out of den; unset is 0%, as Envoy
// and grpc-go read it. A numerator above the denominator is 100%.
func fraction(fp *typev3.FractionalPercent) (num, den uint32) {
	switch fp.GetDenominator() {
	case typev3.FractionalPercent_TEN_THOUSAND:
		den = 10_000
	case typev3.FractionalPercent_MILLION:
		den = 1_000_000
	default:
		den = 100
	}
	return min(fp.GetNumerator(), den), den
}

// hit draws whether this call is in a share of num out of den.
func hit(num, den uint32) bool { return num >= den || (num > 0 && rand.Uint32N(den) < num) }

// request delays the call (on its own goroutine: fasthttp and net/http
// serve each connection or stream on one), then aborts it, each with its
// own chance, as Envoy's filter does.
func (f *faultFilter) request(ctx *fasthttp.RequestCtx, _ int) bool {
	if f.delay > 0 && hit(f.delayNum, f.delayDen) {
		t := time.NewTimer(f.delay)
		select {
		case <-t.C:
		case <-shutdownOf(ctx): // the server is shutting down
			t.Stop()
		}
	}
	if f.abortNum == 0 || !hit(f.abortNum, f.abortDen) {
		return false
	}
	ctx.SetUserValue(filterReasonKey, reasonFault)
	resp := &ctx.Response
	resp.Reset()
	resp.Header.Set("Via", viaValue)
	if f.abortHTTP == 0 {
		// A gRPC status: a trailers-only gRPC answer, as Envoy sends.
		resp.SetStatusCode(fasthttp.StatusOK)
		resp.Header.SetContentType("application/grpc")
		resp.Header.Set("Grpc-Status", strconv.Itoa(f.abortGRPC))
		resp.Header.Set("Grpc-Message", "fault filter abort")
		return true
	}
	resp.SetStatusCode(f.abortHTTP)
	resp.Header.SetContentType("text/plain")
	// The error header lets an HTTP/2 gRPC call get the grpc-status of the
	// HTTP status (writeFast), as Envoy maps it.
	resp.Header.Set(ErrorHeader, reasonFault)
	resp.SetBodyString("fault filter abort")
	return true
}

func (*faultFilter) response(*fasthttp.RequestCtx, responseHeader, int) {}
