package main

import (
	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/internal/bench/compat"
)

func init() { benchCmd.AddCommand(newBenchCompatCmd()) }

func newBenchCompatCmd() *cobra.Command {
	var cfg compat.Config
	var quiet bool
	cmd := &cobra.Command{
		Use:   "compat",
		Short: "Load the Consul-compatible API (--consul-api), beside a Consul agent if one is given",
		Long: `Drives a running "sextant server --consul-api" over loopback HTTP as Consul's
clients do, and the same load against --peer (a Consul agent, e.g.
"consul agent -dev" on 127.0.0.1:8500) when given, in alternating rounds,
and prints one JSON object of medians and, with a peer, Sextant's advantage
(its throughput over the peer's, the peer's latency over Sextant's):

  register_deregister_per_s  PUT /v1/agent/service/register then
                             /deregister/{id} from --clients clients
  health_passing_per_s       GET /v1/health/service/NAME?passing of a service
                             of --instances instances, --clients clients
  blocking_wake_p50/p99_ms   from a register's answer to the answer of the
                             blocking query (index) it wakes
  kv_put_per_s, kv_get_per_s Consul KV puts (64-byte values) and gets of one
                             of --kv-keys keys, from --clients clients
  kv_watch_wake_p50/p99_ms   a blocking read parked on each of --kv-keys
                             keys: from a put's answer to its watcher's
  kv_vs_instances            the KV figures over the instance figures of
                             the same rounds (a put against one instance
                             write, CPU against CPU, wake against wake)

With --metrics (Sextant's /metrics URL), the server's CPU per register, per
health read, per KV put and per KV get too, steadier than throughput on a
shared machine.

The load generator shares the machine with the servers. What it registers is
deregistered at the end, and the KV keys (under bench-compat-kv/) deleted.`,
		Example: `  sextant server --consul-api 127.0.0.1:8501 &
  sextant bench compat --server 127.0.0.1:8501 --metrics http://127.0.0.1:7400/metrics --rounds 3
  sextant bench compat --server 127.0.0.1:8501 --peer 127.0.0.1:8500 --clients 64`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !quiet {
				cfg.Progress = cmd.ErrOrStderr()
			}
			_, err := compat.Run(cmd.Context(), cfg, cmd.OutOrStdout())
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Server, "server", "127.0.0.1:8500", "Sextant's --consul-api address")
	fl.StringVar(&cfg.Peer, "peer", "", "another Consul API to measure the same way (a Consul agent's HTTP address); empty: none")
	fl.StringVar(&cfg.Metrics, "metrics", "", "Sextant's /metrics URL (e.g. http://127.0.0.1:7400/metrics): report the server's CPU per request")
	fl.StringVar(&cfg.Token, "token", "", "sent as X-Consul-Token to both (a Sextant token with instances:write on --consul-namespace)")
	fl.IntVar(&cfg.Clients, "clients", 64, "concurrent clients")
	fl.DurationVar(&cfg.Duration, "duration", 5e9, "how long each throughput scenario runs per round")
	fl.IntVar(&cfg.Instances, "instances", 100, "instances of the service the health reads read")
	fl.IntVar(&cfg.Wakes, "wakes", 200, "blocking-query wake-ups timed per round")
	fl.IntVar(&cfg.Rounds, "rounds", 3, "rounds, alternating the servers")
	fl.IntVar(&cfg.KVKeys, "kv-keys", 1000, "KV keys the gets read and the watch parks a blocking read on")
	fl.StringVar(&cfg.KVWatchServer, "kv-watch-server", "", "another server of the cluster (its --consul-api) for the blocking queries (KV watchers, the health query) to wait on while the writes go to --server; empty: --server")
	fl.BoolVar(&quiet, "quiet", false, "no progress bars on stderr")
	return cmd
}
