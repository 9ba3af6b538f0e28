package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/spf13/cobra"

	benchpush "github.com/sextant-mesh/sextant/internal/bench/push"
)

func init() { benchCmd.AddCommand(newBenchPushCmd()) }

func newBenchPushCmd() *cobra.Command {
	var cfg benchpush.Config
	var protocol, cpuprofile, serverProfile, storeURL string
	var servers int
	var logs, policy bool
	var extra []string
	var serverBin string
	var peer *peerFlags
	cmd := &cobra.Command{
		Use:   "push",
		Short: "Measure how fast the control plane delivers changes to many xDS subscribers",
		Long: `Measures the control plane's push path at the scale where Istio's took over
a minute to deliver one endpoint change (2,200 services of 4 subsets each,
about 8,800 clusters, by default). Loads an in-memory registry (per service a
DestinationRule with blue, green, gray and stable subsets and a VirtualService
matching three of them by header plus a stable default; instances spread over
the subsets), runs the push engine and the ADS server in-process on loopback,
connects the subscribers as real gRPC streams (one connection each,
subscribing to every resource, ACKing every response), then changes
instances at --churn per second while a VirtualService or DestinationRule
changes every --config-every, and prints one JSON object: full recomputation
time, the time from each change's commit until every subscriber had it, and
heap per subscriber. The bench and the control plane share the machine.

With --servers N and --store, the control plane is N real "sextant server"
processes of this binary in cluster mode over the database of --store (use
a fresh database: it must hold no instances); --servers 1 without --store
is one server on the embedded store, in a temporary directory. The
scenario is written to the first server (A) over its HTTP API; the
subscribers are spread round robin over the servers' xDS ports; instances
go down and up at --churn per second (open loop, up to 16 writes in
flight; skipped_ticks counts the ticks that found 16 out), each written to
A only, and the figures are the time from before the write until every
subscriber on every server had it, also per server (per_server, A first).
--subscribers defaults to 100 per server here. Config changes are written
to A only with --config-every (one in flight at a time), which makes
config_* and endpoint_during_config_* figures: with --servers 1 that is
the control plane alone in its own process, its subscribers outside it.
Each server serves ADS from its own catalog, which follows the database
(docs/cluster.md); --server-bin runs the servers from another sextant
binary, to compare two versions in one run.`,
		Example: `  sextant bench push --subscribers 100 --duration 20s
  sextant bench push --subscribers 1000 --protocol delta
  sextant bench push --subscribers 100 --protocol sotw
  sextant bench push --servers 3 --store 'mysql://root@tcp(127.0.0.1:3306)/sx_push' --subscribers 300 --services 200 --endpoints 2000
  sextant bench push --servers 1 --subscribers 200 --protocol sotw --config-every 100ms
  sextant bench push --policy --subscribers 1000 --duration 10s
  sextant bench push --peer istiod --kube-testserver bin/kube-testserver --istiod bin/istiod`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch protocol {
			case "delta":
				cfg.Delta = true
			case "sotw":
			default:
				return errBadProtocol(protocol)
			}
			cfg.Progress = os.Stderr
			if cfg.SidecarImport > 0 && (peer.peer != "" || servers > 0 || storeURL != "" || policy) {
				return fmt.Errorf("--sidecar-import is for the in-process seed scenario, not --peer, --servers or --policy")
			}
			if peer.peer != "" {
				return benchPushPeer(cmd, cfg, peer, serverBin, logs)
			}
			if servers > 0 || storeURL != "" {
				// One server may run on the embedded store (README's
				// server); several share a database.
				if servers < 1 || (storeURL == "" && servers > 1) {
					return fmt.Errorf("--servers %d needs --store (several servers share one database; --servers 1 alone runs on the embedded store), got --servers %d, --store %q", servers, servers, storeURL)
				}
				if cfg.ChurnOnlyDuringConfig && cfg.ConfigEvery <= 0 {
					return fmt.Errorf("--churn-only-during-config with --servers needs --config-every (no config changes are written without it)")
				}
				return benchPushServers(cmd, cfg, servers, storeURL, serverBin, logs, extra, cpuprofile, serverProfile)
			}
			if serverProfile != "" {
				return fmt.Errorf("--server-cpuprofile is for --servers (in-process, --cpuprofile profiles the server and the subscribers together)")
			}
			if cpuprofile != "" {
				f, err := os.Create(cpuprofile)
				if err != nil {
					return err
				}
				defer f.Close()
				cfg.Profile = f
			}
			if policy {
				_, err := benchpush.RunPolicy(cmd.Context(), benchpush.PolicyConfig{Subscribers: cfg.Subscribers,
					Duration: cfg.Duration, ConfigEvery: cfg.ConfigEvery, Progress: os.Stderr, Profile: cfg.Profile}, cmd.OutOrStdout())
				return err
			}
			_, err := benchpush.Run(cmd.Context(), cfg, cmd.OutOrStdout())
			return err
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&cfg.Services, "services", 2200, "services, each with 4 subset clusters")
	fl.IntVar(&cfg.Endpoints, "endpoints", 20000, "instances spread over the services and subsets")
	fl.IntVar(&cfg.Subscribers, "subscribers", 100, "simulated xDS subscribers (one gRPC connection each)")
	fl.StringVar(&protocol, "protocol", "delta", "xDS variant: delta or sotw (state of the world)")
	fl.DurationVar(&cfg.Duration, "duration", 0, "churn time (default 20s)")
	fl.IntVar(&cfg.ChurnPerSec, "churn", 100, "instance changes per second")
	fl.DurationVar(&cfg.ConfigEvery, "config-every", 0, "one VirtualService or DestinationRule change every (default 100ms)")
	fl.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the churn phase to this file (with --servers: of the bench's process, the subscribers)")
	fl.StringVar(&serverProfile, "server-cpuprofile", "", "with --servers: write a CPU profile of server A over the churn to this file (the servers run with --pprof)")
	fl.IntVar(&cfg.Resyncs, "resyncs", 3, "full recomputations to time before the subscribers connect")
	fl.BoolVar(&policy, "policy", false, "the policy scenario instead: --subscribers proxyless gRPC servers (state of the world) each watching its server listener and its service's cluster, one AuthorizationPolicy selecting all of them; AuthorizationPolicy and DestinationRule changes alternate every --config-every (default 200ms) for --duration (default 10s): policy_all_p99_ms is commit to enforced-at-every-server, cluster_all_p99_ms the same streams' cluster delivery")
	fl.BoolVar(&cfg.ChurnOnlyDuringConfig, "churn-only-during-config", false, "change instances only while a config change is on its way to the subscribers (endpoint_during_config_* is then every endpoint change)")
	fl.IntVar(&cfg.SidecarImport, "sidecar-import", 0, "apply a Sidecar (REGISTRY_ONLY) in the subscribers' namespace importing this many of the services: each subscriber is sent those only; their changes are timed, the others' still committed and recomputed")
	fl.IntVar(&servers, "servers", 0, "start this many servers (in cluster mode over --store; one may run on the embedded store) and push through them (see above)")
	fl.StringVar(&storeURL, "store", "", "with --servers: the database the servers share, mysql://user:pass@tcp(host:3306)/database (a fresh one)")
	fl.BoolVar(&logs, "server-logs", false, "with --servers: pass the servers' logs to stderr")
	fl.StringVar(&serverBin, "server-bin", "", "with --servers: run the servers from this sextant binary (another version, to compare in one run) instead of this one")
	fl.StringArrayVar(&extra, "server-arg", nil, "with --servers: an extra argument for every server started (repeat)")
	peer = addPeerFlags(fl)
	return cmd
}

// benchPushServers starts n servers over storeURL, each with its own API and
// xDS address, and runs the scenario through them.
func benchPushServers(cmd *cobra.Command, cfg benchpush.Config, n int, storeURL, bin string, logs bool, extra []string, profile, serverProfile string) error {
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return err
		}
	}
	ctx := cmd.Context()
	sc := benchpush.ServersConfig{Services: cfg.Services, Endpoints: cfg.Endpoints, Delta: cfg.Delta,
		Duration: cfg.Duration, ChurnPerSec: cfg.ChurnPerSec, ConfigEvery: cfg.ConfigEvery,
		ChurnOnlyDuringConfig: cfg.ChurnOnlyDuringConfig, Progress: os.Stderr}
	if cmd.Flags().Changed("subscribers") {
		sc.Subscribers = cfg.Subscribers
	}
	for _, p := range []struct {
		path string
		w    *io.Writer
	}{{profile, &sc.Profile}, {serverProfile, &sc.ServerProfile}} {
		if p.path == "" {
			continue
		}
		f, err := os.Create(p.path)
		if err != nil {
			return err
		}
		defer f.Close()
		*p.w = f
	}
	if serverProfile != "" {
		extra = append(slices.Clip(extra), "--pprof")
	}
	var dataDir string
	if storeURL == "" {
		// Removed after the server stops (defers run in reverse).
		var err error
		if dataDir, err = os.MkdirTemp("", "sextant-bench-push-"); err != nil {
			return err
		}
		defer os.RemoveAll(dataDir)
	}
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			stopProcess(p)
		}
	}()
	for i := range n {
		addr, err := freeLoopbackAddr()
		if err != nil {
			return err
		}
		xaddr, err := freeLoopbackAddr()
		if err != nil {
			return err
		}
		args := []string{"server", "--http", addr, "--xds", xaddr, "--log-level", "warn"}
		if storeURL != "" {
			args = append(args, "--store", storeURL, "--cluster-id", fmt.Sprintf("bench-push-s%d", i+1))
		} else {
			args = append(args, "--data", dataDir)
		}
		args = append(args, extra...)
		p := exec.Command(bin, args...)
		if logs {
			p.Stderr = os.Stderr
		}
		if err := p.Start(); err != nil {
			return err
		}
		procs = append(procs, p)
		u := "http://" + addr
		if err := waitReady(ctx, u, time.Minute); err != nil {
			return err
		}
		sc.HTTP, sc.XDS = append(sc.HTTP, u), append(sc.XDS, xaddr)
		fmt.Fprintf(os.Stderr, "server bench-push-s%d: %s, xDS %s\n", i+1, u, xaddr)
	}
	_, err := benchpush.RunServers(ctx, sc, cmd.OutOrStdout())
	return err
}

type errBadProtocol string

func (e errBadProtocol) Error() string {
	return "unknown --protocol " + string(e) + ": use delta or sotw"
}
