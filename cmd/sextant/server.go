package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/browserguard"
	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/cluster"
	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/connlimit"
	"github.com/sextant-mesh/sextant/internal/console"
	"github.com/sextant-mesh/sextant/internal/consulapi"
	"github.com/sextant-mesh/sextant/internal/dnsapi"
	"github.com/sextant-mesh/sextant/internal/healthcheck"
	"github.com/sextant-mesh/sextant/internal/httpapi"
	"github.com/sextant-mesh/sextant/internal/identity"
	"github.com/sextant-mesh/sextant/internal/ingress"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/kube"
	"github.com/sextant-mesh/sextant/internal/kv"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/placement"
	"github.com/sextant-mesh/sextant/internal/push"
	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/secret"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/mysql"
	"github.com/sextant-mesh/sextant/internal/xds"
)

type serverFlags struct {
	data         string
	dataReserve  string // storeflags.go
	repair       bool
	store        string
	clusterID    string
	clusterLease time.Duration
	clusterWake  string
	http         string
	xds          string
	xdsMaxAge    time.Duration
	// The xDS port's door (xdsdoor.go): 0 is the default of each.
	xdsHandshake time.Duration
	xdsPerSource int
	xdsMaxConns  int
	meshRoot     string
	logFormat    string
	logLevel     string
	logSize      int
	pprof        bool
	drain        time.Duration
	// deregisterAfter: the removal delay of instances that set none.
	deregisterAfter time.Duration
	// checkWorkers: active health checks' probes in flight at most.
	checkWorkers int

	acl         bool
	aclAnonRead bool
	auditLog    string
	tlsCert     string
	tlsKey      string
	tlsClientCA string
	writeRate   float64
	writeBurst  int
	readRate    float64
	readBurst   int
	workers     int
	memoryLimit string

	// DNS (docs/dns.md): off when dns is empty.
	dns                string
	dnsTTL             time.Duration
	dnsDatacenter      string
	dnsConsulNamespace string

	identity identityFlags // the certificate authority (identity_server.go)
	atRest   atRestFlags   // keys sealing private keys in the store (atrest.go)
	// The Consul-compatible API (docs/compat.md): off when consulAPI is empty.
	consulAPI       string
	consulNamespace string
	consulNode      string
	consulNodeMeta  map[string]string
	consulConnect   bool
	consulTTLMin    time.Duration
	consulScripts   bool
	consulConfig    []string
	// Kubernetes (docs/kubernetes.md).
	kubeconfig    string
	kubeInCluster bool
	kubeNS        []string
	kubeExcludeNS []string
	kubeIstio     bool
	kubeMirror    bool
	kubeReady     time.Duration

	xdsListener net.Listener // tests: serve xDS on it instead of listening on --xds

	// storePasswordFile holds --store's password (storepass.go);
	// storePassword is what it or $SEXTANT_STORE_PASSWORD gave.
	storePasswordFile, storePassword string
	// allowedHosts: more names a loopback listener answers to (browserguard).
	allowedHosts []string
}

