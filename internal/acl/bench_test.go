package acl

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
)

// BenchmarkGuard is what the guard adds to one request: Begin (the token:
// parse, SHA-256, constant-time compare; the rate limit), one Require and
// End (the audit record of a write, into a buffered writer as
// --audit-log FILE does).
func BenchmarkGuard(b *testing.B) {
	cases := []struct {
		name  string
		opts  Options
		token bool
	}{
		{"off", Options{}, false},
		{"on", Options{Enabled: true}, true},
		{"on+limits+audit", Options{Enabled: true, WriteRate: Rate{PerSecond: 1e9, Burst: 1 << 30}, ReadRate: Rate{PerSecond: 1e9, Burst: 1 << 30},
			Audit: slog.New(NewAuditHandler(bufio.NewWriterSize(io.Discard, 1<<16)))}, true},
	}
	for _, c := range cases {
		for _, method := range []string{"POST", "GET"} {
			b.Run(c.name+"/"+method, func(b *testing.B) {
				g, reg := newTestGuard(b, c.opts)
				_ = reg
				ctx := context.Background()
				secret := ""
				if c.token {
					if _, err := g.PutPolicy(ctx, reg, &Policy{Name: "p", Rules: []Rule{{Namespace: "orders", Grants: [numResources]Access{Instances: Write}}, {Namespace: "team-*", Grants: [numResources]Access{Config: Read}}}}, true); err != nil {
						b.Fatal(err)
					}
					_, s, err := g.CreateToken(ctx, reg, &TokenRequest{Policies: []string{"p"}})
					if err != nil {
						b.Fatal(err)
					}
					secret = s
				}
				req := httptest.NewRequest(method, "/v1/instances", nil)
				if secret != "" {
					req.Header.Set("Authorization", "Bearer "+secret)
				}
				perm := Permission{Resource: Instances, Access: Write, Namespace: "orders"}
				if method == "GET" {
					perm.Access = Read
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					r, err := g.Begin(req, "POST /v1/instances")
					if err != nil {
						b.Fatal(err)
					}
					if err := Require(r, perm); err != nil {
						b.Fatal(err)
					}
					g.End(r, 200)
				}
			})
		}
	}
}

// BenchmarkGuardParallel is BenchmarkGuard/POST from many goroutines of
// one token, as 256 connections of one client: the rate limiter's bucket
// and the audit writer are shared by all of them.
func BenchmarkGuardParallel(b *testing.B) {
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"off", Options{}},
		{"on", Options{Enabled: true}},
		{"on+limits", Options{Enabled: true, WriteRate: Rate{PerSecond: 1e9, Burst: 1 << 30}}},
		{"on+audit", Options{Enabled: true, Audit: slog.New(NewAuditHandler(bufio.NewWriterSize(io.Discard, 1<<16)))}},
	} {
		b.Run(c.name, func(b *testing.B) {
			g, reg := newTestGuard(b, c.opts)
			secret := ""
			if c.opts.Enabled {
				_, s, err := g.CreateToken(context.Background(), reg, &TokenRequest{Policies: []string{BuiltinAdmin}})
				if err != nil {
					b.Fatal(err)
				}
				secret = s
			}
			perm := Permission{Resource: Instances, Access: Write, Namespace: "orders"}
			b.ReportAllocs()
			b.SetParallelism(128)
			b.RunParallel(func(pb *testing.PB) {
				req := httptest.NewRequest("POST", "/v1/instances", nil)
				if secret != "" {
					req.Header.Set("Authorization", "Bearer "+secret)
				}
				for pb.Next() {
					r, err := g.Begin(req, "POST /v1/instances")
					if err != nil {
						b.Fatal(err)
					}
					if err := Require(r, perm); err != nil {
						b.Fatal(err)
					}
					g.End(r, 200)
				}
			})
		})
	}
}
