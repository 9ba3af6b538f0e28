package acl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"
)

// TestAuditHandlerMatchesJSONHandler: for the audit's records the fast
// handler writes what slog.JSONHandler writes, value for value.
func TestAuditHandlerMatchesJSONHandler(t *testing.T) {
	var fast, std bytes.Buffer
	now := time.Date(2026, 11, 22, 10, 0, 0, 123456789, time.UTC)
	for _, h := range []struct {
		h slog.Handler
		b *bytes.Buffer
	}{{NewAuditHandler(&fast), &fast}, {slog.NewJSONHandler(&std, nil), &std}} {
		l := slog.New(h.h).With("component", "audit")
		rec := slog.NewRecord(now, slog.LevelInfo, "audit", 0)
		rec.AddAttrs(slog.String("accessor", "0123abcd"), slog.String("op", "POST /v1/instances"),
			slog.Any("namespace", []string{"a", "b<>&\"\\\n\x01\u2028é\xff"}), slog.Int("status", 403),
			slog.Bool("more_namespaces", true), slog.String("missing", `instances:write on namespace "b"`),
			slog.Float64("f", 1.5), slog.Any("err", errors.New("boom")), slog.Group("g", slog.Int("x", 1)))
		if err := l.Handler().Handle(t.Context(), rec); err != nil {
			t.Fatal(err)
		}
		slog.New(h.h).Debug("dropped")
	}
	var a, b map[string]any
	if err := json.Unmarshal(fast.Bytes(), &a); err != nil {
		t.Fatalf("fast handler wrote invalid JSON: %v\n%s", err, fast.Bytes())
	}
	if err := json.Unmarshal(std.Bytes(), &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("fast %s\nstd  %s", fast.Bytes(), std.Bytes())
	}
	if bytes.Count(fast.Bytes(), []byte("\n")) != 1 {
		t.Fatalf("not one line per record, or a Debug record written:\n%s", fast.Bytes())
	}
}

func TestAuditHandlerGroups(t *testing.T) {
	var fast, std bytes.Buffer
	for _, h := range []slog.Handler{NewAuditHandler(&fast), slog.NewJSONHandler(&std, nil)} {
		slog.New(h).With("a", 1).WithGroup("grp").With("k", "v").Info("x", "y", 2, slog.Group("in", "z", 3))
	}
	var a, b map[string]any
	if err := json.Unmarshal(fast.Bytes(), &a); err != nil {
		t.Fatalf("%v: %s", err, fast.Bytes())
	}
	json.Unmarshal(std.Bytes(), &b)
	delete(a, "time")
	delete(b, "time")
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("fast %s\nstd  %s", fast.Bytes(), std.Bytes())
	}
}

// BenchmarkAuditHandler writes one audit record of a write through the
// fast handler and through slog.JSONHandler, side by side.
func BenchmarkAuditHandler(b *testing.B) {
	for _, c := range []struct {
		name string
		h    slog.Handler
	}{{"audit", NewAuditHandler(io.Discard)}, {"slog-json", slog.NewJSONHandler(io.Discard, nil)}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rec := slog.NewRecord(time.Now(), slog.LevelInfo, "audit", 0)
				rec.AddAttrs(slog.String("accessor", "3f2a0123456789abcdef0123"), slog.String("remote", "10.0.0.1"),
					slog.String("op", "POST /v1/instances"), slog.String("namespace", "orders"), slog.String("result", "ok"), slog.Int("status", 200))
				if err := c.h.Handle(context.Background(), rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
