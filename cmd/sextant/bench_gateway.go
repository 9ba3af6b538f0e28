package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	benchbal "github.com/sextant-mesh/sextant/internal/bench/balancer"
	benchgw "github.com/sextant-mesh/sextant/internal/bench/gateway"
)

func init() {
	benchCmd.AddCommand(newBenchGatewayCmd(), newBenchGatewayServeCmd(), newBenchGatewayGRPCLoadCmd())
}

func newBenchGatewayCmd() *cobra.Command {
	var (
		scenario, proxies, policies, providers string
		cfg                                    benchgw.Config
		race                                   benchbal.Config
		updates                                int
		stream                                 benchgw.StreamConfig
		tlsCfg                                 benchgw.TLSConfig
		dp                                     benchgw.DataplaneConfig
		dpScenarios                            string
		dpVariants                             []string
	)
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Measure the gateway beside nginx and HAProxy, or the balancer comparison through it",
		Long: `Scenario "throughput" (default) starts a Go upstream answering 1 KB, nginx
(1 worker) and HAProxy (1 thread) as plain keep-alive reverse proxies, the
gateway (as "sextant gateway", configured over loopback ADS, with and without
call recording) and the candidate data paths it was chosen from, all on
loopback, and drives each with wrk -t2 -c64. It reports requests/s, CPU
microseconds per request of each proxy process, and the added latency over a
direct call at half of nginx's peak rate (open-loop loader). nginx, haproxy
and wrk come from Debian: apt-get install -y nginx haproxy wrk.

Scenario "stream" moves one --body-size upload and one download (default
1 GiB each) through nginx (proxy_request_buffering and proxy_buffering off)
and the gateway, reporting MB/s each way and each proxy's peak RSS growth.

Over HTTPS (name them in --proxies): nginx-tls (nginx with ssl and http2)
and sextant-tls (the gateway's --tls-listen, its certificate by SDS), with one
ECDSA P-256 certificate, TLS 1.3 AES-128-GCM, keep-alive connections; the
answer adds their ratio and sextant-tls against plaintext sextant.

Scenario "tls" measures, against nginx (http2, the same ECDSA P-256
certificate): HTTP/2 over TLS with h2load (--h2-clients connections of
--h2-streams streams, 1 KiB answers), new TLS 1.3 handshakes/s (X25519, no
resumption, --connections loaders); then the gateway with mutual TLS and an
RBAC filter of 10 policies against plain TLS (HTTP/1.1 keep-alive, a Go
loader). h2load: apt-get install -y nghttp2-client.

Scenario "upstream-tls" puts nginx (proxy_ssl: the CA verified, sessions
reused, upstream keep-alive) and the gateway (a cluster with an
UpstreamTlsContext, the CA by SDS) in front of one Go HTTPS upstream, TLS 1.3
AES-128-GCM, and drives each in plaintext with wrk in alternating rounds.

Scenario "sidecar" measures the latency a pair of sidecars adds over the
direct call at a fixed rate (--latency-rate, default 1000/s; --connections
default 16; --latency-duration per run): Sextant's pair (a sextant server,
two "sextant sidecar" processes, mutual TLS by DestinationRule ISTIO_MUTUAL
and PeerAuthentication STRICT) and nginx as the same pair of TLS proxies
(mutual TLS verified on both ends), with each side's CPU per call and RSS
idle and under the load.

Scenario "dataplane" (issue 48) is the data plane's cost per request side by
side, in one run: the gateway, nginx (1 worker) and HAProxy (1 thread) each
pinned to core --proxy-cpu (taskset), the loaders and upstreams to
--load-cpu, the proxies alternating within each round. Figures
(--dataplane-scenarios): h1 (HTTP/1.1 keep-alive, wrk -t1 -c64, 1 KiB
answers), h1-tls (the same over TLS 1.3), h2-tls and h2c (h2load -t1
-c --h2-clients -m --h2-streams), grpc-unary (a grpc-go loader, one
connection, --grpc-concurrency calls in flight, 1 KiB answers; nginx by
grpc_pass, HAProxy by an h2 backend) and grpc-stream (as many bidirectional
streams, ping-pong of 1 KiB answers), with the loader straight to the gRPC
upstream on the proxies' core as "direct"; h1-rate and h1-tls-rate (h2load
--h1 over --dataplane-rate-connections at --dataplane-rate requests/s in
all, p50 and p99 from its per-request log after the first second), with the
loader straight to the HTTP upstream as "direct" and each proxy's added p50
and p99 over it. Each run reports requests/s, the proxy's CPU per request
from /proc and the loader's p50/p99; the ratios of
the gateway to each peer are paired per round, with their median. User CPU
and context switches per request are reported apart; --variant
NAME=[BINARY][,ENV=VALUE...][,--FLAG...] adds another gateway to the rounds
(the previous binary, GOGC/GOMAXPROCS settings, or flags of "sextant gateway"
such as --no-call-log), named in --proxies after "sextant". nginx-log in
--proxies is nginx with an access log (a line a request, with its
upstream's address, status and time, buffered 64 KiB and flushed every
second), the peer that records each call as the gateway's call log does;
nginx-fwd is nginx making the gateway's (and Envoy's) edits of each call:
X-Forwarded-For and X-Forwarded-Proto set, the client's X-Request-Id kept
or a new one made, Via added to, and Via and X-Request-Id on the answer
(plain nginx passes the request's head on as it came); nginx-fwd-log does
both, the work the gateway does per call with its call log on.
The candidate data paths may be named in --proxies too (plain HTTP/1.1: the
h1 and h1-rate figures), among them go-floor (a Go proxy forwarding bytes, a
goroutine per connection) and go-epoll / go-epoll-block (the same forwarding
on an epoll loop of its own, waiting in Go's poller or in epoll_wait).
Issue 43's header and CORS figure: name sextant-filters in --proxies (h1,
h1-tls, h2-tls, h2c). It is the gateway with 10 routes /r0 .. /r9, each
setting, adding and removing request headers, setting an answer header and
allowing the origin https://shop.example by CORS; every other gateway of the
run serves the same 10 routes without them, and every proxy is sent GET
/r3/items with "Origin: https://shop.example". Before the rounds one such
request through each proxy must show the filters ran in sextant-filters
alone (X-Served-By and Access-Control-Allow-Origin in its answer only).

Scenario "config" publishes --updates route changes through go-control-plane's
ADS server and times each until the new route serves.

Scenario "race" runs the comparison of "sextant bench balancer" (providers
whose capacity changes every phase) through a real gateway per policy
(default adaptive,random) instead of the client's balancer.

Everything shares this machine's cores: compare figures within one run.`,
		Example: `  sextant bench gateway
  sextant bench gateway --proxies direct,nginx,haproxy,sextant --duration 10s --rounds 3
  sextant bench gateway --proxies nginx,sextant,nginx-tls,sextant-tls --rounds 3
  sextant bench gateway --scenario race
  sextant bench gateway --scenario tls --duration 10s --rounds 3
  sextant bench gateway --scenario stream --body-size 268435456
  sextant bench gateway --scenario upstream-tls --duration 5s --rounds 3
  sextant bench gateway --scenario sidecar --latency-rate 1000 --latency-duration 5s --rounds 3
  sextant bench gateway --scenario dataplane --duration 5s --rounds 3
  sextant bench gateway --scenario dataplane --dataplane-scenarios h1 --proxies sextant,nginx,old --variant old=/tmp/sextant-old
  sextant bench gateway --scenario dataplane --dataplane-scenarios h1 --proxies sextant-filters,sextant,nginx --rounds 6`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			enc := json.NewEncoder(cmd.OutOrStdout())
			switch scenario {
			case "throughput":
				bin, err := os.Executable()
				if err != nil {
					return err
				}
				cfg.Binary = bin
				if proxies != "" {
					cfg.Proxies = strings.Split(proxies, ",")
				}
				cfg.Progress = cmd.ErrOrStderr()
				res, err := benchgw.Run(cmd.Context(), cfg)
				if err != nil {
					return err
				}
				return enc.Encode(res)
			case "upstream-tls":
				bin, err := os.Executable()
				if err != nil {
					return err
				}
				cfg.Binary, cfg.Progress = bin, cmd.ErrOrStderr()
				res, err := benchgw.RunUpstreamTLS(cmd.Context(), cfg)
				if err != nil {
					return err
				}
				return enc.Encode(res)
			case "sidecar":
				bin, err := os.Executable()
				if err != nil {
					return err
				}
				cfg.Binary, cfg.Progress = bin, cmd.ErrOrStderr()
				if !cmd.Flags().Changed("connections") {
					cfg.Connections = 16
				}
				res, err := benchgw.RunSidecar(cmd.Context(), cfg)
				if err != nil {
					return err
				}
				return enc.Encode(res)
			case "stream":
				bin, err := os.Executable()
				if err != nil {
					return err
				}
				stream.Binary, stream.Rounds, stream.Progress = bin, cfg.Rounds, cmd.ErrOrStderr()
				if proxies != "" {
					stream.Proxies = strings.Split(proxies, ",")
				}
				res, err := benchgw.RunStream(cmd.Context(), stream)
				if err != nil {
					return err
				}
				return enc.Encode(res)
			case "tls":
				bin, err := os.Executable()
				if err != nil {
					return err
				}
				tlsCfg.Binary, tlsCfg.Duration, tlsCfg.Rounds, tlsCfg.Progress = bin, cfg.Duration, cfg.Rounds, cmd.ErrOrStderr()
				tlsCfg.Connections = cfg.Connections
				res, err := benchgw.RunTLS(cmd.Context(), tlsCfg)
				if err != nil {
					return err
				}
				return enc.Encode(res)
			case "dataplane":
				bin, err := os.Executable()
				if err != nil {
					return err
				}
				dp.Binary, dp.Progress, dp.Rounds = bin, cmd.ErrOrStderr(), cfg.Rounds
				if cmd.Flags().Changed("duration") {
					dp.Duration = cfg.Duration
				}
				if cmd.Flags().Changed("connections") {
					dp.Connections = cfg.Connections
				}
				if cmd.Flags().Changed("h2-clients") {
					dp.H2Clients = tlsCfg.H2Clients
				}
				dp.H2Streams, dp.ProfileDir = tlsCfg.H2Streams, tlsCfg.ProfileDir
				for _, v := range dpVariants {
					name, rest, ok := strings.Cut(v, "=")
					if !ok || name == "" || name == "sextant" || name == benchgw.FiltersProxy || name == "haproxy" || slices.Contains(benchgw.NginxPeers, name) {
						return fmt.Errorf("--variant %q: want NAME=[BINARY][,ENV=VALUE...][,--FLAG...]", v)
					}
					parts := strings.Split(rest, ",")
					vr := benchgw.Variant{Name: name, Binary: parts[0]}
					for _, p := range parts[1:] {
						switch {
						case strings.HasPrefix(p, "--"):
							vr.Args = append(vr.Args, p)
						case strings.Contains(p, "="):
							vr.Env = append(vr.Env, p)
						default:
							return fmt.Errorf("--variant %q: %q is neither ENV=VALUE nor a --flag of sextant gateway", v, p)
						}
					}
					dp.Variants = append(dp.Variants, vr)
				}
				if dpScenarios != "" {
					dp.Scenarios = strings.Split(dpScenarios, ",")
				}
				if proxies != "" {
					dp.Proxies = strings.Split(proxies, ",")
				}
				res, err := benchgw.RunDataplane(cmd.Context(), dp)
				if err != nil {
					return err
				}
				return enc.Encode(res)
			case "config":
				res, err := benchgw.RunConfigLatency(cmd.Context(), updates)
				if err != nil {
					return err
				}
				return enc.Encode(res)
			case "race":
				f, err := benchbal.LoadProviders(providers)
				if err != nil {
					return err
				}
				race.Providers = f
				race.Policies = strings.Split(policies, ",")
				race.Progress = cmd.ErrOrStderr()
				if race.Timeout <= 0 {
					race.Timeout = 2 * time.Second
				}
				race.Proxy = benchgw.RaceProxy(race.Timeout)
				results, err := benchbal.Run(cmd.Context(), race, cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				out := map[string]any{"scenario": "race_through_gateway", "policies": results}
				var adaptive, random float64
				for _, r := range results {
					switch r.Policy {
					case "adaptive":
						adaptive = r.Ratio
					case "random":
						random = r.Ratio
					}
				}
				if adaptive > 0 {
					out["adaptive_ratio"] = adaptive
				}
				if adaptive > 0 && random > 0 {
					out["adaptive_vs_random"] = float64(int64(adaptive/random*1000+0.5)) / 1000
				}
				return enc.Encode(out)
			}
			return fmt.Errorf("unknown --scenario %q: throughput, dataplane, stream, tls, upstream-tls, sidecar, race or config", scenario)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&scenario, "scenario", "throughput", "throughput, dataplane, stream, tls, upstream-tls, sidecar, race or config")
	fl.StringVar(&dpScenarios, "dataplane-scenarios", "", "dataplane: comma-separated figures (default: "+strings.Join(benchgw.DataplaneScenarios, ",")+")")
	fl.IntVar(&dp.ProxyCPU, "proxy-cpu", 0, "dataplane: the core every proxy is pinned to")
	fl.IntVar(&dp.LoadCPU, "load-cpu", 1, "dataplane: the core of the loaders and upstreams")
	fl.BoolVar(&dp.NoPin, "no-pin", false, "dataplane: run unpinned")
	fl.StringArrayVar(&dpVariants, "variant", nil, "dataplane: another gateway, NAME=[BINARY][,ENV=VALUE...][,--FLAG...] (name it in --proxies)")
	fl.IntVar(&dp.GRPCConcurrency, "grpc-concurrency", 64, "dataplane: gRPC calls or streams in flight")
	fl.IntVar(&dp.Rate, "dataplane-rate", 6400, "dataplane: requests/s of the fixed-rate figures (h1-rate, h1-tls-rate), over all their connections")
	fl.IntVar(&dp.RateConnections, "dataplane-rate-connections", 8, "dataplane: h2load connections of the fixed-rate figures (they tick together: more send larger bursts)")
	fl.IntVar(&tlsCfg.H2Clients, "h2-clients", 4, "tls, dataplane: h2load connections (dataplane default 8)")
	fl.IntVar(&tlsCfg.H2Streams, "h2-streams", 100, "tls: h2load concurrent streams per connection")
	fl.StringVar(&tlsCfg.ProfileDir, "profile-dir", "", "tls: write a CPU profile of the gateway during each of its runs here")
	fl.Int64Var(&stream.Size, "body-size", 1<<30, "stream: bytes uploaded and downloaded through each proxy")
	fl.IntVar(&updates, "updates", 200, "config: route changes published")
	fl.StringVar(&proxies, "proxies", "", "comma-separated proxies (default: "+strings.Join(benchgw.AllProxies, ",")+")")
	fl.DurationVar(&cfg.Duration, "duration", 10*time.Second, "length of each wrk run")
	fl.IntVar(&cfg.Rounds, "rounds", 1, "runs per proxy (interleaved); the median is reported")
	fl.IntVar(&cfg.Connections, "connections", 64, "wrk connections")
	fl.IntVar(&cfg.Threads, "threads", 2, "wrk threads")
	fl.IntVar(&cfg.Body, "body", 1024, "upstream answer size in bytes")
	fl.Float64Var(&cfg.LatencyRate, "latency-rate", 0, "fixed rate of the added-latency runs (default: half of nginx's requests/s; negative: skip)")
	fl.DurationVar(&cfg.LatencyDuration, "latency-duration", 5*time.Second, "length of each fixed-rate run")
	fl.StringVar(&providers, "providers", "", "race: JSON file of the providers' capacity per phase (default: the built-in one)")
	fl.StringVar(&policies, "policies", "adaptive,random", "race: policies, each through its own gateway")
	fl.IntVar(&race.Scale, "scale", 8, "race: divide threads, max_concurrent and calls in flight by this")
	fl.DurationVar(&race.Warmup, "warmup", 0, "race: warm-up before phase 0 (default 3s)")
	fl.DurationVar(&race.Phase, "phase", 0, "race: phase length (default: the file's)")
	fl.DurationVar(&race.Timeout, "timeout", 2*time.Second, "race: per-call timeout (the route's timeout too)")
	fl.Uint64Var(&race.Seed, "seed", 1, "race: seed of the service-time draws")
	return cmd
}

