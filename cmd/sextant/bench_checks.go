package main

import (
	"time"

	"github.com/spf13/cobra"

	benchchecks "github.com/sextant-mesh/sextant/internal/bench/checks"
	"github.com/sextant-mesh/sextant/internal/bench/report"
)

func init() { benchCmd.AddCommand(newBenchChecksCmd()) }

func newBenchChecksCmd() *cobra.Command {
	cfg := benchchecks.Config{}
	var quiet bool
	cmd := &cobra.Command{
		Use:   "checks",
		Short: "Measure what a server's active health checks cost: its CPU with N instances' HTTP checks",
		Long: `Serves --instances HTTP health check targets from this process, registers
as many instances on --server (namespace bench-checks) and measures the
server's CPU (its /metrics process_cpu_seconds_total) over --window twice:
the instances without checks (the idle floor), then with an HTTP check each
at --interval, once every target has been probed. Prints one JSON object;
deregisters the instances at the end. The server, the targets and anything
else running share this machine: read the figures with that in mind
(docs/perf/health.md).`,
		Example: `  sextant bench checks --server http://127.0.0.1:7400 --instances 10000 --interval 10s --window 60s`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !quiet {
				cfg.Progress = cmd.ErrOrStderr()
			}
			res, err := benchchecks.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			return report.Print(cmd.OutOrStdout(), res)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Server, "server", "http://127.0.0.1:7400", "the server's base URL")
	fl.IntVar(&cfg.Instances, "instances", 10000, "instances, one HTTP check each")
	fl.DurationVar(&cfg.Interval, "interval", 10*time.Second, "the checks' interval")
	fl.DurationVar(&cfg.Window, "window", 60*time.Second, "each measurement's length")
	fl.IntVar(&cfg.Listeners, "listeners", 64, "target listeners on loopback (instances share them round-robin)")
	fl.BoolVar(&quiet, "quiet", false, "no progress bars")
	return cmd
}