func init() {
	var f serverFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the Sextant server: registry, routing config, control plane and placement scheduler",
		Long: `Run the Sextant server on the embedded store, or as one of several servers
over one MySQL/MariaDB database (--store, docs/cluster.md).

The server creates or opens the store in --data, loads every instance,
routing config object, node and placement into memory, serves the HTTP API
(docs/api.md, the scheduler's nodes and placements included) on
--http, and pushes endpoints and routes to Envoy, grpc-go and Sextant
gateways over xDS (ADS) on --xds (docs/controlplane.md). On SIGINT or SIGTERM
it stops accepting connections, lets in-flight requests finish (up to
--drain), and closes the store. If the push engine or the xDS server fails,
it shuts down the same way and exits 1 rather than serve stale xDS.

Security (docs/security.md): --acl requires a token on every request but
/healthz and /readyz (create the first one with "sextant acl bootstrap");
--tls-cert and --tls-key serve HTTPS, --tls-client-ca requires client
certificates; --rate-limit-* bound each caller. Writes and refusals are
audited (--audit-log). Serving a non-loopback address without TLS or
without ACLs logs a warning.

With --dns, the server also answers DNS over UDP and TCP (docs/dns.md): the
healthy instances of a service as A, AAAA and SRV records, under its own
names (orders.prod.svc.sextant) and Consul's (orders.service.consul). DNS
carries no token: whoever reaches --dns reads those addresses.

With --consul-api, the server also serves Consul's HTTP API (agent, catalog,
health, status; docs/compat.md) on its own listener, over the same registry
and ACL tokens, for Consul clients such as consul/api and Prometheus'
consul_sd: Consul's services are the services of --consul-namespace.`,
		Example: `  sextant server
  sextant server --store 'mysql://sextant:secret@tcp(db:3306)/sextant' --http 0.0.0.0:7400
  sextant server --data /var/lib/sextant --http 0.0.0.0:7400 --log-format json \
      --acl --tls-cert server.pem --tls-key server-key.pem --rate-limit-write 200 \
      --audit-log /var/log/sextant/audit.json
  sextant server --dns 127.0.0.1:8600 --dns-consul-namespace prod
  sextant server --consul-api 127.0.0.1:8500 --consul-namespace prod`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServer(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.data, "data", "./data", "directory of the embedded store (created if missing); unused with --store")
	registerStoreFlags(fl, &f)
	fl.StringVar(&f.store, "store", "", "shared store of a cluster: 'mysql://user:pass@tcp(host:3306)/database' (MySQL 8 or MariaDB 10.11; the database and its schema are created); empty: the embedded store in --data")
	fl.StringVar(&f.storePasswordFile, "store-password-file", "", "file holding --store's database password (else $"+storePasswordEnv+"); keeps it out of --store, which ps shows")
	fl.DurationVar(&f.clusterLease, "cluster-lease", 5*time.Second, "with --store: how long a server that stops renewing stays a member; its instances move to the others after it")
	fl.StringVar(&f.clusterWake, "cluster-wake", "auto", "with --store: the UDP host:port this server hears the others' commit announcements on (docs/cluster.md); auto: --http's host, or the address that reaches the database when --http's is unspecified, on a free port; off: none, followers wait for their poll")
	fl.StringVar(&f.clusterID, "cluster-id", "", "with --store: this server's name among the cluster's members (default: --http and a random suffix)")
	fl.StringVar(&f.http, "http", "127.0.0.1:7400", "address the HTTP API listens on")
	fl.StringVar(&f.xds, "xds", "127.0.0.1:7402", "address the xDS (ADS over gRPC) server listens on; empty: no xDS")
	fl.StringVar(&f.meshRoot, "mesh-root-namespace", config.DefaultRootNamespace, "the namespace whose PeerAuthentication and AuthorizationPolicy apply to the whole mesh (Istio's rootNamespace)")
	fl.DurationVar(&f.xdsMaxAge, "xds-max-connection-age", xds.DefaultMaxConnectionAge, "close an xDS client's connection after about this long, so that streams spread over servers that joined since (delta clients resume with nothing resent); 0: never")
	fl.DurationVar(&f.xdsHandshake, "xds-handshake-timeout", defaultXDSHandshake, "close an xDS connection that has not finished its TLS and HTTP/2 handshake within this long")
	fl.IntVar(&f.xdsPerSource, "xds-max-connections-per-source", connlimit.DefaultPerSource, "xDS connections one IP address may hold open; more are closed at once (-1: no cap)")
	fl.IntVar(&f.xdsMaxConns, "xds-max-connections", 0, "xDS connections open at most; more are closed at once (0: half the open-file limit; -1: no cap)")
	fl.StringSliceVar(&f.allowedHosts, "allowed-hosts", nil, "more host names the HTTP and Consul APIs answer to on a loopback address, besides localhost and IP addresses (those a local reverse proxy sends in Host); *: any (docs/security.md)")
	fl.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fl.IntVar(&f.logSize, "change-log", 1<<18, "changes kept for /v1/changes and watches before older ones are compacted")
	fl.BoolVar(&f.pprof, "pprof", false, "serve /debug/pprof/ on the HTTP address")
	fl.DurationVar(&f.drain, "drain", 30*time.Second, "how long to wait for in-flight requests on shutdown")
	fl.DurationVar(&f.deregisterAfter, "deregister-after", 0, "deregister an instance with a TTL once it has been unhealthy this long (its TTL expired, no heartbeat since), unless it sets its own deregister_after_seconds; 0: never (docs/registry.md)")
	fl.BoolVar(&f.acl, "acl", false, "require an ACL token on every request but /healthz and /readyz")
	fl.BoolVar(&f.aclAnonRead, "acl-anonymous-read", false, "with --acl: callers without a token may read instances, config, placements and push status (never secrets)")
	fl.StringVar(&f.auditLog, "audit-log", "", `where audit records go: a file (JSON lines, appended), "stderr" or "off" (default: stderr with --acl, off without)`)
	fl.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate (chain) to serve HTTPS with")
	fl.StringVar(&f.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	fl.StringVar(&f.tlsClientCA, "tls-client-ca", "", "PEM CA certificates: require client certificates signed by them (mutual TLS)")
	fl.Float64Var(&f.writeRate, "rate-limit-write", 0, "writes per second per caller (token, or client address when anonymous); 0: no limit")
	fl.IntVar(&f.writeBurst, "rate-limit-write-burst", 0, "writes a caller may send at once (default: the rate, at least 1)")
	fl.Float64Var(&f.readRate, "rate-limit-read", 0, "reads per second per caller; 0: no limit")
	fl.IntVar(&f.readBurst, "rate-limit-read-burst", 0, "reads a caller may send at once (default: the rate, at least 1)")
	fl.IntVar(&f.checkWorkers, "check-workers", 64, "probes of active health checks in flight at most: a slow target holds one for its check's timeout (docs/health.md)")
	fl.IntVar(&f.workers, "scheduler-workers", runtime.GOMAXPROCS(0), "goroutines that split one placement decision on clusters of 8,192+ nodes (1: the committer alone)")
	fl.StringVar(&f.dns, "dns", "", "address to answer DNS on, over UDP and TCP (e.g. 127.0.0.1:8600): healthy instances as A, AAAA and SRV records of NAME.NAMESPACE.svc.sextant and Consul's NAME.service.consul (docs/dns.md); no ACLs apply; empty: no DNS")
	fl.DurationVar(&f.dnsTTL, "dns-ttl", 5*time.Second, "with --dns: how long resolvers may cache an answer, and an answer that the name does not exist (whole seconds; 0: not at all)")
	fl.StringVar(&f.dnsDatacenter, "dns-datacenter", dnsapi.DefaultDatacenter, "with --dns: the datacenter name Consul names may carry (NAME.service.DC.consul), besides dc1")
	fl.StringVar(&f.dnsConsulNamespace, "dns-consul-namespace", "default", "with --dns: the namespace whose services Consul names (NAME.service.consul) answer with")
	f.identity.register(fl)
	f.atRest.register(fl)
	fl.StringVar(&f.consulAPI, "consul-api", "", "address to serve Consul's HTTP API on (e.g. 127.0.0.1:8500): register, discover and check services with Consul's clients over the same registry and ACL tokens (docs/compat.md); empty: off")
	fl.StringVar(&f.consulNamespace, "consul-namespace", "default", "with --consul-api: the namespace Consul's services live in")
	fl.StringVar(&f.consulNode, "consul-node", consulapi.DefaultNode, "with --consul-api: the name of the Consul node this server is (Consul's -node): the node of the services registered through its agent endpoints")
	fl.StringToStringVar(&f.consulNodeMeta, "consul-node-meta", nil, "with --consul-api: the meta of this server's Consul node, KEY=VALUE, repeatable (Consul's -node-meta)")
	fl.DurationVar(&f.consulTTLMin, "consul-session-ttl-min", kv.MinSessionTTL, "with --consul-api: the shortest TTL a Consul session may have (Consul's session_ttl_min), at least 1s: a lock held by a process that died is free after twice its session's TTL")
	fl.StringArrayVar(&f.consulConfig, "consul-config-file", nil, "with --consul-api: a Consul configuration file (JSON) whose service definitions this server's agent registers at its start and at PUT /v1/agent/reload (Consul's -config-file), repeatable (docs/compat.md)")
	fl.BoolVar(&f.consulScripts, "consul-enable-script-checks", false, "with --consul-api: accept Consul's script and Docker checks (Consul's enable_script_checks) as records: kept and answered with their registered status, never run (docs/compat.md)")
	fl.BoolVar(&f.consulConnect, "consul-connect", true, "with --consul-api: serve Connect's CA roots and leaf certificates from the server's certificate authority (docs/compat.md); false: they answer that Connect is not enabled")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "sync a Kubernetes cluster's EndpointSlices into the registry, read-only, from the cluster this kubeconfig names (docs/kubernetes.md)")
	fl.BoolVar(&f.kubeInCluster, "kube-in-cluster", false, "sync the Kubernetes cluster this server runs in (its pod's service account), as --kubeconfig does")
	fl.StringSliceVar(&f.kubeNS, "kube-namespaces", nil, "with --kubeconfig or --kube-in-cluster: sync only these namespaces (watched one by one: a Role in each is enough); default: all")
	fl.StringSliceVar(&f.kubeExcludeNS, "kube-exclude-namespaces", nil, "with --kubeconfig or --kube-in-cluster: never sync these namespaces")
	fl.DurationVar(&f.kubeReady, "kube-ready-timeout", time.Minute, "with --kubeconfig or --kube-in-cluster: /readyz waits this long at most for the first full read of the cluster (0: for ever); past it the server serves what its store holds")
	fl.BoolVar(&f.kubeMirror, "kube-mirror", false, "with --kubeconfig or --kube-in-cluster: write the registry's services that Kubernetes does not own (VMs, Consul API clients) into the synced namespaces as selector-less ClusterIP Services with EndpointSlices")
	fl.BoolVar(&f.kubeIstio, "kube-istio", true, "with --kubeconfig or --kube-in-cluster: read the synced namespaces' Istio objects (VirtualService, DestinationRule, Gateway, ServiceEntry, WorkloadEntry, Sidecar, PeerAuthentication, AuthorizationPolicy, RequestAuthentication, Telemetry) as their config, read-only through Sextant, and write each one's result to its status")
	fl.StringVar(&f.memoryLimit, "memory-limit", "", "soft limit of the Go heap and runtime (e.g. 450MiB, 2GiB, off): the GC works harder near it (docs/registry.md, \"Memory\"); default: GOMEMLIMIT, else none")
	rootCmd.AddCommand(cmd)
}

