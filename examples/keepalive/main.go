// Command keepalive is a small service that keeps itself registered in
// Sextant through the Go SDK (github.com/sextant-mesh/sextant/client), the
// way a real service process would:
//
//   - it listens on --host:--port first, so it is reachable before anyone
//     can find it;
//   - it registers as an instance of --service with a TTL and the metadata
//     label version=--version (what examples/routing.yaml's subsets select),
//     and heartbeats every half TTL (client.Keepalive);
//   - it answers every HTTP request with one line naming itself;
//   - on SIGINT or SIGTERM it deregisters first, so no new call is routed to
//     it, then lets the calls in flight finish and exits 0.
//
// Run it beside "sextant server" and a gateway (README.md, examples/README.md):
//
//	go run ./examples/keepalive --service orders --port 9001
//	curl -s -H 'Host: orders' localhost:8080/
//
// --port 0 listens on a free port; the log line "registered" says which.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

func main() {
	var o options
	flag.StringVar(&o.server, "server", envOr("SEXTANT_SERVER", "http://127.0.0.1:7400"), "registry server URL (env SEXTANT_SERVER)")
	flag.StringVar(&o.token, "token", os.Getenv("SEXTANT_TOKEN"), "ACL token, for a server run with --acl (env SEXTANT_TOKEN)")
	flag.StringVar(&o.namespace, "namespace", "default", "namespace to register in")
	flag.StringVar(&o.service, "service", "", "service to register as (required)")
	flag.StringVar(&o.host, "host", "127.0.0.1", "address to listen on and to register (an IP address the gateway can reach)")
	flag.IntVar(&o.port, "port", 0, "port to listen on and to register (0: a free one)")
	flag.StringVar(&o.version, "version", "v1", `metadata label "version" (the subsets of examples/routing.yaml select on it)`)
	flag.DurationVar(&o.ttl, "ttl", 10*time.Second, "TTL of the registration; heartbeats go every half TTL")
	flag.DurationVar(&o.drain, "drain", 5*time.Second, "how long calls in flight may take to finish at shutdown")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "keepalive: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, log); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

type options struct {
	server, token      string
	namespace, service string
	host               string
	port               int
	version            string
	ttl, drain         time.Duration
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// run serves and stays registered until ctx ends, then deregisters and
// stops serving.
func run(ctx context.Context, o options, log *slog.Logger) error {
	if o.service == "" {
		return errors.New("keepalive: --service is required")
	}
	if o.port < 0 || o.port > 65535 {
		return fmt.Errorf("keepalive: --port %d: not in 0..65535", o.port)
	}
	if net.ParseIP(o.host) == nil {
		return fmt.Errorf("keepalive: --host %q: not an IP address (the gateway connects to what is registered)", o.host)
	}
	var opts []client.Option
	if o.token != "" {
		opts = append(opts, client.WithToken(o.token))
	}
	c, err := client.New(o.server, opts...)
	if err != nil {
		return fmt.Errorf("keepalive: %w", err)
	}

	ln, err := net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.port)))
	if err != nil {
		return fmt.Errorf("keepalive: %w", err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	hostname, _ := os.Hostname()
	hello := fmt.Sprintf("%s/%s %s at %s (pid %d on %s)\n", o.namespace, o.service, o.version, addr, os.Getpid(), hostname)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprint(w, hello)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }() // stopped by Shutdown or Close below

	// The registration ends (and deregisters) when ctx ends; Close below
	// waits for that deregister's answer.
	reg, err := c.Keepalive(ctx, client.Instance{
		Namespace: o.namespace, Service: o.service, Host: o.host, Port: addr.Port,
		Protocol: "http",
		Metadata: map[string]string{"version": o.version},
	}, o.ttl, client.WithKeepaliveErrors(func(err error) { log.Warn("heartbeat failed; retrying", "err", err) }))
	if err != nil {
		srv.Close()
		<-served
		return fmt.Errorf("keepalive: register %s/%s at %s: %w", o.namespace, o.service, addr, err)
	}
	log.Info("registered", "service", o.namespace+"/"+o.service, "id", reg.ID(), "addr", addr.String(),
		"version", o.version, "ttl", o.ttl, "server", c.BaseURL())

	select {
	case <-ctx.Done():
	case err := <-served: // the listener failed: nothing to serve, leave the registry
		reg.Close()
		return fmt.Errorf("keepalive: serve: %w", err)
	}
	// Deregister first, so the gateway stops routing here, then drain. A
	// call sent before the change reaches the gateway meets a closed port,
	// which examples/routing.yaml's retries (connect-failure) send elsewhere.
	derr := reg.Close()
	if derr == nil {
		log.Info("deregistered", "id", reg.ID())
	}
	sctx, cancel := context.WithTimeout(context.Background(), o.drain)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	<-served
	if derr != nil {
		return fmt.Errorf("keepalive: %w", derr)
	}
	return nil
}
