package main

import (
	"os"
	"path/filepath"
	"runtime/pprof"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/internal/bench/callstore"
)

func init() { benchCmd.AddCommand(newBenchCallstoreCmd()) }

func newBenchCallstoreCmd() *cobra.Command {
	var (
		cfg        callstore.Config
		cpuProfile string
	)
	cmd := &cobra.Command{
		Use:   "callstore",
		Short: "Measure the call-log store: writes, window queries and averages, on a fresh store",
		Long: `Measures the store the gateway keeps its call records in (docs/callstore.md),
in three timed phases on a fresh store in --dir:

  1. put      --records records (a time t and a value a each) from --writers
              goroutines; t is a shared counter, even counters are put twice
  2. messages --msg-queries queries for the records in a (t, a) window, from
              --readers goroutines
  3. average  --avg-queries queries for the average a of a window

Every answer is checked against what was put. Prints one JSON object:
records per second and seconds per phase, CPU seconds, bytes on disk, and
a score, N1/T1 + N2/T2 + N3/T3 (records per millisecond summed over the
phases). --workload random draws a uniformly instead of a = t.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Dir == "" {
				cfg.Dir = filepath.Join(os.TempDir(), "sextant-bench-callstore")
			}
			cfg.Progress = cmd.ErrOrStderr()
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
			_, err := callstore.Run(cmd.Context(), cfg, cmd.OutOrStdout())
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Dir, "dir", "", "empty directory for the store (default $TMPDIR/sextant-bench-callstore)")
	fl.BoolVar(&cfg.Keep, "keep", false, "keep the store's files afterwards")
	fl.StringVar(&cfg.Workload, "workload", "demo", "demo (a = t) or random (a uniform in [0, 2^48))")
	fl.Int64Var(&cfg.Records, "records", 30_000_000, "records to put")
	fl.IntVar(&cfg.Writers, "writers", 12, "writer goroutines")
	fl.IntVar(&cfg.Readers, "readers", 12, "reader goroutines")
	fl.IntVar(&cfg.MsgQueries, "msg-queries", 10_000, "Messages queries")
	fl.IntVar(&cfg.AvgQueries, "avg-queries", 40_000, "AvgValue queries")
	fl.Uint64Var(&cfg.Seed, "seed", 1, "seed of the query windows")
	fl.IntVar(&cfg.Options.ChunkRecords, "chunk-records", 0, "store option ChunkRecords (0: default)")
	fl.IntVar(&cfg.Options.BucketRecords, "bucket-records", 0, "store option BucketRecords (0: default)")
	fl.IntVar(&cfg.Options.MaxBufferedRecords, "max-buffered", 0, "store option MaxBufferedRecords (0: default)")
	fl.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	return cmd
}
