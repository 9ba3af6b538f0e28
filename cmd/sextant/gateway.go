package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/accesslog"
	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/browserguard"
	"github.com/sextant-mesh/sextant/internal/calllog"
	"github.com/sextant-mesh/sextant/internal/gateway"
	"github.com/sextant-mesh/sextant/internal/gateway/xdsclient"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/locality"
	"github.com/sextant-mesh/sextant/internal/otlp"
	"github.com/sextant-mesh/sextant/internal/trace"
)

type gatewayFlags struct {
	xds, listen, admin, data string
	tlsListen                []string
	tcpListen                []string
	node, listener           string
	registry, service        string
	token, caFile            string
	certFile, keyFile        string
	adminACL                 bool
	adminPprof               bool
	adminOrigins             []string
	adminHosts               []string
	identityNS, identitySA   string
	maxBody                  int
	locality                 string
	labels                   map[string]string
	noRecords                bool
	retainAge                time.Duration
	retainBytes              int64
	procs                    int
	drain                    time.Duration
	logFormat, logLevel      string
	istioMetrics             bool
	istioReporters           []string
	istioMaxSeries           int
	tracingFlags
	accessLog         string
	accessLogFile     string
	accessLogMaxBytes int64
	accessLogKeep     int
	accessLogBuffer   int
	accessLogOTLP     string
	accessLogOTLPProt string
}

