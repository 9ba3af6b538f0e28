package main

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// The gateway registers itself in the real registry with its admin address
// in metadata, and deregisters on shutdown.
func TestGatewayRegistersInRegistry(t *testing.T) {
	srv := apitest.Start(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f := gatewayFlags{registry: srv.URL, service: "sextant-gateway", node: "gw-1"}
	deregister, err := registerGateway(context.Background(), f, "127.0.0.1:7403", "127.0.0.1:8080", log)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Query(context.Background(), "default", "sextant-gateway", client.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Instances) != 1 {
		t.Fatalf("instances: %+v", res.Instances)
	}
	in := res.Instances[0]
	if in.Host != "127.0.0.1" || in.Port != 8080 || in.Metadata["sextant.admin"] != "127.0.0.1:7403" ||
		in.Metadata["sextant.role"] != "gateway" || in.Metadata["sextant.node"] != "gw-1" {
		t.Fatalf("registered %+v", in)
	}
	deregister()
	res, err = c.Query(context.Background(), "default", "sextant-gateway", client.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Instances) != 0 {
		t.Fatalf("still registered after shutdown: %+v", res.Instances)
	}
}
