package main

import (
	"os"

	"github.com/spf13/cobra"

	benchpush "github.com/sextant-mesh/sextant/internal/bench/push"
)

func init() { benchCmd.AddCommand(newBenchPushCmd()) }

func newBenchPushCmd() *cobra.Command {
	var cfg benchpush.Config
	var protocol, cpuprofile string
	var policy bool
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
heap per subscriber. The bench and the control plane share the machine.`,
		Example: `  sextant bench push --subscribers 100 --duration 20s
  sextant bench push --subscribers 1000 --protocol delta
  sextant bench push --subscribers 100 --protocol sotw
  sextant bench push --policy --subscribers 1000 --duration 10s`,
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
	fl.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the churn phase to this file")
	fl.IntVar(&cfg.Resyncs, "resyncs", 3, "full recomputations to time before the subscribers connect")
	fl.BoolVar(&policy, "policy", false, "the policy scenario instead: --subscribers proxyless gRPC servers (state of the world) each watching its server listener and its service's cluster, one AuthorizationPolicy selecting all of them; AuthorizationPolicy and DestinationRule changes alternate every --config-every (default 200ms) for --duration (default 10s): policy_all_p99_ms is commit to enforced-at-every-server, cluster_all_p99_ms the same streams' cluster delivery")
	fl.BoolVar(&cfg.ChurnOnlyDuringConfig, "churn-only-during-config", false, "change instances only while a config change is on its way to the subscribers (endpoint_during_config_* is then every endpoint change)")
	return cmd
}

type errBadProtocol string

func (e errBadProtocol) Error() string {
	return "unknown --protocol " + string(e) + ": use delta or sotw"
}