func init() {
	var f gatewayFlags
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Run the Sextant gateway: the data plane, configured by the control plane over xDS",
		Long: `Run the gateway: an HTTP/1.1 and h2c reverse proxy that takes its whole
configuration (listener, routes, clusters, endpoints, TLS secrets) from a
control plane over ADS, like Envoy or MOSN, and records every call in a call
log under --data.

The proxy listens on --listen, and serves TLS (HTTP/1.1 and HTTP/2 by ALPN,
the certificate chosen by SNI, certificates by SDS; or passed through unopened
to an endpoint, by SNI) on each --tls-listen, with the TLS listener on that
port; plain TCP (an Istio Gateway's TCP servers: tcp_proxy chains) on each
--tcp-listen, with the TCP listener on that port; the admin API (/metrics,
/v1/config, /v1/calls, /v1/calls/stats) on --admin. Clusters with a TLS
transport socket (a DestinationRule's tls SIMPLE, MUTUAL or ISTIO_MUTUAL) are
called over TLS; for ISTIO_MUTUAL the gateway
needs its own workload identity: --identity-namespace gets it from the
server at --registry and keeps it fresh. Until the first config arrives every
call is answered 503; while the control plane is unreachable the last good
config keeps serving. On SIGINT or SIGTERM the gateway stops accepting, lets
calls in flight finish (up to --drain), then flushes the call log. See
docs/gateway.md.`,
		Example: `  sextant gateway --xds 127.0.0.1:7402 --listen 127.0.0.1:8080 --admin 127.0.0.1:7403 --data ./gateway-data
  sextant gateway --xds cp:7402 --registry http://127.0.0.1:7400   # register as service sextant-gateway
  sextant gateway --xds cp:7402 --listen 0.0.0.0:8080 --tls-listen 0.0.0.0:8443   # an Istio Gateway's servers on 8080 and 8443
  sextant gateway --xds cp:7402 --tcp-listen 0.0.0.0:31400   # an Istio Gateway's TCP server on 31400
  sextant gateway --xds cp:7402 --registry http://cp:7400 --identity-namespace edge   # mesh identity for ISTIO_MUTUAL`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runGateway(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.xds, "xds", "127.0.0.1:7402", "control plane's ADS address (gRPC, plaintext)")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8080", "address the proxy listens on")
	fl.StringArrayVar(&f.tlsListen, "tls-listen", nil, "address the proxy serves TLS on (repeatable): each serves the TLS listener (filter chains with a DownstreamTlsContext) whose port is its port")
	fl.StringArrayVar(&f.tcpListen, "tcp-listen", nil, "address the proxy serves plain TCP on (repeatable): each serves the TCP listener (tcp_proxy filter chains) whose port is its port")
	fl.StringVar(&f.admin, "admin", "127.0.0.1:7403", "address of the admin API")
	fl.StringVar(&f.data, "data", "./gateway-data", "directory of the call log (created if missing)")
	host, _ := os.Hostname()
	fl.StringVar(&f.node, "node-id", "sextant-gateway~"+host, "xDS node id (the control plane's snapshot key)")
	fl.StringVar(&f.listener, "listener", "", "Listener resource to serve (default: the one on --listen's port, or the only one)")
	fl.StringVar(&f.registry, "registry", "", "registry URL to register this gateway in (empty: do not register)")
	fl.StringVar(&f.service, "service", "sextant-gateway", "service name to register as")
	fl.StringVar(&f.token, "token", os.Getenv("SEXTANT_TOKEN"), "ACL token for the control plane and the registry (env SEXTANT_TOKEN)")
	fl.StringVar(&f.caFile, "ca-file", "", "CA certificate (PEM) to trust for the control plane's and registry's TLS; set to use TLS")
	fl.StringVar(&f.certFile, "cert-file", "", "client certificate (PEM) for mutual TLS")
	fl.StringVar(&f.keyFile, "key-file", "", "client key (PEM) for mutual TLS")
	fl.BoolVar(&f.adminACL, "admin-acl", false, "check every admin request's bearer token with the server at --registry (calls need instances:read on their namespace; config and metrics need push:read)")
	fl.BoolVar(&f.adminPprof, "admin-pprof", false, "serve Go profiles (/debug/pprof/) on the admin API without --admin-acl (with it they are served to tokens with push:read)")
	fl.StringArrayVar(&f.adminOrigins, "admin-cors-origin", nil, "a web origin (scheme://host:port) whose pages may read the admin API besides the web console of --registry (repeatable)")
	fl.StringSliceVar(&f.adminHosts, "admin-allowed-hosts", nil, "more host names the admin API answers to on a loopback --admin, besides localhost and IP addresses; *: any (docs/security.md)")
	fl.StringVar(&f.identityNS, "identity-namespace", "", "get this gateway's workload identity (for DestinationRules' tls ISTIO_MUTUAL) for this namespace from the server at --registry; the token needs identity:write on it")
	fl.StringVar(&f.identitySA, "identity-service-account", "sextant-gateway", "the service account of --identity-namespace's identity")
	fl.StringToStringVar(&f.labels, "labels", nil, "the gateway's labels, KEY=VALUE,... (sent as its xDS node's LABELS: VirtualService routes by sourceLabels apply to a gateway whose labels they match, as in Istio)")
	fl.StringVar(&f.locality, "locality", "", "where this gateway runs, region[/zone[/subzone]]: endpoints in its zone are preferred, then its region, then the rest, failing over when a zone's endpoints are down (docs/gateway.md); empty: no preference")
	fl.IntVar(&f.maxBody, "max-request-bytes", 0, "largest request body accepted (413 beyond); 0: no limit (bodies stream)")
	fl.BoolVar(&f.noRecords, "no-call-log", false, "do not record calls")
	fl.DurationVar(&f.retainAge, "retain", 7*24*time.Hour, "delete call records older than this")
	fl.Int64Var(&f.retainBytes, "retain-bytes", 10<<30, "delete the oldest call records beyond this many bytes")
	fl.DurationVar(&f.drain, "drain", 30*time.Second, "how long to wait for calls in flight on shutdown")
	fl.IntVar(&f.procs, "procs", 0, "cores the proxy may use at once (GOMAXPROCS; 0: all). One core costs less CPU per call on a busy shared machine")
	fl.BoolVar(&f.istioMetrics, "istio-metrics", true, "serve Istio's standard metrics (istio_requests_total, istio_request_duration_milliseconds, istio_request_bytes, istio_response_bytes) on /metrics, for Istio's dashboards and Kiali (docs/gateway.md)")
	fl.StringSliceVar(&f.istioReporters, "istio-metrics-reporters", gateway.IstioReporters, "reporter values the Istio metrics are written under: source, destination or both (the gateway stands for both proxies of a call)")
	fl.IntVar(&f.istioMaxSeries, "istio-metrics-max-series", gateway.DefaultIstioMaxSeries, "most label sets the Istio metrics keep; calls of new ones beyond count under label values \"other\"")
	f.tracingFlags.register(fl, "sextant-gateway")
	fl.StringVar(&f.accessLog, "access-log", "", "log every call in this format: text (Envoy's default, as Istio writes it) or json (Istio's); empty: only the calls a Telemetry's accessLogging selects (docs/telemetry.md)")
	fl.StringVar(&f.accessLogFile, "access-log-file", accesslog.Stdout, "where access logs go: a file (appended, rotated) or /dev/stdout")
	fl.Int64Var(&f.accessLogMaxBytes, "access-log-max-bytes", accesslog.DefaultMaxBytes, "rotate --access-log-file past this size; 0: never")
	fl.IntVar(&f.accessLogKeep, "access-log-keep", accesslog.DefaultKeep, "rotated access log files kept (FILE.1 the newest)")
	fl.IntVar(&f.accessLogBuffer, "access-log-buffer", accesslog.DefaultBuffer, "access log lines queued for the writer; beyond, lines are dropped and counted, never waited for")
	fl.StringVar(&f.accessLogOTLP, "access-log-otlp-endpoint", "", "send the access logs of a Telemetry's otel provider as OTLP log records to this collector (host:port; for http also a URL); empty: those are not written")
	fl.StringVar(&f.accessLogOTLPProt, "access-log-otlp-protocol", "grpc", "OTLP protocol for --access-log-otlp-endpoint: grpc or http (HTTP/protobuf)")
	fl.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	rootCmd.AddCommand(cmd)
}

