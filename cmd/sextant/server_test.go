package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServerStopsWhenXDSFails: the xDS server stopping on its own (its
// listener broke) stops the whole server with an error, rather than
// leaving it serving stale xDS while /readyz says ready; a shutdown by
// ctx still returns nil.
func TestServerStopsWhenXDSFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail bool
	}{
		{"xds listener fails", true},
		{"ctx ends", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			xln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer xln.Close()
			addr, data := freeAddr(t), t.TempDir()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- runServer(ctx, serverFlags{data: data, http: addr, xds: xln.Addr().String(), xdsListener: xln,
					logFormat: "text", logLevel: "error", logSize: 1 << 16, drain: 5 * time.Second, auditLog: "off"})
			}()
			waitTrue(t, 10*time.Second, func() bool {
				resp, err := http.Get("http://" + addr + "/readyz")
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK
			})
			if tc.fail {
				xln.Close()
			} else {
				cancel()
			}
			select {
			case err := <-done:
				switch {
				case tc.fail && (err == nil || !strings.Contains(err.Error(), "xds server")):
					t.Fatalf("server returned %v, want the xds server's error", err)
				case !tc.fail && err != nil:
					t.Fatalf("server returned %v after ctx ended", err)
				}
			case <-time.After(30 * time.Second):
				cancel()
				<-done
				t.Fatal("the server kept running")
			}
		})
	}
}

// TestMeshRootNamespaceFlag: a root namespace that is not a namespace name
// is refused before anything starts, naming the flag; unset is the default.
func TestMeshRootNamespaceFlag(t *testing.T) {
	if err := (serverFlags{meshRoot: "Bad_NS"}).validate(); err == nil || !strings.Contains(err.Error(), "--mesh-root-namespace") {
		t.Fatalf("Bad_NS: %v", err)
	}
	for _, ns := range []string{"", "mesh-config"} {
		if err := (serverFlags{meshRoot: ns}).validate(); err != nil {
			t.Fatalf("%q: %v", ns, err)
		}
	}
}
