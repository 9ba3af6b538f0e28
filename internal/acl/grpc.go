package acl

import (
	"context"
	"errors"
	"log/slog"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// The gRPC side of the guard: interceptors that read the bearer token from
// the "authorization" metadata (as grpc-go's oauth credentials and Envoy's
// initial metadata send it), put the caller in the call's context for
// RequireContext and Readable, rate-limit each call or stream opening on
// the caller's read bucket, audit refusals and writes, and end a stream
// whose token is revoked.

// UnaryInterceptor guards unary calls.
func (g *Guard) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, st, err := g.beginRPC(ctx, info.FullMethod)
		if err != nil {
			g.endRPC(st, err)
			return nil, rpcError(err)
		}
		resp, err := handler(ctx, req)
		g.endRPC(st, err)
		return resp, rpcError(err)
	}
}

// StreamInterceptor guards streams. A stream whose token is revoked while
// it is open is ended with Unauthenticated at once.
func (g *Guard) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, st, err := g.beginRPC(ss.Context(), info.FullMethod)
		if err != nil {
			g.endRPC(st, err)
			return rpcError(err)
		}
		var revoked error
		if g.opts.Enabled && st.accessor != "" {
			cctx, cancel := context.WithCancelCause(ctx)
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() { // owned by this call; ends with it
				defer close(done)
				for {
					changed := g.Changed()
					if err := Authenticated(cctx); err != nil {
						cancel(err)
						return
					}
					select {
					case <-changed:
					case <-stop:
						return
					case <-cctx.Done():
						return
					}
				}
			}()
			defer func() { close(stop); <-done; cancel(nil) }()
			ctx = cctx
			err = handler(srv, &guardedStream{ServerStream: ss, ctx: ctx})
			if cause := context.Cause(cctx); cause != nil && !errors.Is(cause, context.Canceled) {
				revoked = cause
			}
		} else {
			err = handler(srv, &guardedStream{ServerStream: ss, ctx: ctx})
		}
		if revoked != nil {
			err = revoked
		}
		g.endRPC(st, err)
		return rpcError(err)
	}
}

type guardedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *guardedStream) Context() context.Context { return s.ctx }

func (g *Guard) beginRPC(ctx context.Context, method string) (context.Context, *state, error) {
	st := &state{g: g, op: method}
	st.ns = st.nsBuf[:0]
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		st.remote = p.Addr.String()
		if host, _, err := net.SplitHostPort(st.remote); err == nil {
			st.remote = host
		}
	}
	ctx = context.WithValue(ctx, ctxKey{}, st)
	var bearer string
	var present bool
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			if bearer, present = ParseBearer(v[0]); !present && g.opts.Enabled {
				st.refused = unauthenticated("the authorization metadata is not \"Bearer <token>\"")
				return ctx, st, st.refused
			}
		}
	}
	if e := g.authenticate(st, bearer, present, false); e != nil {
		st.refused = e
		return ctx, st, e
	}
	if e := g.limit(st, false); e != nil {
		st.refused = e
		return ctx, st, e
	}
	return ctx, st, nil
}

func (g *Guard) endRPC(st *state, err error) {
	if g.audit == nil {
		return
	}
	var ae *Error
	isACL := errors.As(err, &ae)
	st.mu.Lock()
	write, refused := st.write, st.refused
	st.mu.Unlock()
	code := slog.String("grpc_code", status.Code(rpcError(err)).String())
	switch {
	case refused != nil && refused.Code == "resource_exhausted":
	case refused != nil:
		g.auditRecord(st, refused.Code, 0, code)
	case isACL && (ae.Code == "unauthenticated" || ae.Code == "permission_denied"):
		g.auditRecord(st, "denied", 0, code)
	case write && err != nil:
		g.auditRecord(st, "failed", 0, code)
	case write:
		g.auditRecord(st, "ok", 0, code)
	}
}

// rpcError turns an *Error into a gRPC status; other errors pass.
func rpcError(err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	c := codes.Internal
	switch e.Code {
	case "unauthenticated":
		c = codes.Unauthenticated
	case "permission_denied":
		c = codes.PermissionDenied
	case "resource_exhausted":
		c = codes.ResourceExhausted
	case "not_found":
		c = codes.NotFound
	case "conflict":
		c = codes.AlreadyExists
	case "invalid_argument":
		c = codes.InvalidArgument
	}
	return status.Error(c, e.Msg)
}

// BearerToken is the client side: per-call credentials sending token as
// "authorization: Bearer <token>" metadata. Insecure allows it over a
// connection without TLS (loopback, tests).
type BearerToken struct {
	Token    string
	Insecure bool
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b BearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.Token}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (b BearerToken) RequireTransportSecurity() bool { return !b.Insecure }

// StreamPermission is an interceptor, chained after StreamInterceptor,
// that requires p of every stream of the server: for a gRPC service whose
// streams need one permission (ADS subscribers: push:read on every
// namespace until the xDS server checks each resource's namespace).
func StreamPermission(p Permission) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := RequireContext(ss.Context(), p); err != nil {
			if stateFrom(ss.Context()) == nil {
				return rpcError(err)
			}
			return err // StreamInterceptor audits it and answers its status
		}
		return handler(srv, ss)
	}
}
