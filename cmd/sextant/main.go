// Command sextant is the single binary of the Sextant service-mesh platform:
// the server, the command-line client and the benchmarks. It only parses
// flags and wires packages together.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// rootCmd is the top of the command tree; subcommands attach in init
// functions of their own files.
var rootCmd = &cobra.Command{
	Use:   "sextant",
	Short: "Sextant: service registry, control plane, load balancing and call logs in one binary",
	Long: `Sextant is a service-mesh platform in one binary.

Run "sextant server" to start the registry, then use the client commands
(instances, services, watch) against it, or "sextant bench" to measure it.`,
	SilenceUsage:  true,
	SilenceErrors: true,
}

// benchCmd groups the load generators; each part adds its own subcommand.
var benchCmd = &cobra.Command{
	Use:   "bench",
	Short: "Measure a part of Sextant and print one JSON object of figures",
	Long: `Measure one part of Sextant on this machine and print one JSON object of
figures, each named with its unit (register_per_s, p99_ms, rss_bytes), with
progress on stderr. Most parts run what they measure in this process, on
loopback; "registry" and "scheduler --server" load a server you started.
The load generator shares the machine with what it measures: compare
figures within one run or between runs on the same machine.
docs/benchmarks.md holds the figures of record and the command of each.`,
}

func init() {
	rootCmd.AddCommand(benchCmd)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := rootCmd.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sextant:", err)
		os.Exit(1)
	}
}
