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
		Short: "Race load-balancing policies against providers whose capacity changes (seed 003)",
		Long: `Starts the race's three providers in-process on loopback (threads and
max_concurrent per 6-second phase from the providers file, divided by
--scale), keeps 1024/scale calls in flight through each policy for the ten
phases after a warm-up, and prints one JSON object per policy.`,
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
	fl.StringVar(&providers, "providers", "", "providers file (default: the race's own, built in)")
	fl.StringVar(&policies, "policies", "", "comma-separated policies (default: all, plus oracle)")
	fl.IntVar(&cfg.Scale, "scale", 8, "divide threads, max_concurrent and calls in flight (1024) by this")
	fl.DurationVar(&cfg.Warmup, "warmup", 0, "warm-up before phase 0 (default 3s)")
	fl.DurationVar(&cfg.Phase, "phase", 0, "phase length (default: the file's phase_seconds)")
	fl.DurationVar(&cfg.Timeout, "timeout", 0, "per-call timeout (default 2s)")
	fl.Uint64Var(&cfg.Seed, "seed", 1, "seed of the service-time draws, the same for every policy")
	return cmd
}
