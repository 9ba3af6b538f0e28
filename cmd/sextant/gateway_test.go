package main

import (
	"context"
	"io"
	"log/slog"
	"strconv"
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

// A gateway listening on every interface registers the address it reaches
// the registry from, not "::", which no caller can reach.
func TestGatewayRegistersReachableHost(t *testing.T) {
	srv := apitest.Start(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, proxy := range []string{"[::]:8080", "0.0.0.0:8080"} {
		f := gatewayFlags{registry: srv.URL, service: "gw-" + strconv.Itoa(len(proxy)), node: "gw-1"}
		deregister, err := registerGateway(context.Background(), f, "[::]:7403", proxy, log)
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Query(context.Background(), "default", f.service, client.QueryOptions{})
		deregister()
		if err != nil {
			t.Fatal(err)
		}
		// apitest's server is on loopback: the gateway reaches it from there.
		if len(res.Instances) != 1 || res.Instances[0].Host != "127.0.0.1" || res.Instances[0].Port != 8080 {
			t.Fatalf("listening on %s registered %+v, want host 127.0.0.1", proxy, res.Instances)
		}
	}
}
