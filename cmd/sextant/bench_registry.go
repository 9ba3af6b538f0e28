package main

import (
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/internal/bench/registry"
)

func init() { benchCmd.AddCommand(newBenchRegistryCmd()) }

func newBenchRegistryCmd() *cobra.Command {
	var (
		cfg       registry.Config
		scenarios string
		quiet     bool
		conn      connFlags
		cmp       compareFlags
	)
	cmd := &cobra.Command{
		Use:   "registry",
		Short: "Load a running registry server: register, batch, heartbeat, query, changes, watch",
		Long: `Drives a running "sextant server" over loopback HTTP and prints one JSON
object of figures (throughput and p50/p99 latency per scenario, with the
targets next to them). Progress goes to stderr.

Scenarios, in order (select with --scenarios):
  register   single-instance registers from --conns connections for --duration
  batch      --batch-size instances per register from --batch-conns connections
  heartbeat  --heartbeat-ids ids per heartbeat over --heartbeat-pool instances
  query      GET of a --query-size service with a 2-term selector, --query-conns connections
  changes    with --changes-total instances held, time GET /v1/changes returning --changes-count changes
  watch      time from a register's answer to the blocking query's answer

Instances carry 16 metadata entries of 10-byte keys and values; a service's
instances cycle through 500 metadata sets, as the replicas of a few
deployments would, unless --unique-metadata gives each its own. Everything
goes into one namespace, bench-<unix time> by default, and is deregistered at
the end unless --keep. The load generator shares the machine with the server:
read the figures with that in mind.`,
		Example: `  sextant server --data /tmp/sx &
  sextant bench registry --server http://127.0.0.1:7400
  sextant bench registry --scenarios register,query --duration 5s --conns 128

  # two servers side by side (ACLs off vs on), alternating, 3 rounds: medians and ratios
  sextant bench registry --server http://127.0.0.1:7400 \
      --compare-server http://127.0.0.1:7401 --compare-token "$TOKEN" --rounds 3 --scenarios register,query`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if scenarios != "" {
				cfg.Scenarios = strings.Split(scenarios, ",")
			}
			if !quiet {
				cfg.Progress = cmd.ErrOrStderr()
			}
			var err error
			cfg.Token = conn.token
			if cfg.TLS, err = clientTLS(conn.caFile, conn.certFile, conn.keyFile); err != nil {
				return err
			}
			if cmp.server != "" {
				return compareRegistry(cmd.Context(), cfg, cmp, cmd.OutOrStdout())
			}
			_, err = registry.Run(cmd.Context(), cfg, cmd.OutOrStdout())
			return err
		},
	}
	def := os.Getenv("SEXTANT_SERVER")
	if def == "" {
		def = defaultServer
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Server, "server", def, "registry server URL (env SEXTANT_SERVER)")
	fl.StringVar(&scenarios, "scenarios", "", "comma-separated scenarios (default: "+strings.Join(registry.Scenarios, ",")+")")
	fl.StringVar(&cfg.Namespace, "namespace", "", "namespace for everything registered (default bench-<unix time>)")
	fl.DurationVar(&cfg.Duration, "duration", 0, "length of each throughput scenario (default 10s)")
	fl.IntVar(&cfg.MaxInstances, "max-instances", 0, "most instances one throughput scenario registers (default 1000000)")
	fl.IntVar(&cfg.Conns, "conns", 0, "register: concurrent connections (default 256)")
	fl.IntVar(&cfg.BatchConns, "batch-conns", 0, "batch and preloads: concurrent connections (default 4)")
	fl.IntVar(&cfg.BatchSize, "batch-size", 0, "batch: instances per request (default 500)")
	fl.BoolVar(&cfg.UniqueMetadata, "unique-metadata", false, "register and batch: metadata unique to each instance (default: a service's instances cycle through 500 sets)")
	fl.IntVar(&cfg.HeartbeatConns, "heartbeat-conns", 0, "heartbeat: concurrent connections (default 4)")
	fl.IntVar(&cfg.HeartbeatIDs, "heartbeat-ids", 0, "heartbeat: ids per request (default 1000)")
	fl.IntVar(&cfg.HeartbeatPool, "heartbeat-pool", 0, "heartbeat: instances heartbeated (default 100000)")
	fl.IntVar(&cfg.QueryConns, "query-conns", 0, "query: concurrent connections (default 64)")
	fl.IntVar(&cfg.QuerySize, "query-size", 0, "query: instances in the queried service (default 100)")
	fl.BoolVar(&cfg.QueryGzip, "query-gzip", false, "query: ask for gzip answers (Accept-Encoding: gzip); they are read, not inflated")
	fl.IntVar(&cfg.ChangesTotal, "changes-total", 0, "changes: instances the registry holds before the changes (default 200000)")
	fl.IntVar(&cfg.ChangesCount, "changes-count", 0, "changes: changes the timed call returns (default 5000)")
	fl.IntVar(&cfg.ChangesRounds, "changes-rounds", 0, "changes: timed calls (default 50)")
	fl.IntVar(&cfg.WatchRounds, "watch-rounds", 0, "watch: rounds (default 300)")
	fl.BoolVar(&cfg.Keep, "keep", false, "leave the registered instances in place")
	fl.BoolVarP(&quiet, "quiet", "q", false, "no progress bars")
	conn.add(fl)
	fl.StringVar(&cmp.server, "compare-server", "", "a second server to measure side by side with --server (rounds alternate between them)")
	fl.StringVar(&cmp.token, "compare-token", "", "ACL token for --compare-server")
	fl.IntVar(&cmp.rounds, "rounds", 3, "with --compare-server: rounds of every scenario on each server")
	return cmd
}