func newLogger(format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

func runServer(ctx context.Context, f serverFlags) error {
	log, err := newLogger(f.logFormat, f.logLevel)
	if err != nil {
		return err
	}
	// The Consul API's /v1/agent/monitor streams the server's log.
	var logs *consulapi.LogStream
	if f.consulAPI != "" {
		logs = consulapi.NewLogStream()
		log = slog.New(logs.Handler(log.Handler()))
	}
	if err := f.validate(); err != nil {
		return err
	}
	if f.meshRoot == "" {
		f.meshRoot = config.DefaultRootNamespace // serverFlags built in code (tests) leave it unset
	}
	memLimit, err := applyMemoryLimit(f.memoryLimit)
	if err != nil {
		return err
	}
	if f.storePassword, err = storePassword(f, log); err != nil {
		return err
	}
	if f.store == "" {
		if err := prepareDataDir(f.data, log); err != nil {
			return err
		}
	}
	tlsCfg, err := serverTLS(f.tlsCert, f.tlsKey, f.tlsClientCA)
	if err != nil {
		return err
	}
	keys, err := f.atRest.keyring(os.Getenv)
	if err != nil {
		return err
	}

	// Every part started below is handed to lc, which stops them in the
	// reverse order: the API's requests drained first, the store closed
	// last. An early return stops those already running.
	lc := newLifecycle(log)
	defer lc.stop() // on an early return; the shutdown below stops everything otherwise
	audit, closeAudit, err := openAudit(f, log)
	if err != nil {
		return err
	}
	lc.add("audit log", func() error { closeAudit(); return nil })
	guard := acl.New(acl.Options{
		Enabled: f.acl, AnonymousRead: f.aclAnonRead, Audit: audit,
		WriteRate: acl.Rate{PerSecond: f.writeRate, Burst: f.writeBurst},
		ReadRate:  acl.Rate{PerSecond: f.readRate, Burst: f.readBurst},
	})
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	api := httpapi.New(httpapi.Options{Logger: log.With("component", "httpapi"), Metrics: metrics, Gatherer: metrics, ACL: guard})

	// Listen first so /healthz and /readyz answer while the catalog loads,
	// and so an address in use fails before the store opens: a cluster
	// server has then joined nothing it must leave.
	ln, xln, err := listenServer(f)
	if err != nil {
		return err
	}
	if f.xds != "" && f.xdsListener == nil {
		// The ADS server closes it once it serves; this, on an early return.
		lc.add("xds listener", func() error { xln.Close(); return nil })
	}
	srv, ln := newHTTPServer(ln, browserGuard(serverMux(api, guard, f.pprof), ln, f), tlsCfg, log)
	srv.RegisterOnShutdown(api.Shutdown)
	// Closed last: by then the drain below has let its requests finish.
	lc.serve("http server", true, func() error { return srv.Serve(ln) }, func() error { srv.Close(); return nil })
	log.Info("listening", "http", ln.Addr().String(), "tls", tlsCfg != nil, "mtls", f.tlsClientCA != "", "acl", f.acl, "data", f.data, "store", storeName(f.store))
	warnExposed(log, ln.Addr().String(), tlsCfg != nil, f)
	// DNS listens now too, and serves once the registry is loaded.
	var dnsSrv *dnsapi.Server
	if f.dns != "" {
		if dnsSrv, err = dnsapi.Listen(f.dns); err != nil {
			return fmt.Errorf("--dns %s: %w", f.dns, err)
		}
		lc.add("dns listener", dnsSrv.Shutdown) // on an early return; nothing once served
	}
	// So does the Consul API: an address in use fails before the store opens.
	var consulLn net.Listener
	if f.consulAPI != "" {
		if consulLn, err = net.Listen("tcp", f.consulAPI); err != nil {
			return fmt.Errorf("--consul-api %s: %w", f.consulAPI, err)
		}
		lc.add("consul api listener", func() error { consulLn.Close(); return nil }) // on an early return
	}

	st, member, err := openStore(ctx, f, ln.Addr().String(), log, metrics)
	if err != nil {
		return err
	}
	lc.add("store", st.Close) // its error is the server's
	cfg := config.NewTable()
	cfg.SetRootNamespace(f.meshRoot)
	// The scheduler is the catalog table of nodes and placements: loaded
	// with the rest, fed by the write engine's follower, decided in its
	// committer (docs/placement.md, "Wiring").
	sched := placement.New(placement.Config{Log: log.With("component", "placement"), Workers: f.workers})
	lc.add("scheduler", func() error { sched.Close(); return nil })
	// Every kind registers its catalog table with the write engine: the
	// instance kind (registry), tokens and policies (acl), nodes and
	// placements (the scheduler), routing config.
	regOpts := registry.Options{
		Logger:          log.With("component", "registry"),
		Metrics:         metrics,
		DeregisterAfter: f.deregisterAfter,
	}
	if member != nil {
		// Servers of a cluster share the health judgement and keep it.
		regOpts.KeepHealthAtLoad = true
		regOpts.Cluster = member
		api.SetSync(member)
	}
	reg := registry.New(regOpts)
	ident, err := newIdentity(f.identity, keys, log)
	if err != nil {
		return err
	}
	// The active health checks: told of instance changes by the follower,
	// run once the registry has started (docs/health.md).
	checks := healthcheck.New(reg, healthcheck.Options{Workers: f.checkWorkers, Logger: log.With("component", "healthcheck"), Metrics: metrics})
	tables := guard.Tables() // tokens and policies
	maps.Copy(tables, sched.Tables())
	tables[store.Config] = cfg
	secrets := secret.NewSealedTable(keys)
	tables[store.Secrets] = secrets
	tables[store.Instances] = reg.Table()
	kvs := kv.New() // Consul's KV store (served with --consul-api)
	tables[store.KV] = kvs.Table()

	// The write engine, opened over st, closed after the parts that write
	// through it have stopped; the registry's TTL timer stops before it.
	eng, err := commit.Open(st, commit.Options{
		Catalog:   catalog.Options{LogSize: f.logSize},
		Tables:    tables,
		Trackers:  []commit.Tracker{reg, ident, checks},
		Pipelined: registry.Pipelined,
		Shared:    member != nil,
		Logger:    log.With("component", "commit"),
		Metrics:   metrics,
	})
	if err != nil {
		return atRestHint(err)
	}
	lc.add("write engine", eng.Close)
	kvs.Start(eng)
	if err := reg.Start(eng); err != nil {
		return err
	}
	lc.add("registry", reg.Close)
	if err := ident.Start(ctx, eng); err != nil {
		return atRestHint(err)
	}
	if err := resealAtStart(ctx, eng, secrets, ident, keys, log); err != nil {
		return err
	}
	api.SetIssuer(ident)
	// Stopped before the registry: its workers write through it.
	lc.start("health checks", false, checks.Run)

	cfg.Attach(eng.Catalog())
	if member != nil {
		// Stopped after the control plane, it leaves the cluster: the
		// others judge this server's instances at once.
		lc.start("cluster member", false, func(ctx context.Context) error { member.Run(ctx, reg); return nil })
	}
	registerSchedulerGauges(metrics, sched)

	// The control plane: the push engine follows the catalog into the xDS
	// cache, the ADS server serves it.
	cache := xds.NewCache()
	src, err := push.NewCatalogSource(eng.Catalog(), cfg)
	if err != nil {
		return err
	}
	engine := push.New(src, cache, push.Options{
		Logger: log.With("component", "push"), Registerer: metrics, RootNamespace: f.meshRoot,
	})
	maxAge := f.xdsMaxAge
	if maxAge <= 0 {
		maxAge = -1 // never
	}
	ads := xds.NewServer(cache, xds.ServerOptions{Logger: log.With("component", "xds"), Metrics: xds.NewMetrics(metrics),
		GRPC: append(xdsServerOptions(guard, tlsCfg), xdsHandshake(f)), MaxConnectionAge: maxAge,
		// A Secret (a private key) goes only to secret:read on its namespace, audited.
		SecretAccess: func(ctx context.Context) xds.SecretAccess { return acl.SDS(ctx) },
		// Envoy nodes' SDS "default" and "ROOTCA", from the authority.
		Workloads: sdsIssuer{ident}})
	if f.xds != "" {
		// Without an xDS listener nothing consumes what the engine pushes.
		lc.start("push engine", true, engine.Run)
		// Istio Gateways: listeners, routes and SDS secrets for gateways.
		gateways := ingress.New(eng.Catalog(), cfg, secrets, cache, log.With("component", "ingress"))
		// The proxies' listener carries the mesh's Telemetry (docs/telemetry.md).
		gateways.SetProxyListener(push.DefaultProxyPort)
		lc.start("ingress publisher", true, gateways.Run)
		xln := limitXDS(xln, f, metrics)
		lc.start("xds server", true, func(ctx context.Context) error { return ads.Serve(ctx, xln) })
		log.Info("serving xDS", "addr", xln.Addr().String(), "tls", tlsCfg != nil)
		warnExposed(log.With("listener", "xds"), xln.Addr().String(), tlsCfg != nil, f)
		api.SetPushStatus(push.StatusHandler(engine, ads, gateways))
		// A config write is answered once the engine and the Gateways'
		// publisher have published it.
		api.SetPushWaiter(engine, gateways)
	}
	if dnsSrv != nil {
		// Reads the instance table as it is at each query: stopped before
		// the registry and the write engine.
		h, err := dnsapi.New(reg.Instances(), dnsOptions(f, log))
		if err != nil {
			return err
		}
		lc.serve("dns server", true, func() error { return dnsSrv.Serve(h) }, dnsSrv.Shutdown)
		log.Info("serving DNS", "addr", dnsSrv.Addr(), "ttl", f.dnsTTL, "datacenter", f.dnsDatacenter, "consul_namespace", f.dnsConsulNamespace)
		warnDNSExposed(log, dnsSrv.Addr(), f.acl)
	}

	if consulLn != nil {
		if err := serveConsulAPI(lc, f, consulLn, reg, kvs, ident, guard, member, tlsCfg, log, logs); err != nil {
			return err
		}
	}

	if f.kubeconfig != "" || f.kubeInCluster {
		if err := startKubeSync(lc, f, api, reg, cfg, log); err != nil {
			return err
		}
	}

	// From here on the API serves the registry: at the shutdown its
	// requests are drained first, while everything they use still runs.
	api.SetKV(kvs)
	api.SetRegistry(reg)
	lc.add("http requests", func() error { drainHTTP(srv, f.drain, log); return nil })
	// The load's garbage (raw records, decode buffers) is as large as the
	// catalog: hand it back to the OS now rather than over many GC cycles.
	// The server already answers meanwhile, on its own goroutines.
	debug.FreeOSMemory()
	// From here on, hand a burst's garbage back once the server goes quiet
	// (started after the load, which the release above already covered).
	lc.start("memory releaser", false, func(ctx context.Context) error {
		releaseWhenQuiet(ctx, log.With("component", "memory"))
		return nil
	})
	nodes, placements := sched.Len()
	log.Info("ready", "instances", reg.Instances().Len(), "nodes", nodes, "placements", placements, "revision", eng.Revision(), "memory_limit", memoryLimitName(memLimit))

	// The http server or the control plane stopping on its own stops the
	// server with its error: serving stale xDS while /readyz says ready
	// would hide it.
	failure := lc.wait(ctx)
	if failure != nil {
		log.Error("shutting down: a part stopped on its own", "err", failure)
	} else {
		log.Info("shutting down: draining requests", "drain", f.drain)
	}
	if err := lc.stop(); err != nil {
		return err
	}
	log.Info("stopped")
	return failure
}

// newHTTPServer is the API's server, with its timeouts, on ln wrapped for
// TLS, or for joined writes without it: serve it on the listener returned.
func newHTTPServer(ln net.Listener, h http.Handler, tlsCfg *tls.Config, log *slog.Logger) (*http.Server, net.Listener) {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if tlsCfg != nil {
		srv.TLSConfig = tlsCfg
		return srv, tls.NewListener(ln, tlsCfg)
	}
	return srv, httpapi.JoinWrites(srv, ln) // large answers in one write
}

// drainHTTP stops srv accepting, lets its requests finish for up to d,
// then closes what is left.
func drainHTTP(srv *http.Server, d time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("drain incomplete", "err", err)
		srv.Close()
	}
}

