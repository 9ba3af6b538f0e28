package acl

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// guardedHealth is grpc-go's own health service behind the guard, with
// each call requiring push:read on the namespace named by the checked
// service: a real gRPC API, as the xDS server will be.
type guardedHealth struct {
	healthpb.UnimplementedHealthServer
	inner *health.Server
}

func (h *guardedHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if err := RequireContext(ctx, Permission{Resource: Push, Access: Read, Namespace: req.Service}); err != nil {
		return nil, err
	}
	return h.inner.Check(ctx, req)
}

func (h *guardedHealth) Watch(req *healthpb.HealthCheckRequest, ss healthpb.Health_WatchServer) error {
	if err := RequireContext(ss.Context(), Permission{Resource: Push, Access: Read, Namespace: req.Service}); err != nil {
		return err
	}
	return h.inner.Watch(req, ss)
}

func TestGRPCInterceptors(t *testing.T) {
	var logs syncBuffer
	g, sub := newTestGuard(t, Options{Enabled: true, Audit: slog.New(slog.NewJSONHandler(&logs, nil))})
	ctx := context.Background()
	adminTok, adminSecret, err := g.Bootstrap(ctx, sub, "")
	if err != nil {
		t.Fatal(err)
	}
	_ = adminTok
	if _, err := g.PutPolicy(ctx, sub, &Policy{Name: "orders-push", Rules: []Rule{mustRule(t, "orders:push=read")}}, true); err != nil {
		t.Fatal(err)
	}
	tok, secret, err := g.CreateToken(ctx, sub, &TokenRequest{Policies: []string{"orders-push"}})
	if err != nil {
		t.Fatal(err)
	}

	hs := health.NewServer()
	hs.SetServingStatus("orders", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("other", healthpb.HealthCheckResponse_SERVING)
	srv := grpc.NewServer(grpc.UnaryInterceptor(g.UnaryInterceptor()), grpc.StreamInterceptor(g.StreamInterceptor()))
	healthpb.RegisterHealthServer(srv, &guardedHealth{inner: hs})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()

	dial := func(token string) healthpb.HealthClient {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if token != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(BearerToken{Token: token, Insecure: true}))
		}
		cc, err := grpc.NewClient(ln.Addr().String(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return healthpb.NewHealthClient(cc)
	}
	check := func(c healthpb.HealthClient, svc string) codes.Code {
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		return status.Code(err)
	}
	bad := secret[:len(secret)-1] + "0"
	if bad == secret {
		bad = secret[:len(secret)-1] + "1"
	}
	for _, tt := range []struct {
		name  string
		token string
		svc   string
		want  codes.Code
	}{
		{"no token", "", "orders", codes.Unauthenticated},
		{"bad token", bad, "orders", codes.Unauthenticated},
		{"malformed", "nope", "orders", codes.Unauthenticated},
		{"own namespace", secret, "orders", codes.OK},
		{"other namespace", secret, "other", codes.PermissionDenied},
		{"admin", adminSecret, "other", codes.OK},
	} {
		if got := check(dial(tt.token), tt.svc); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}

	// A stream of a token that is revoked while it is open ends with
	// Unauthenticated at once.
	c := dial(secret)
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	stream, err := c.Watch(sctx, &healthpb.HealthCheckRequest{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("first watch answer: %v", err)
	}
	if _, err := g.DeleteToken(ctx, sub, tok.AccessorID); err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("stream after revocation: %v, want Unauthenticated naming the revocation", err)
	}
	if got := check(c, "orders"); got != codes.Unauthenticated {
		t.Fatalf("unary call after revocation: %v", got)
	}
	out := logs.String()
	for _, s := range []string{secret, adminSecret, secret[len(secret)-64:], bad} {
		if strings.Contains(out, s) {
			t.Fatal("the audit log holds a secret")
		}
	}
	if !strings.Contains(out, `"result":"denied"`) || !strings.Contains(out, `"op":"/grpc.health.v1.Health/Check"`) || !strings.Contains(out, `"accessor":"`+tok.AccessorID) {
		t.Fatalf("audit records miss the denial:\n%s", out)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func mustRule(t *testing.T, s string) Rule {
	t.Helper()
	r, err := ParseRule(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
