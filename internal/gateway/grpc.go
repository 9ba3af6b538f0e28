package gateway

import (
	"bytes"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sextant-mesh/sextant/internal/balancer"
)

// gRPC through the gateway (docs/gateway.md "gRPC"): a gRPC call is an
// HTTP/2 request whose content-type is application/grpc[+proto|...]. The
// gateway reads three things of it: grpc-timeout (the call's deadline,
// which bounds the upstream deadline with the route's timeout), the
// grpc-status of a trailers-only answer (for retries, as Envoy reads it),
// and the grpc-status of the trailers (for the call record). Its own
// replies to a gRPC call are trailers-only answers (HTTP 200, grpc-status
// and grpc-message in the headers), which gRPC clients read as the
// call's status.

// gRPC status codes the gateway names.
const (
	grpcOK                = 0
	grpcCancelled         = 1
	grpcUnknown           = 2
	grpcDeadlineExceeded  = 4
	grpcPermissionDenied  = 7
	grpcResourceExhausted = 8
	grpcUnimplemented     = 12
	grpcInternal          = 13
	grpcUnavailable       = 14
	grpcUnauthenticated   = 16
)

// maxGRPCTimeout bounds a grpc-timeout: 8 digits of hours, about 11,415
// years, would overflow a time.Duration.
const maxGRPCTimeout = time.Duration(math.MaxInt64)

// grpcTimeoutUnits are grpc-timeout's units.
var grpcTimeoutUnits = [256]time.Duration{'H': time.Hour, 'M': time.Minute, 'S': time.Second,
	'm': time.Millisecond, 'u': time.Microsecond, 'n': time.Nanosecond}

// parseGRPCTimeout reads a grpc-timeout header value: at most 8 ASCII
// digits and a unit (H hours, M minutes, S seconds, m milliseconds, u
// microseconds, n nanoseconds), as the gRPC over HTTP/2 spec defines it.
func parseGRPCTimeout(v []byte) (time.Duration, error) {
	if len(v) < 2 || len(v) > 9 {
		return 0, errors.New("grpc-timeout: want 1 to 8 digits and a unit (H, M, S, m, u, n), got " + strconv.Quote(string(v)))
	}
	unit := grpcTimeoutUnits[v[len(v)-1]]
	if unit == 0 {
		return 0, errors.New("grpc-timeout: unknown unit in " + strconv.Quote(string(v)))
	}
	var n int64
	for _, c := range v[:len(v)-1] {
		if c < '0' || c > '9' {
			return 0, errors.New("grpc-timeout: not a number: " + strconv.Quote(string(v)))
		}
		n = n*10 + int64(c-'0')
	}
	if n > int64(maxGRPCTimeout/unit) {
		return maxGRPCTimeout, nil
	}
	return time.Duration(n) * unit, nil
}

// isGRPC reports whether a content-type is gRPC's.
func isGRPC(ct []byte) bool {
	const p = "application/grpc"
	if len(ct) < len(p) || !bytes.EqualFold(ct[:len(p)], []byte(p)) {
		return false
	}
	return len(ct) == len(p) || ct[len(p)] == '+' || ct[len(p)] == ';'
}

// parseGRPCStatus reads a grpc-status value; -1 when absent or malformed.
func parseGRPCStatus(v string) int {
	if v == "" || len(v) > 3 {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 255 {
		return -1
	}
	return n
}

// grpcRetriable reports whether a grpc-status is one the route's retry_on
// names.
func (s *retrySpec) grpcRetriable(code int) bool {
	return code >= 0 && code < len(grpcRetryOn) && grpcRetryOn[code] != 0 && s.on&grpcRetryOn[code] != 0
}

// grpcRetryOn maps the gRPC statuses Envoy's retry_on names to their
// conditions.
var grpcRetryOn = [...]retryOn{grpcCancelled: retryCancelled, grpcDeadlineExceeded: retryDeadlineExceeded,
	grpcResourceExhausted: retryResourceExhausted, grpcInternal: retryInternal, grpcUnavailable: retryUnavailable}

// grpcOutcome is what an answer's grpc-status teaches the balancer: an
// endpoint out of capacity or unavailable is a refusal (as a 503), an
// internal error a failure, any other status an answer.
func grpcOutcome(code int) balancer.Outcome {
	switch code {
	case grpcUnavailable, grpcResourceExhausted:
		return balancer.Rejected
	case grpcInternal, grpcUnknown:
		return balancer.Failed
	}
	return balancer.Success
}

// grpcStatusFor is the grpc-status of a reply the gateway makes itself to
// a gRPC call: a timeout is DEADLINE_EXCEEDED, the rest as gRPC's own
// HTTP-to-gRPC mapping (doc/http-grpc-status-mapping.md).
func grpcStatusFor(status int, reason string) int {
	if reason == reasonTimeout {
		return grpcDeadlineExceeded
	}
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusRequestHeaderFieldsTooLarge:
		return grpcInternal
	case http.StatusUnauthorized:
		return grpcUnauthenticated
	case http.StatusForbidden:
		return grpcPermissionDenied
	case http.StatusNotFound:
		return grpcUnimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return grpcUnavailable
	}
	return grpcUnknown
}

// grpcRecord is a grpc-status as the call record stores it (+1; 0: none).
func grpcRecord(code int) uint8 {
	if code < 0 || code > 254 {
		return 0
	}
	return uint8(code + 1)
}

// grpcMessageEscape percent-encodes a grpc-message as the spec requires
// (bytes outside printable ASCII, and '%').
func grpcMessageEscape(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c <= 0x7e && c != '%' {
			b = append(b, c)
			continue
		}
		b = append(b, '%', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&15])
	}
	return string(b)
}
