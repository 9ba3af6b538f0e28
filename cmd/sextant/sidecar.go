package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/browserguard"
	"github.com/sextant-mesh/sextant/internal/gateway"
)

type sidecarFlags struct {
	service              string
	appHost              string
	appPort              int
	meshListen, outbound string
	admin, data          string
	labels               []string
	servicePorts         []string // --outbound-port NAME=PORT
	serviceAccount       string
	xds, registry        string
	token, caFile        string
	certFile, keyFile    string
	node                 string
	noRecords            bool
	adminPprof           bool
	istioMetrics         bool
	istioMaxSeries       int
	drain                time.Duration
	ttl                  time.Duration
	logFormat, logLevel  string
	retainAge            time.Duration
	retainBytes          int64
	tracingFlags
	namespace, serviceName string // from service
}

func init() {
	var f sidecarFlags
	cmd := &cobra.Command{
		Use:   "sidecar",
		Short: "Run Sextant's proxy beside one workload: its identity, mutual TLS and policies inbound, routing outbound",
		Long: `Run Sextant's proxy as a sidecar beside any program (Python, Java, curl):
the gateway's data plane, configured by the control plane over xDS, serving
one workload.

Inbound: it registers the workload (service --service, at --mesh-listen's
address, with the --label labels policies select), keeps its identity
(spiffe://TRUST_DOMAIN/ns/NAMESPACE/sa/--service-account, a certificate from
the server's authority at --registry, renewed at half its lifetime), and
serves the mesh port --mesh-listen as the workload's PeerAuthentication says
(STRICT: mutual TLS only; PERMISSIVE: mutual TLS or plaintext; DISABLE:
plaintext; port-level modes for the mesh port's number) with its
AuthorizationPolicies, forwarding each call to the app on --app-host:--app-port.

Outbound: the app sends its calls through --outbound as an HTTP proxy
(HTTP_PROXY=http://127.0.0.1:15001): GET http://orders.shop:8080/x is routed
by VirtualServices and DestinationRules as the gateway routes, and a
DestinationRule's tls ISTIO_MUTUAL is originated with the workload's identity.

Both directions are recorded in the call log under --data, read with
"sextant calls list --gateway http://ADMIN". On SIGINT or SIGTERM it
deregisters, stops accepting, lets calls in flight finish (up to --drain),
then flushes the call log. See docs/sidecar.md.`,
		Example: `  sextant sidecar --service shop/orders --app-port 8080 --label app=orders
  HTTP_PROXY=http://127.0.0.1:15001 curl http://orders.shop:8080/`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSidecar(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.service, "service", "", "the workload's service: NAMESPACE/NAME, or NAME in namespace default (required)")
	fl.IntVar(&f.appPort, "app-port", 0, "the port the app serves on (required)")
	fl.StringVar(&f.appHost, "app-host", "127.0.0.1", "the address the app serves on")
	fl.StringVar(&f.meshListen, "mesh-listen", "127.0.0.1:15006", "the mesh port: inbound calls, registered as the workload's instance (IP:port)")
	fl.StringVar(&f.outbound, "outbound", "127.0.0.1:15001", "the app's HTTP proxy for its outbound calls")
	fl.StringArrayVar(&f.servicePorts, "outbound-port", nil, "a localhost port for one service, NAME=PORT (repeatable): calls to 127.0.0.1:PORT go to NAME (orders.shop, or orders.shop:8080) without a proxy setting")
	fl.StringVar(&f.admin, "admin", "127.0.0.1:15000", "address of the admin API (/v1/calls, /v1/config, /metrics)")
	fl.StringVar(&f.data, "data", "./sidecar-data", "directory of the call log and the identity (created if missing)")
	fl.StringArrayVar(&f.labels, "label", nil, "a label of the workload, key=value (repeatable): what policies' selectors and DestinationRule subsets match; version=V is the instance's version")
	fl.StringVar(&f.serviceAccount, "service-account", "", "the identity's service account (default: the service's name)")
	fl.StringVar(&f.xds, "xds", "127.0.0.1:7402", "control plane's ADS address (gRPC)")
	fl.StringVar(&f.registry, "registry", "http://127.0.0.1:7400", "the server's URL: registry and identity")
	fl.StringVar(&f.token, "token", os.Getenv("SEXTANT_TOKEN"), "ACL token (instances:write and identity:write on the namespace, push:read) (env SEXTANT_TOKEN)")
	fl.StringVar(&f.caFile, "ca-file", "", "CA certificate (PEM) to trust for the server's TLS; set to use TLS")
	fl.StringVar(&f.certFile, "cert-file", "", "client certificate (PEM) for mutual TLS with the server")
	fl.StringVar(&f.keyFile, "key-file", "", "client key (PEM) for mutual TLS with the server")
	fl.StringVar(&f.node, "node-id", "", "xDS node id (default sextant-sidecar~NAMESPACE~NAME~MESH-ADDRESS)")
	fl.BoolVar(&f.noRecords, "no-call-log", false, "do not record calls")
	fl.BoolVar(&f.adminPprof, "admin-pprof", false, "serve Go profiles (/debug/pprof/) on the admin API")
	fl.BoolVar(&f.istioMetrics, "istio-metrics", true, "serve Istio's standard metrics on /metrics, each call reported by this proxy's side of it (destination inbound, source outbound), for Istio's dashboards and Kiali")
	fl.IntVar(&f.istioMaxSeries, "istio-metrics-max-series", gateway.DefaultIstioMaxSeries, "most label sets the Istio metrics keep")
	f.tracingFlags.register(fl, "")
	fl.Lookup("tracing-service-name").Usage += " (default NAME.NAMESPACE of --service, as Istio names a workload's spans)"
	fl.DurationVar(&f.retainAge, "retain", 7*24*time.Hour, "delete call records older than this")
	fl.Int64Var(&f.retainBytes, "retain-bytes", 1<<30, "delete the oldest call records beyond this many bytes")
	fl.DurationVar(&f.drain, "drain", 30*time.Second, "how long to wait for calls in flight on shutdown")
	fl.DurationVar(&f.ttl, "ttl", 10*time.Second, "the instance's TTL: a heartbeat every half of it while the app accepts connections on --app-port; unhealthy after 3 TTLs without")
	fl.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	cmd.AddCommand(newCaptureCmd())
	rootCmd.AddCommand(cmd)
}

// check validates the flags and fills what they derive.
func (f *sidecarFlags) check() (client.Instance, error) {
	var in client.Instance
	if f.service == "" {
		return in, errors.New("--service: required (NAMESPACE/NAME)")
	}
	ns, name, err := client.ParseService(f.service, "")
	if err != nil {
		return in, fmt.Errorf("--service %q: %w", f.service, err)
	}
	f.namespace, f.serviceName = ns, name
	if f.appPort <= 0 || f.appPort > 65535 {
		return in, fmt.Errorf("--app-port %d: want the app's port, 1 to 65535", f.appPort)
	}
	if _, err := netip.ParseAddr(f.appHost); err != nil {
		return in, fmt.Errorf("--app-host %q: want an IP address", f.appHost)
	}
	mesh, err := netip.ParseAddrPort(f.meshListen)
	if err != nil || mesh.Port() == 0 {
		return in, fmt.Errorf("--mesh-listen %q: want IP:port", f.meshListen)
	}
	if mesh.Addr().IsUnspecified() {
		return in, fmt.Errorf("--mesh-listen %q: listen on the address the workload is registered and reached at, not on every interface (it names the workload's inbound listener)", f.meshListen)
	}
	if _, _, err := net.SplitHostPort(f.outbound); err != nil {
		return in, fmt.Errorf("--outbound %q: %w", f.outbound, err)
	}
	if f.outbound == f.meshListen {
		return in, fmt.Errorf("--outbound and --mesh-listen are both %s: give each its own port", f.outbound)
	}
	if f.serviceAccount == "" {
		f.serviceAccount = name
	}
	if f.tracingService == "" {
		f.tracingService = name + "." + ns // Istio's service name for a workload's spans
	}
	if f.node == "" {
		f.node = fmt.Sprintf("sextant-sidecar~%s~%s~%s", ns, name, mesh)
	}
	for _, sp := range f.servicePorts {
		if _, _, err := parseServicePort(sp); err != nil {
			return in, err
		}
	}
	if f.istioMetrics && f.istioMaxSeries <= 0 {
		return in, fmt.Errorf("--istio-metrics-max-series %d: want a positive count", f.istioMaxSeries)
	}
	if f.ttl < time.Second || f.ttl%time.Second != 0 {
		return in, fmt.Errorf("--ttl %v: want whole seconds, at least 1s", f.ttl)
	}
	in = client.Instance{Namespace: ns, Service: name, Host: mesh.Addr().String(), Port: int(mesh.Port()), Protocol: "http",
		TTLSeconds: int(f.ttl / time.Second), Metadata: map[string]string{}}
	for _, kv := range f.labels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return in, fmt.Errorf("--label %q: want key=value", kv)
		}
		if k == "version" {
			in.Version = v
			continue
		}
		in.Metadata[k] = v
	}
	return in, nil
}