// registerSchedulerGauges exports the sizes of sched.
func registerSchedulerGauges(metrics prometheus.Registerer, sched *placement.Scheduler) {
	metrics.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sextant_scheduler_nodes", Help: "Nodes the placement scheduler holds."},
			func() float64 { n, _ := sched.Len(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sextant_scheduler_placements", Help: "Placements the scheduler holds."},
			func() float64 { _, p := sched.Len(); return float64(p) }),
	)
}

// validate checks the flags that need nothing opened.
func (f serverFlags) validate() error {
	switch {
	case f.meshRoot != "" && !naming.ValidName(f.meshRoot):
		return fmt.Errorf("--mesh-root-namespace %q is not a namespace name (lowercase letters, digits and '-')", f.meshRoot)
	case f.store != "" && len(f.clusterID) > 64:
		return fmt.Errorf("--cluster-id %q: at most 64 bytes", f.clusterID)
	case f.store != "" && f.clusterLease < 2*time.Second:
		return fmt.Errorf("--cluster-lease %v: at least 2s (the lease is renewed every second)", f.clusterLease)
	case f.checkWorkers < 0:
		return fmt.Errorf("--check-workers %d: must not be negative (0: the default, 64)", f.checkWorkers)
	case f.deregisterAfter < 0:
		return fmt.Errorf("--deregister-after %v: must not be negative (0: never)", f.deregisterAfter)
	case f.aclAnonRead && !f.acl:
		return fmt.Errorf("--acl-anonymous-read needs --acl")
	case validHosts(f.allowedHosts) != nil:
		return fmt.Errorf("--allowed-hosts: %w", validHosts(f.allowedHosts))
	case f.repair && f.store != "":
		return fmt.Errorf("--repair repairs the embedded store in --data; with --store the database is its own")
	case f.kubeconfig != "" && f.kubeInCluster:
		return fmt.Errorf("--kubeconfig and --kube-in-cluster name two clusters: give one")
	case (len(f.kubeNS) > 0 || len(f.kubeExcludeNS) > 0) && f.kubeconfig == "" && !f.kubeInCluster:
		return fmt.Errorf("--kube-namespaces and --kube-exclude-namespaces need --kubeconfig or --kube-in-cluster")
	case f.consulTTLMin != 0 && (f.consulTTLMin < kv.FloorSessionTTL || f.consulTTLMin > kv.MaxSessionTTL):
		return fmt.Errorf("--consul-session-ttl-min %v: must be between %v and %v", f.consulTTLMin, kv.FloorSessionTTL, kv.MaxSessionTTL)
	case f.consulNamespace != "" && !naming.ValidName(f.consulNamespace):
		return fmt.Errorf("--consul-namespace %q: not a valid namespace: 1..128 chars of [a-z0-9-._], starting and ending with a letter or digit", f.consulNamespace)
	}
	// Each DNS option on its own, so that the error names its flag.
	for _, o := range []struct {
		flag string
		opts dnsapi.Options
	}{
		{"--dns-ttl", dnsapi.Options{TTL: f.dnsTTL}},
		{"--dns-datacenter", dnsapi.Options{Datacenter: f.dnsDatacenter}},
		{"--dns-consul-namespace", dnsapi.Options{ConsulNamespace: f.dnsConsulNamespace}},
	} {
		if err := o.opts.Validate(); err != nil {
			return fmt.Errorf("%s: %w", o.flag, err)
		}
	}
	return nil
}