func runGateway(ctx context.Context, f gatewayFlags) error {
	log, err := newLogger(f.logFormat, f.logLevel)
	if err != nil {
		return err
	}
	if f.procs > 0 {
		runtime.GOMAXPROCS(f.procs)
	}
	_, portStr, err := net.SplitHostPort(f.listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", f.listen, err)
	}
	port, _ := strconv.Atoi(portStr)
	for _, r := range f.istioReporters {
		if !slices.Contains(gateway.IstioReporters, r) {
			return fmt.Errorf("--istio-metrics-reporters: %q is not a reporter (source, destination)", r)
		}
	}
	if f.istioMetrics && f.istioMaxSeries <= 0 {
		return fmt.Errorf("--istio-metrics-max-series %d: want a positive count", f.istioMaxSeries)
	}
	if err := checkTraceURL(f.tracingUI); err != nil {
		return err
	}
	loc, err := locality.Parse(f.locality)
	if err != nil {
		return fmt.Errorf("--locality: %w", err)
	}
	for k := range f.labels {
		if !label.ValidKey(k) {
			return fmt.Errorf("--labels %q: not a metadata key: 1..128 of [A-Za-z0-9._/-]", k)
		}
	}
	var tlsPorts []uint32
	for _, a := range f.tlsListen {
		_, ps, err := net.SplitHostPort(a)
		p, perr := strconv.ParseUint(ps, 10, 16)
		if err != nil || perr != nil || p == 0 {
			return fmt.Errorf("--tls-listen %q: want host:port with a port", a)
		}
		tlsPorts = append(tlsPorts, uint32(p))
	}
	var tcpPorts []uint32
	for _, a := range f.tcpListen {
		_, ps, err := net.SplitHostPort(a)
		p, perr := strconv.ParseUint(ps, 10, 16)
		if err != nil || perr != nil || p == 0 {
			return fmt.Errorf("--tcp-listen %q: want host:port with a port", a)
		}
		tcpPorts = append(tcpPorts, uint32(p))
	}
	// Every part started below is handed to lc, which stops them in the
	// reverse order: the registration first, the call log last. An early
	// return stops those already running.
	lc := newLifecycle(log)
	defer lc.stop() // on an early return; the shutdown below stops everything otherwise
	lg, rec, err := openCallLog(lc, f.noRecords, f.data, f.retainAge, f.retainBytes, log)
	if err != nil {
		return err
	}
	tracing, err := startTracing(f.tracingFlags, f.node, lc, log.With("component", "tracing"))
	if err != nil {
		return err
	}
	accessLog, err := startAccessLog(f, lc, log.With("component", "accesslog"))
	if err != nil {
		return err
	}
	g := gateway.New(gateway.Options{Listener: f.listener, ListenPort: uint32(port), TLSListenPorts: tlsPorts, TCPListenPorts: tcpPorts, MaxRequestBytes: f.maxBody,
		Recorder: rec, Logger: log.With("component", "gateway"),
		IstioMetrics: f.istioMetrics, IstioReporters: f.istioReporters, IstioMaxSeries: f.istioMaxSeries, Tracing: tracing,
		AccessLog: accessLog, Locality: loc})

	tlsCfg, err := clientTLS(f.caFile, f.certFile, f.keyFile)
	if err != nil {
		return err
	}
	var authorize gateway.AdminAuthorizer
	if f.adminACL {
		if f.registry == "" {
			return errors.New("--admin-acl checks tokens with the server at --registry: set --registry")
		}
		rc, err := f.registryClient(tlsCfg)
		if err != nil {
			return err
		}
		authorize = newServerAuthorizer(rc, 5*time.Second).authorize
	}
	origins, err := adminOrigins(f)
	if err != nil {
		return err
	}
	if _, err := browserguard.New(browserguard.Options{AllowedHosts: f.adminHosts}); err != nil {
		return fmt.Errorf("--admin-allowed-hosts: %w", err)
	}
	if f.identityNS != "" {
		if f.registry == "" {
			return errors.New("--identity-namespace gets the identity from the server at --registry: set --registry")
		}
		rc, err := f.registryClient(tlsCfg)
		if err != nil {
			return err
		}
		dir := filepath.Join(f.data, "identity")
		ilog := log.With("component", "identity")
		lc.start("identity", false, func(ctx context.Context) error {
			return keepGatewayIdentity(ctx, rc, g, f.identityNS, f.identitySA, dir, ilog)
		})
	}
	xc, err := proxyXDS(lc, f.xds, f.token, tlsCfg, g, gateway.XDSTypes(),
		&core.Node{Id: f.node, Cluster: "sextant-gateway", UserAgentName: "sextant-gateway",
			Locality: &core.Locality{Region: loc.Region, Zone: loc.Zone, SubZone: loc.SubZone}, Metadata: nodeLabels(f.labels)}, log)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", f.listen, err)
	}
	aln, err := net.Listen("tcp", f.admin)
	if err != nil {
		ln.Close()
		return fmt.Errorf("admin listen on %s: %w", f.admin, err)
	}
	bg, _ := browserguard.New(browserguard.Options{Addr: aln.Addr().String(), AllowedHosts: f.adminHosts, HostsFlag: "--admin-allowed-hosts"}) // checked above
	asrv := &http.Server{Handler: g.AdminHandlerOptions(lg, gateway.AdminOptions{Authorize: authorize, Origins: origins, Pprof: f.adminPprof || authorize != nil, Browser: bg}),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	lc.serve("admin server", false, func() error { return asrv.Serve(aln) }, func() error { asrv.Close(); return nil })
	lc.start("xds client", false, xc.Run)
	serveProxy(lc, "proxy", g, ln, f.drain, log)
	for _, a := range f.tlsListen {
		tln, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("--tls-listen %s: %w", a, err)
		}
		// The proxy's stop (g.Shutdown) drains the TLS servers too; this
		// stop only closes the listener, started later and so stopped first.
		lc.serve("tls proxy "+a, true, func() error { return g.ServeTLS(tln) }, func() error { tln.Close(); return nil })
		log.Info("gateway serving TLS", "address", tln.Addr().String())
	}
	for _, a := range f.tcpListen {
		tln, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("--tcp-listen %s: %w", a, err)
		}
		// As a TLS listener: g.Shutdown closes its forwarded connections.
		lc.serve("tcp proxy "+a, true, func() error { return g.ServeTCP(tln) }, func() error { tln.Close(); return nil })
		log.Info("gateway serving TCP", "address", tln.Addr().String())
	}
	log.Info("gateway listening", "proxy", ln.Addr().String(), "admin", aln.Addr().String(), "xds", f.xds, "node", f.node)

	if f.registry != "" {
		deregister, err := registerGateway(ctx, f, aln.Addr().String(), ln.Addr().String(), log)
		if err != nil {
			log.Warn("could not register in the registry; serving anyway", "err", err)
		} else {
			lc.add("registration", func() error { deregister(); return nil })
		}
	}

	failure := lc.wait(ctx)
	if failure != nil {
		log.Error("shutting down: a part stopped on its own", "err", failure)
	} else {
		log.Info("shutting down: draining calls", "drain", f.drain)
	}
	if err := lc.stop(); err != nil {
		return err
	}
	log.Info("stopped")
	return failure
}

