package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/internal/bench/balancer"
)

func init() { benchCmd.AddCommand(newBenchBalancerCmd()) }

func newBenchBalancerCmd() *cobra.Command {
	var (
		providers string
		policies  string
		cfg       balancer.Config
	)
	cmd := &cobra.Command{
		Use:   "balancer",
		Short: "Compare load-balancing policies on providers whose capacity changes every few seconds",
		Long: `Compares the load-balancing policies (adaptive, peak_ewma, least_request,
round_robin, weighted_round_robin, random, and "oracle", which is told the
true capacities: the yardstick) on three HTTP providers served in this
process on loopback. Each provider's capacity (worker threads, how many
calls it accepts at once, its service time) changes at every phase (ten
phases of 6 s by default, from the --providers file, divided by --scale).
Each policy in turn keeps 1024/--scale calls in flight for every phase after
a warm-up; a call a provider refuses counts as a failure.

Prints one JSON object per policy: successful calls, their ratio to the most
the providers could have served (the ceiling), rejections, latency
percentiles, and how long the policy took to adapt after each phase change.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := balancer.LoadProviders(providers)
			if err != nil {
				return err
			}
			cfg.Providers = f
			if policies != "" {
				cfg.Policies = strings.Split(policies, ",")
			}
			cfg.Progress = cmd.ErrOrStderr()
			_, err = balancer.Run(cmd.Context(), cfg, cmd.OutOrStdout())
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&providers, "providers", "", "JSON file of the providers' capacity per phase (default: the built-in one, internal/bench/balancer/testdata)")
	fl.StringVar(&policies, "policies", "", "comma-separated policies (default: all, plus oracle)")
	fl.IntVar(&cfg.Scale, "scale", 8, "divide threads, max_concurrent and calls in flight (1024) by this")
	fl.DurationVar(&cfg.Warmup, "warmup", 0, "warm-up before phase 0 (default 3s)")
	fl.DurationVar(&cfg.Phase, "phase", 0, "phase length (default: the file's phase_seconds)")
	fl.DurationVar(&cfg.Timeout, "timeout", 0, "per-call timeout (default 2s)")
	fl.Uint64Var(&cfg.Seed, "seed", 1, "seed of the service-time draws, the same for every policy")
	return cmd
}