// dnsOptions are the DNS flags as the DNS handler's options.
func dnsOptions(f serverFlags, log *slog.Logger) dnsapi.Options {
	return dnsapi.Options{
		TTL: f.dnsTTL, Datacenter: f.dnsDatacenter, ConsulNamespace: f.dnsConsulNamespace,
		Logger: log.With("component", "dns"),
	}
}

// listenServer listens on --http and on --xds (unless empty, or the tests
// gave a listener), on both or neither.
func listenServer(f serverFlags) (ln, xln net.Listener, err error) {
	if ln, err = net.Listen("tcp", f.http); err != nil {
		return nil, nil, fmt.Errorf("listen on %s: %w", f.http, err)
	}
	xln = f.xdsListener
	if f.xds != "" && xln == nil {
		if xln, err = net.Listen("tcp", f.xds); err != nil {
			ln.Close()
			return nil, nil, fmt.Errorf("listen on %s: %w", f.xds, err)
		}
	}
	return ln, xln, nil
}

// xdsServerOptions make xDS streams pass the guard (a token in the
// "authorization" metadata, push:read on every namespace) and, with
// --tls-cert, TLS.
func xdsServerOptions(guard *acl.Guard, tlsCfg *tls.Config) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(guard.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(guard.StreamInterceptor(), acl.StreamPermission(acl.Permission{Resource: acl.Push, Access: acl.Read})),
	}
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	return opts
}