func runSidecar(ctx context.Context, f sidecarFlags) error {
	in, err := f.check()
	if err != nil {
		return err
	}
	log, err := newLogger(f.logFormat, f.logLevel)
	if err != nil {
		return err
	}
	_, outPort, _ := net.SplitHostPort(f.outbound)
	port, _ := strconv.Atoi(outPort)
	lc := newLifecycle(log)
	defer lc.stop()
	lg, rec, err := openCallLog(lc, f.noRecords, f.data, f.retainAge, f.retainBytes, log)
	if err != nil {
		return err
	}
	tracing, err := startTracing(f.tracingFlags, f.node, lc, log.With("component", "tracing"))
	if err != nil {
		return err
	}
	meshAddr := net.JoinHostPort(in.Host, strconv.Itoa(in.Port))
	g := gateway.New(gateway.Options{Listener: gateway.ProxyListener, ListenPort: uint32(port), Recorder: rec, Tracing: tracing,
		Logger: log.With("component", "sidecar"), IstioMetrics: f.istioMetrics, IstioMaxSeries: f.istioMaxSeries,
		Inbound: &gateway.Inbound{Addr: meshAddr, App: net.JoinHostPort(f.appHost, strconv.Itoa(f.appPort)),
			Service: f.namespace + "/" + f.serviceName}})

	tlsCfg, err := clientTLS(f.caFile, f.certFile, f.keyFile)
	if err != nil {
		return err
	}
	opts := []client.Option{client.WithToken(f.token)}
	if tlsCfg != nil {
		opts = append(opts, client.WithTLSConfig(tlsCfg))
	}
	rc, err := client.New(f.registry, opts...)
	if err != nil {
		return fmt.Errorf("--registry %q: %w", f.registry, err)
	}
	dir := filepath.Join(f.data, "identity")
	ilog := log.With("component", "identity")
	lc.start("identity", false, func(ctx context.Context) error {
		return keepGatewayIdentity(ctx, rc, g, f.namespace, f.serviceAccount, dir, ilog)
	})

	// The namespace resolves the workload's policies; the user agent keeps
	// the node off Envoy's variants.
	// Its labels (LABELS, as Istio's proxies send them) pick its Sidecar
	// and its routes by sourceLabels.
	meta := map[string]any{"NAMESPACE": f.namespace, "SERVICE_ACCOUNT": f.serviceAccount}
	ls := map[string]any{}
	for _, kv := range f.labels {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" { // checked by the instance's flags
			ls[k] = v
		}
	}
	if len(ls) > 0 {
		meta["LABELS"] = ls
	}
	md, _ := structpb.NewStruct(meta)
	xc, err := proxyXDS(lc, f.xds, f.token, tlsCfg, g, gateway.SidecarXDSTypes(meshAddr),
		&core.Node{Id: f.node, Cluster: f.namespace + "/" + f.serviceName, UserAgentName: "sextant-sidecar", Metadata: md}, log)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", f.outbound)
	if err != nil {
		return fmt.Errorf("--outbound %s: %w", f.outbound, err)
	}
	mln, err := net.Listen("tcp", meshAddr)
	if err != nil {
		ln.Close()
		return fmt.Errorf("--mesh-listen %s: %w", meshAddr, err)
	}
	aln, err := net.Listen("tcp", f.admin)
	if err != nil {
		ln.Close()
		mln.Close()
		return fmt.Errorf("--admin %s: %w", f.admin, err)
	}
	bg, err := browserguard.New(browserguard.Options{Addr: aln.Addr().String()})
	if err != nil {
		return err
	}
	asrv := &http.Server{Handler: g.AdminHandlerOptions(lg, gateway.AdminOptions{Browser: bg, Pprof: f.adminPprof}),
		ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	lc.serve("admin server", false, func() error { return asrv.Serve(aln) }, func() error { asrv.Close(); return nil })
	lc.start("xds client", false, xc.Run)
	serveProxy(lc, "outbound proxy", g, ln, f.drain, log)
	// g.Shutdown (above) drains the inbound server and the service ports
	// too; their stops, run first, close their listeners.
	lc.serve("inbound proxy", true, func() error { return g.ServeInbound(mln) }, func() error { mln.Close(); return nil })
	for _, sp := range f.servicePorts {
		host, port, _ := parseServicePort(sp) // checked above
		sln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
		if err != nil {
			return fmt.Errorf("--outbound-port %s: %w", sp, err)
		}
		lc.serve("outbound port "+sp, true, func() error { return g.ServeService(sln, host) }, func() error { sln.Close(); return nil })
		log.Info("outbound port", "service", host, "address", sln.Addr().String())
	}
	log.Info("sidecar serving", "service", f.namespace+"/"+f.serviceName, "mesh", mln.Addr().String(),
		"app", net.JoinHostPort(f.appHost, strconv.Itoa(f.appPort)), "outbound", ln.Addr().String(), "admin", aln.Addr().String(), "node", f.node)

	in.Metadata["sextant.role"] = "sidecar"
	in.Metadata["sextant.admin"] = aln.Addr().String()
	app := net.JoinHostPort(f.appHost, strconv.Itoa(f.appPort))
	deregister := keepRegistered(ctx, rc, in, f.registry, func() bool {
		c, err := net.DialTimeout("tcp", app, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}, log)
	lc.add("registration", func() error { deregister(); return nil })
	failure := lc.wait(ctx)
	if failure != nil {
		log.Error("shutting down: a part stopped on its own", "err", failure)
	} else {
		log.Info("shutting down: deregistering, draining calls", "drain", f.drain)
	}
	if err := lc.stop(); err != nil {
		return err
	}
	log.Info("stopped")
	return failure
}

// parseServicePort reads --outbound-port NAME=PORT: the Host its calls
// get and the localhost port.
func parseServicePort(s string) (host, port string, err error) {
	host, port, ok := strings.Cut(s, "=")
	p, perr := strconv.Atoi(port)
	switch {
	case !ok || host == "":
		return "", "", fmt.Errorf("--outbound-port %q: want NAME=PORT, e.g. orders.shop=9080", s)
	case perr != nil || p <= 0 || p > 65535:
		return "", "", fmt.Errorf("--outbound-port %q: port %q: want 1 to 65535", s, port)
	case strings.ContainsAny(host, "/ @?#"):
		return "", "", fmt.Errorf("--outbound-port %q: %q is not a service's host name (orders.shop, orders.shop:8080)", s, host)
	}
	return host, port, nil
}