// keepGatewayIdentity keeps the gateway's workload identity fresh (as
// "sextant identity agent" does: a new certificate at half its lifetime and
// when the authority's roots change; the key made here, kept in dir) until
// ctx ends, retrying with backoff while the server cannot give one.
func keepGatewayIdentity(ctx context.Context, rc *client.Client, g *gateway.Gateway, ns, sa, dir string, log *slog.Logger) error {
	backoff := time.Second
	for {
		err := rc.KeepIdentity(ctx, ns, sa, dir, 0, 0, func(c client.Certificate) {
			if err := g.SetIdentity([]byte(c.CertificateChain), []byte(c.KeyPEM), []byte(c.Bundle)); err != nil {
				log.Error("identity not applied", "err", err)
				return
			}
			log.Info("identity", "id", c.Identity, "not_after", c.NotAfter)
		}, func(err error) { log.Warn("identity renewal failed (retrying)", "err", err) })
		if ctx.Err() != nil {
			return nil
		}
		log.Warn("no identity yet (retrying)", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// registryClient is a client of the server at --registry with the
// gateway's token and TLS settings.
func (f gatewayFlags) registryClient(tlsCfg *tls.Config) (*client.Client, error) {
	opts := []client.Option{client.WithToken(f.token)}
	if tlsCfg != nil {
		opts = append(opts, client.WithTLSConfig(tlsCfg))
	}
	return client.New(f.registry, opts...)
}

// registerGateway registers the gateway as an instance of --service with
// its admin address in metadata, so the console can find it, and keeps it
// alive with heartbeats until the returned function deregisters it.
func registerGateway(ctx context.Context, f gatewayFlags, admin, proxy string, log *slog.Logger) (func(), error) {
	tlsCfg, err := clientTLS(f.caFile, f.certFile, f.keyFile)
	if err != nil {
		return func() {}, err
	}
	c, err := f.registryClient(tlsCfg)
	if err != nil {
		return func() {}, err
	}
	host, portStr, _ := net.SplitHostPort(proxy)
	port, _ := strconv.Atoi(portStr)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		// Listening on every interface: "::" reaches nothing from another
		// machine, so register the address this host reaches the registry from.
		if h, err := outboundHost(f.registry); err == nil {
			host = h
		} else {
			log.Warn("registering the gateway on an unspecified address; callers elsewhere cannot reach it", "host", host, "err", err)
		}
	}
	in := client.Instance{Service: f.service, Host: host, Port: port, Protocol: "http", TTLSeconds: 10,
		Metadata: map[string]string{"sextant.role": "gateway", "sextant.admin": admin, "sextant.node": f.node}}
	if f.tracingUI != "" {
		in.Metadata["sextant.trace-url"] = f.tracingUI // the console links calls to their traces
	}
	return keepRegistered(ctx, c, in, f.registry, nil, log), nil
}

// keepRegistered registers in (retried every second while the registry
// cannot be reached) and keeps it alive with heartbeats (one per half
// TTL), registering it again when the registry lost it, until the
// returned function stops and deregisters it. alive, when set, is asked
// before each heartbeat: while it says no, none is sent, and the registry
// turns the instance unhealthy after its TTLs (a sidecar whose app
// stopped).
func keepRegistered(ctx context.Context, c *client.Client, in client.Instance, registry string, alive func() bool, log *slog.Logger) func() {
	every := max(in.TTLSeconds/2, 1)
	register := func(ctx context.Context) (string, error) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		res, err := c.Register(rctx, in)
		if err != nil {
			return "", err
		}
		log.Info("registered", "registry", registry, "service", in.Service, "namespace", in.Namespace, "id", res.IDs[0])
		return res.IDs[0], nil
	}
	// A registry still starting (or unreachable) is retried every second
	// by the loop below rather than never registered: the console and dry
	// runs find gateways in the registry.
	id, err := register(ctx)
	if err != nil {
		log.Warn("could not register in the registry yet; retrying", "err", err)
	}
	hctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		beat, down := 0, false
		for {
			select {
			case <-hctx.Done():
				return
			case <-t.C:
				if id == "" {
					if id, err = register(hctx); err != nil && hctx.Err() == nil && beat%30 == 0 {
						log.Warn("register failed", "err", err)
					}
					beat++
					continue
				}
				if beat++; beat%every != 0 {
					continue
				}
				if alive != nil && !alive() {
					if !down {
						log.Warn("the app does not accept connections: no heartbeats until it does (the instance turns unhealthy)")
					}
					down = true
					continue
				}
				if down {
					log.Info("the app accepts connections again: heartbeats resume")
					down = false
				}
				if nf, err := c.Heartbeat(hctx, id); err != nil || len(nf) > 0 {
					// Gone (registry restarted without it, or expired): register again.
					if _, err := c.Register(hctx, in); err != nil && hctx.Err() == nil {
						log.Warn("re-register failed", "err", err)
					}
				}
			}
		}
	}()
	return func() {
		stop()
		<-done
		if id == "" {
			return // never registered
		}
		dctx, c2 := context.WithTimeout(context.Background(), 3*time.Second)
		defer c2()
		if _, err := c.DeregisterOne(dctx, id); err != nil {
			log.Warn("deregister failed", "err", err)
		}
	}
}