// serverMux routes the API, the web console and, with --pprof, profiles.
func serverMux(api *httpapi.API, guard *acl.Guard, withPprof bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/", api)
	// The web console: static files only, every call it makes goes through
	// the API above (docs/console.md).
	mux.Handle("/ui/", http.StripPrefix("/ui", console.Handler()))
	mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	if withPprof {
		// Profiles show the server's memory: admin only when ACLs are on.
		admin := func(h http.HandlerFunc) http.Handler {
			return guard.Wrap("", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if err := acl.Require(r, acl.Admin); err != nil {
					acl.WriteError(w, err)
					return
				}
				h(w, r)
			}))
		}
		mux.Handle("/debug/pprof/", admin(pprof.Index))
		mux.Handle("/debug/pprof/profile", admin(pprof.Profile))
		mux.Handle("/debug/pprof/symbol", admin(pprof.Symbol))
		mux.Handle("/debug/pprof/trace", admin(pprof.Trace))
	}
	return mux
}

// warnExposed warns when the server listens beyond this machine without
// TLS or without ACLs: anyone who can reach it could then read and rewrite
// the registry, or read tokens off the wire.
func warnExposed(log *slog.Logger, addr string, tls bool, f serverFlags) {
	if browserguard.Loopback(addr) {
		return
	}
	if !tls {
		log.Warn("serving a non-loopback address without TLS: requests and tokens cross the network in clear text; set --tls-cert and --tls-key", "http", addr)
	}
	if !f.acl {
		log.Warn("serving a non-loopback address without ACLs: anyone who reaches it can deregister every instance; set --acl and run sextant acl bootstrap", "http", addr)
	}
	if f.acl && f.writeRate <= 0 {
		log.Warn("no rate limit on writes: one caller can take the whole server; consider --rate-limit-write", "http", addr)
	}
}

