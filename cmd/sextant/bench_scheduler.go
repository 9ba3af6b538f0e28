package main

import (
	"os"
	"runtime/pprof"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/internal/bench/scheduler"
)

func init() { benchCmd.AddCommand(newBenchSchedulerCmd()) }

func newBenchSchedulerCmd() *cobra.Command {
	var (
		cfg        scheduler.Config
		cpuProfile string
		quiet      bool
	)
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Measure the placement scheduler: placements per second on 5,000 and 50,000 nodes",
		Long: `Builds clusters like kube-scheduler's scheduler_perf (nodes of 4 cpu, 32Gi,
110 pods, in 3 zones and 50 racks; --init-pods placements made first) and
places --pods workloads per scenario, one Place call per --batch workloads,
scoring every feasible node:

  basic                   the default pod (100m cpu, 500Mi)
  node_affinity           required node affinity to 2 of the 3 zones
  topology_spreading      zone spread (maxSkew 1, DoNotSchedule) + hostname (ScheduleAnyway)
  pod_anti_affinity       required anti-affinity to its own kind on hostname
  preferred_pod_affinity  preferred affinity to its own kind on hostname
  startup                 load --start-nodes nodes and --start-placements placements
                          from encoded records into the engine alone
  server_startup          write them into a store and start a real "sextant
                          server" over it: seconds until /readyz, peak RSS
  http                    (with --server, alone by default) create --http-nodes
                          nodes on that server and place --http-pods pods from
                          --clients concurrent clients, --http-batch per request,
                          then delete the nodes again (unless --keep)

Prints one JSON object: placements_per_s and p50/p99 decision ms per
scenario and node count, load_seconds and rss_bytes for startup,
ready_seconds and peak_rss_bytes for server_startup, placements_per_s and
p99_request_ms for http, and the load average before and after.`,
		Example: `  sextant bench scheduler --pods 5000
  sextant bench scheduler --scenarios server_startup
  sextant bench scheduler --server http://127.0.0.1:7400 --http-batch 100`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !quiet {
				cfg.Progress = cmd.ErrOrStderr()
			}
			if bin, err := os.Executable(); err == nil {
				cfg.Binary = bin
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			_, err := scheduler.Run(cmd.Context(), cfg, cmd.OutOrStdout())
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&cfg.Scenarios, "scenarios", nil, "scenarios to run (default all)")
	fl.IntSliceVar(&cfg.Nodes, "nodes", []int{5000, 50000}, "cluster sizes")
	fl.IntVar(&cfg.Pods, "pods", 10000, "workloads placed per scenario (pod_anti_affinity: at most 4/5 of the nodes)")
	fl.IntVar(&cfg.InitPods, "init-pods", 0, "placements made before measuring (0: one per node)")
	fl.IntVar(&cfg.Batch, "batch", 1, "workloads per Place call")
	fl.IntVar(&cfg.StartNodes, "start-nodes", 50000, "nodes of the startup scenario")
	fl.IntVar(&cfg.StartPlacements, "start-placements", 500000, "placements of the startup scenario")
	fl.BoolVarP(&quiet, "quiet", "q", false, "no progress bars")
	fl.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fl.StringVar(&cfg.HTTP.Server, "server", "", "run the http scenario against this server URL")
	fl.IntVar(&cfg.HTTP.Nodes, "http-nodes", 5000, "nodes the http scenario creates")
	fl.IntVar(&cfg.HTTP.Pods, "http-pods", 20000, "pods the http scenario places")
	fl.IntVar(&cfg.HTTP.Clients, "clients", 32, "concurrent clients of the http scenario")
	fl.IntVar(&cfg.HTTP.Batch, "http-batch", 1, "pods per request of the http scenario (a List when > 1)")
	fl.BoolVar(&cfg.HTTP.Keep, "keep", false, "leave the http scenario's nodes and placements on the server")
	return cmd
}
