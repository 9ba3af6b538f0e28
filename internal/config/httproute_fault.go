//lint:file-ignore SA1019 Istio's deprecated fault.delay.percent is still written in configs; it is read as Istio reads it.

package config

import (
	"strings"

	networking "istio.io/api/networking/v1"
)

// HTTPRoute fault injection (Istio's HTTPFaultInjection): a fixed delay
// and an HTTP or gRPC abort, each on a share of the calls. Exponential
// delays and HTTP/2 errors are refused: Istio does not translate them.
func init() {
	allow(&networking.HTTPRoute{}, "fault")
	allow(&networking.HTTPFaultInjection{}, "delay", "abort")
	allow(&networking.HTTPFaultInjection_Delay{}, "percent", "fixed_delay", "percentage")
	allow(&networking.HTTPFaultInjection_Abort{}, "http_status", "grpc_status", "percentage")
	allow(&networking.Percent{}, "value")
}

// grpcCodes are the gRPC status names a fault's grpcStatus may give, as
// Istio reads them.
var grpcCodes = map[string]uint32{
	"OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4, "NOT_FOUND": 5,
	"ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9, "ABORTED": 10,
	"OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12, "INTERNAL": 13, "UNAVAILABLE": 14, "DATA_LOSS": 15, "UNAUTHENTICATED": 16,
}

// GRPCStatusCode is the code of a fault's grpcStatus name (validated).
func GRPCStatusCode(name string) uint32 { return grpcCodes[name] }

func validateFault(c errs, path string, f *networking.HTTPFaultInjection) {
	if f.Delay == nil && f.Abort == nil {
		c.add(path, ErrInvalid, "set delay, abort or both")
		return
	}
	if d := f.Delay; d != nil {
		p := join(path, "delay")
		if d.GetFixedDelay() == nil {
			c.add(join(p, "fixedDelay"), ErrInvalid, "required")
		} else if d.GetFixedDelay().CheckValid() != nil || d.GetFixedDelay().AsDuration() < 1e6 {
			c.add(join(p, "fixedDelay"), ErrInvalid, "must be at least 1ms")
		}
		if d.Percent < 0 || d.Percent > 100 {
			c.add(join(p, "percent"), ErrInvalid, "%d not in [0, 100]", d.Percent)
		}
		if d.Percentage != nil && d.Percent != 0 {
			c.add(join(p, "percent"), ErrInvalid, "set percentage or the deprecated percent, not both")
		}
		validatePercent(c, join(p, "percentage"), d.Percentage)
	}
	if a := f.Abort; a != nil {
		p := join(path, "abort")
		switch e := a.ErrorType.(type) {
		case *networking.HTTPFaultInjection_Abort_HttpStatus:
			if e.HttpStatus < 200 || e.HttpStatus > 599 {
				c.add(join(p, "httpStatus"), ErrInvalid, "%d not in [200, 599]", e.HttpStatus)
			}
		case *networking.HTTPFaultInjection_Abort_GrpcStatus:
			if _, ok := grpcCodes[e.GrpcStatus]; !ok {
				c.add(join(p, "grpcStatus"), ErrInvalid, "%q is not a gRPC status name such as UNAVAILABLE", e.GrpcStatus)
			}
		default:
			c.add(p, ErrInvalid, "set httpStatus or grpcStatus")
		}
		validatePercent(c, join(p, "percentage"), a.Percentage)
	}
}

func validatePercent(c errs, path string, p *networking.Percent) {
	if p != nil && (p.Value < 0 || p.Value > 100 || p.Value != p.Value) {
		c.add(join(path, "value"), ErrInvalid, "%v not in [0, 100]", p.Value)
	}
}

// headerNameChars are a header name's characters (RFC 9110's token).
const headerNameChars = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

func validHeaderName(n string) bool { return n != "" && strings.Trim(n, headerNameChars) == "" }