// warnDNSExposed warns when DNS answers beyond this machine: DNS carries
// no token, so ACLs do not apply to it.
func warnDNSExposed(log *slog.Logger, addr string, acl bool) {
	if browserguard.Loopback(addr) {
		return
	}
	msg := "serving DNS on a non-loopback address: anyone who reaches it reads the addresses of the healthy instances of every namespace; DNS has no ACLs"
	if acl {
		msg += ", --acl does not apply to it"
	}
	log.Warn(msg, "dns", addr)
}

// serverStore is the store the registry writes through, and closes.
type serverStore interface {
	commit.Store
	Close() error
}

// openStore opens the embedded store in --data, or the shared store of
// --store and this server's membership of its cluster.
func openStore(ctx context.Context, f serverFlags, addr string, log *slog.Logger, metrics prometheus.Registerer) (serverStore, *cluster.Member, error) {
	if f.store == "" {
		st, err := openEmbedded(f, log, metrics)
		return st, nil, err
	}
	if !strings.HasPrefix(f.store, "mysql://") {
		return nil, nil, fmt.Errorf("--store %q: want mysql://user:password@tcp(host:3306)/database", storeName(f.store))
	}
	wake, err := wakeAddr(f.clusterWake, addr, f.store)
	if err != nil {
		return nil, nil, err
	}
	st, err := mysql.Open(ctx, f.store, mysql.Options{Logger: log.With("component", "store"), Metrics: metrics, Password: f.storePassword, Wake: wake,
		Rows: map[store.Kind]mysql.Columns{store.Instances: instance.Columns{}}})
	if err != nil {
		return nil, nil, err
	}
	member := cluster.New(st, cluster.Options{
		ID: f.clusterID, Addr: addr, Lease: f.clusterLease, Logger: log.With("component", "cluster"), Metrics: metrics,
	})
	log.Info("joining the cluster", "id", member.ID(), "database", st.Database())
	return st, member, nil
}

// storeName is --store without its password, for logs and errors.
func storeName(url string) string {
	if url == "" {
		return "embedded"
	}
	at := strings.LastIndex(url, "@")
	if at < 0 {
		return url
	}
	head, rest := url[:at], url[at:]
	scheme := ""
	if i := strings.Index(head, "://"); i >= 0 {
		scheme, head = head[:i+3], head[i+3:]
	}
	if user, _, ok := strings.Cut(head, ":"); ok {
		return scheme + user + ":***" + rest
	}
	return url
}