// newBenchGatewayServeCmd is the hidden helper the bench starts as separate
// processes: the upstream and the candidate proxies. It prints its address
// on the first line and serves until SIGTERM.
func newBenchGatewayServeCmd() *cobra.Command {
	var mode, listen, upstream string
	var body int
	cmd := &cobra.Command{
		Use:    "gateway-serve",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), ln.Addr().String())
			switch mode {
			case "upstream":
				return benchgw.ServeUpstream(cmd.Context(), ln, body)
			case "grpc-upstream":
				return benchgw.ServeGRPCUpstream(cmd.Context(), ln)
			}
			return benchgw.ServeCandidate(cmd.Context(), mode, ln, upstream)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&mode, "mode", "upstream", "upstream, grpc-upstream or a candidate proxy")
	fl.StringVar(&listen, "listen", "127.0.0.1:0", "listen address")
	fl.StringVar(&upstream, "upstream", "", "candidate's upstream address")
	fl.IntVar(&body, "body", 1024, "upstream answer size")
	return cmd
}

// newBenchGatewayGRPCLoadCmd is the dataplane scenario's gRPC loader, run
// as its own process so that it can be pinned to a core: it prints one
// JSON line (benchgw.GRPCLoadResult).
func newBenchGatewayGRPCLoadCmd() *cobra.Command {
	var cfg benchgw.GRPCLoadConfig
	cmd := &cobra.Command{
		Use:    "gateway-grpc-load",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Mode != "unary" && cfg.Mode != "stream" {
				return fmt.Errorf("unknown --mode %q: unary or stream", cfg.Mode)
			}
			res, err := benchgw.RunGRPCLoad(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Target, "target", "", "host:port (h2c)")
	fl.StringVar(&cfg.Mode, "mode", "unary", "unary or stream")
	fl.IntVar(&cfg.Concurrency, "concurrency", 64, "calls or streams in flight")
	fl.DurationVar(&cfg.Duration, "duration", 5*time.Second, "length of the run")
	fl.Int32Var(&cfg.AnswerBytes, "answer-bytes", 1024, "answer payload size")
	return cmd
}
