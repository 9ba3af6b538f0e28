package grpcresolver

import (
	"context"
	"net/http"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/trace"
)

// traceKeys are the trace context's metadata keys (gRPC's are lower case).
var traceKeys = []string{
	strings.ToLower(trace.HeaderTraceparent), strings.ToLower(trace.HeaderTracestate),
	strings.ToLower(trace.HeaderB3), strings.ToLower(trace.HeaderB3TraceID), strings.ToLower(trace.HeaderB3SpanID),
	strings.ToLower(trace.HeaderB3ParentSpan), strings.ToLower(trace.HeaderB3Sampled), strings.ToLower(trace.HeaderB3Flags),
	"x-request-id",
}

// TraceUnaryInterceptor and TraceStreamInterceptor carry a call's trace
// context to the RPCs made with its context, as Istio asks services to, so
// that the mesh's proxies see one trace: the context of
// client.WithTraceContext (a service serving HTTP), else the metadata of
// the gRPC call being served (a gRPC server's handler passes its ctx on).
// An RPC whose outgoing metadata already names a trace keeps its own.
//
//	conn, err := grpc.NewClient("sextant:///inventory",
//		grpc.WithTransportCredentials(insecure.NewCredentials()),
//		grpc.WithChainUnaryInterceptor(grpcresolver.TraceUnaryInterceptor()),
//		grpc.WithChainStreamInterceptor(grpcresolver.TraceStreamInterceptor()))
func TraceUnaryInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(withTrace(ctx), method, req, reply, cc, opts...)
	}
}

// TraceStreamInterceptor is TraceUnaryInterceptor for streams.
func TraceStreamInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return streamer(withTrace(ctx), desc, cc, method, opts...)
	}
}

// withTrace adds ctx's trace context to its outgoing metadata.
func withTrace(ctx context.Context) context.Context {
	out, _ := metadata.FromOutgoingContext(ctx)
	for _, k := range traceKeys {
		if len(out.Get(k)) > 0 {
			return ctx // the caller wrote its own context: keep it whole
		}
	}
	h := client.TraceContext(ctx)
	if h == nil {
		if in, ok := metadata.FromIncomingContext(ctx); ok {
			// The served call's context, checked as an HTTP request's is
			// (an invalid trace header is not carried).
			hh := http.Header{}
			for _, k := range traceKeys {
				for _, v := range in.Get(k) {
					hh.Add(k, v)
				}
			}
			h = client.TraceContext(client.WithTraceContext(ctx, hh))
		}
	}
	var kv []string
	for _, k := range traceKeys {
		for _, v := range h.Values(http.CanonicalHeaderKey(k)) {
			kv = append(kv, k, v)
		}
	}
	if len(kv) == 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}