// serveConsulAPI serves the Consul-compatible API on ln once the registry
// is loaded; at the shutdown its requests drain before the registry stops.
func serveConsulAPI(lc *lifecycle, f serverFlags, ln net.Listener, reg *registry.Registry, kvs *kv.Store, ident *identity.Service, guard *acl.Guard, member *cluster.Member, tlsCfg *tls.Config, log *slog.Logger, logs *consulapi.LogStream) error {
	opts := consulapi.Options{
		Namespace: f.consulNamespace, Node: f.consulNode, NodeMeta: f.consulNodeMeta, Addr: ln.Addr().String(), Version: readBuildInfo().Version,
		ACL: guard, Logger: log.With("component", "consulapi"), KV: kvs,
	}
	if member != nil {
		opts.Stale = member.Stale
	}
	if f.consulConnect {
		opts.CA = ident
	}
	opts.SessionTTLMin = f.consulTTLMin
	opts.EnableScriptChecks = f.consulScripts
	opts.Logs = logs
	opts.ConfigFiles = f.consulConfig
	api, err := consulapi.New(reg, opts)
	if err != nil {
		return err
	}
	// A configuration file's services are registered before the API
	// answers; a bad file fails the start, as it fails Consul's.
	if err := api.LoadConfigFiles(context.Background()); err != nil {
		return err
	}
	srv, sln := newHTTPServer(ln, browserGuard(api, ln, f), tlsCfg, log)
	srv.RegisterOnShutdown(api.Shutdown)
	lc.serve("consul api", true, func() error { return srv.Serve(sln) }, func() error { drainHTTP(srv, f.drain, log); return nil })
	// Listed as Consul's service consul while it serves, as Consul servers are.
	host, port := consulSelfAddr(ln.Addr())
	lc.start("consul self registration", false, func(ctx context.Context) error { return api.KeepSelf(ctx, host, port) })
	// Sessions past their TTL are invalidated by every server (each
	// invalidation is conditional: one wins).
	lc.start("consul sessions", false, func(ctx context.Context) error { return kvs.RunSessions(ctx, time.Second, log) })
	// Sessions bound to checks are invalidated when one fails (every
	// server watches; a second invalidation changes nothing).
	lc.start("consul session checks", false, func(ctx context.Context) error { return api.RunSessionChecks(ctx, time.Second) })
	log.Info("serving the Consul API", "addr", ln.Addr().String(), "namespace", f.consulNamespace, "tls", tlsCfg != nil)
	warnExposed(log.With("listener", "consul-api"), ln.Addr().String(), tlsCfg != nil, f)
	return nil
}

// startKubeSync starts the Kubernetes -> registry sync (docs/kubernetes.md).
// It runs until the server stops; an unreachable API server is retried by
// its watches, not fatal.
// /readyz waits for the first full read of each (a pod's instances, its
// routes).
func startKubeSync(lc *lifecycle, f serverFlags, api *httpapi.API, reg *registry.Registry, table *config.Table, log *slog.Logger) error {
	cfg, err := kube.Config(f.kubeconfig)
	if err != nil {
		return err
	}
	s, err := kube.New(cfg, reg, kube.Options{Namespaces: f.kubeNS, Exclude: f.kubeExcludeNS, Logger: log.With("component", "kube")})
	if err != nil {
		return err
	}
	// Bounded: an API server unreachable at start does not keep the
	// server out of service for ever (its store holds the last sync).
	var deadline time.Time
	if f.kubeReady > 0 {
		deadline = time.Now().Add(f.kubeReady)
	}
	api.AddSource("kubernetes", boundedSource{s, deadline})
	lc.start("kubernetes sync", false, s.Run)
	if f.kubeIstio {
		ins := reg.Instances()
		registered := func(k naming.ServiceKey) bool {
			svc := ins.Lookup(k)
			return svc != nil && svc.Len() > 0
		}
		is, err := kube.NewIstio(cfg, reg.Engine(), table, registered, kube.Options{Namespaces: f.kubeNS, Exclude: f.kubeExcludeNS, Logger: log.With("component", "kube-istio")})
		if err != nil {
			return err
		}
		api.AddSource("kubernetes-istio", boundedSource{is, deadline})
		lc.start("kubernetes istio config", false, is.Run)
	}
	if f.kubeMirror {
		m, err := kube.NewMirror(cfg, reg, kube.Options{Namespaces: f.kubeNS, Exclude: f.kubeExcludeNS, Logger: log.With("component", "kube-mirror")})
		if err != nil {
			return err
		}
		lc.start("kubernetes mirror", false, m.Run)
	}
	log.Info("syncing Kubernetes", "api_server", cfg.Host, "namespaces", f.kubeNS, "exclude", f.kubeExcludeNS, "istio", f.kubeIstio, "mirror", f.kubeMirror)
	return nil
}

// boundedSource is a readiness source that counts as synced once its
// deadline has passed (zero: never).
type boundedSource struct {
	httpapi.Source
	deadline time.Time
}

func (b boundedSource) Synced() bool {
	return b.Source.Synced() || !b.deadline.IsZero() && time.Now().After(b.deadline)
}