// outboundHost is the local address this host sends from to reach the
// server at registry (a URL): a UDP "connection" picks the route and source
// address without sending anything.
func outboundHost(registry string) (string, error) {
	u, err := url.Parse(registry)
	if err != nil {
		return "", fmt.Errorf("--registry %q: %w", registry, err)
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	c, err := net.Dial("udp", net.JoinHostPort(u.Hostname(), port))
	if err != nil {
		return "", fmt.Errorf("find the local address towards %s: %w", u.Host, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// startAccessLog opens the gateway's access log from the --access-log*
// flags and runs its writer under lc (stopped after the proxy drains, so
// that the lines of the calls drained are written). The writer always
// runs: a Telemetry may turn access logs on at any time.
func startAccessLog(f gatewayFlags, lc *lifecycle, log *slog.Logger) (*gateway.AccessLog, error) {
	al := &gateway.AccessLog{}
	switch f.accessLog {
	case "":
	case "text":
		al.All, al.Encoding = true, accesslog.Text
	case "json":
		al.All, al.Encoding = true, accesslog.JSON
	default:
		return nil, fmt.Errorf("--access-log %q: want text or json (or empty: what a Telemetry selects)", f.accessLog)
	}
	if f.accessLogMaxBytes < 0 {
		return nil, fmt.Errorf("--access-log-max-bytes %d: want a size in bytes, 0 for never", f.accessLogMaxBytes)
	}
	if f.accessLogKeep < 0 || f.accessLogBuffer < 0 { // 0: the defaults (gatewayFlags built in code)
		return nil, fmt.Errorf("--access-log-keep %d, --access-log-buffer %d: want positive counts", f.accessLogKeep, f.accessLogBuffer)
	}
	maxBytes := f.accessLogMaxBytes
	if maxBytes == 0 {
		maxBytes = -1 // never
	}
	w, err := accesslog.Open(accesslog.Options{Path: f.accessLogFile, MaxBytes: maxBytes, Keep: f.accessLogKeep,
		Buffer: f.accessLogBuffer, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--access-log-file %q: %w", f.accessLogFile, err)
	}
	al.Sink = w
	lc.start("access log", false, w.Run)
	if f.accessLogOTLP != "" {
		x, err := accesslog.NewExporter(otlp.Options{Endpoint: f.accessLogOTLP, Protocol: f.accessLogOTLPProt,
			ServiceName: f.service, ResourceAttrs: []otlp.Attr{otlp.String("node_name", f.node)}, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("--access-log-otlp-endpoint %q, --access-log-otlp-protocol %q: %w", f.accessLogOTLP, f.accessLogOTLPProt, err)
		}
		lc.add("access log exporter", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := x.Close(ctx); err != nil {
				log.Warn("access log records not sent before shutdown", "err", err)
			}
			return nil
		})
		al.OTel = x
		log.Info("access log records over OTLP", "endpoint", f.accessLogOTLP, "protocol", f.accessLogOTLPProt)
	}
	if al.All {
		log.Info("access log", "format", al.Encoding.String(), "file", f.accessLogFile)
	}
	return al, nil
}

// tracingFlags are the --tracing-* flags of the gateway and the sidecar.
type tracingFlags struct {
	tracingEndpoint   string
	tracingProtocol   string
	tracingSampling   float64
	tracingKeepErrors bool
	tracingService    string
	tracingUI         string
}

// register adds the flags to fl, service being --tracing-service-name's
// default.
func (f *tracingFlags) register(fl *pflag.FlagSet, service string) {
	fl.StringVar(&f.tracingEndpoint, "tracing-otlp-endpoint", "", "send spans over OTLP to this collector (host:port; for http also a URL); empty: no tracing (docs/tracing.md)")
	fl.StringVar(&f.tracingProtocol, "tracing-otlp-protocol", "grpc", "OTLP protocol: grpc (port 4317 by convention) or http (HTTP/protobuf, port 4318)")
	fl.Float64Var(&f.tracingSampling, "tracing-sampling", 1, "percentage of traces sampled, 0 to 100, when the caller did not decide (Istio's sampling)")
	fl.BoolVar(&f.tracingKeepErrors, "tracing-keep-errors", false, "also export the spans of failed calls (5xx, no answer) of traces not sampled")
	fl.StringVar(&f.tracingService, "tracing-service-name", service, "the spans' service.name (the service Jaeger lists them under)")
	fl.StringVar(&f.tracingUI, "tracing-ui-url", "", "a trace viewer's page of one trace, {trace_id} standing for its id (Jaeger: http://HOST:16686/trace/{trace_id}); the console links each recorded call to it")
}

// checkTraceURL checks --tracing-ui-url: empty, or an http(s) URL that
// names {trace_id}.
func checkTraceURL(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(strings.ReplaceAll(s, "{trace_id}", "x"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--tracing-ui-url %q: want an http or https URL", s)
	}
	if !strings.Contains(s, "{trace_id}") {
		return fmt.Errorf("--tracing-ui-url %q: it must name {trace_id}, where a call's trace id goes (Jaeger: http://HOST:16686/trace/{trace_id})", s)
	}
	return nil
}

// startTracing builds a proxy's tracing from the --tracing-* flags (node:
// its xDS node id) and hands its exporter to lc (stopped after the proxy
// drains, so that the spans of the calls drained are sent); nil without an
// endpoint.
func startTracing(f tracingFlags, node string, lc *lifecycle, log *slog.Logger) (*gateway.Tracing, error) {
	if f.tracingEndpoint == "" {
		return nil, nil
	}
	if math.IsNaN(f.tracingSampling) || f.tracingSampling < 0 || f.tracingSampling > 100 {
		return nil, fmt.Errorf("--tracing-sampling %v: want a percentage, 0 to 100", f.tracingSampling)
	}
	sampler, err := trace.NewSampler(f.tracingSampling/100, f.tracingKeepErrors)
	if err != nil {
		return nil, err
	}
	exp, err := trace.NewExporter(trace.ExporterOptions{Endpoint: f.tracingEndpoint, Protocol: f.tracingProtocol,
		ServiceName: f.tracingService, ResourceAttrs: []trace.Attr{trace.String("node_id", node)}, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--tracing-otlp-endpoint %q, --tracing-otlp-protocol %q: %w", f.tracingEndpoint, f.tracingProtocol, err)
	}
	lc.add("span exporter", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := exp.Close(ctx); err != nil {
			// The spans still queued are lost; the gateway stopped well.
			log.Warn("spans not sent before shutdown", "err", err)
		}
		return nil
	})
	log.Info("tracing", "endpoint", f.tracingEndpoint, "protocol", f.tracingProtocol, "sampling_percent", f.tracingSampling)
	return &gateway.Tracing{Sampler: sampler, Sink: exp, NodeID: node}, nil
}

// openCallLog opens the call log under data/calls and hands it to lc (its
// error on close is the command's); nil and a nil Recorder with noRecords.
func openCallLog(lc *lifecycle, noRecords bool, data string, age time.Duration, bytes int64, log *slog.Logger) (*calllog.Log, gateway.Recorder, error) {
	if noRecords {
		return nil, nil, nil
	}
	lg, err := calllog.Open(calllog.Options{Dir: filepath.Join(data, "calls"), MaxAge: age, MaxBytes: bytes,
		Logger: log.With("component", "calllog")})
	if err != nil {
		return nil, nil, err
	}
	lc.add("call log", lg.Close)
	return lg, lg, nil
}

// proxyXDS connects to the control plane at addr (TLS with tlsCfg, the
// token as a bearer) and returns the xDS client feeding g, its connection
// handed to lc; the caller starts it.
func proxyXDS(lc *lifecycle, addr, token string, tlsCfg *tls.Config, g *gateway.Gateway, types []xdsclient.Type, node *core.Node, log *slog.Logger) (*xdsclient.Client, error) {
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds),
		// gRPC servers refuse pings more often than every 5 minutes by default.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 5 * time.Minute, Timeout: 20 * time.Second})}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(acl.BearerToken{Token: token, Insecure: tlsCfg == nil}))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("--xds %q: %w", addr, err)
	}
	lc.add("xds connection", func() error { conn.Close(); return nil })
	xc, err := xdsclient.New(conn, xdsclient.Options{Node: node, Types: types, Handler: g, Logger: log.With("component", "xds")})
	if err != nil {
		return nil, err
	}
	g.SetXDSStatus(xc.Status)
	return xc, nil
}

// serveProxy serves g's proxy listener on ln as an essential part of lc,
// whose stop drains every listener of g (up to drain).
func serveProxy(lc *lifecycle, name string, g *gateway.Gateway, ln net.Listener, drain time.Duration, log *slog.Logger) {
	lc.serve(name, true, func() error { return g.Serve(ln) }, func() error {
		sctx, cancel := context.WithTimeout(context.Background(), drain)
		defer cancel()
		if err := g.Shutdown(sctx); err != nil {
			log.Warn("drain incomplete", "err", err)
		}
		ln.Close() // Shutdown closes it only once Serve has begun
		return nil
	})
}
