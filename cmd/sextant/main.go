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
	Long: `Sextant is a service-mesh platform in one binary: a service registry, a
control plane that pushes routing config over xDS, a gateway, a placement
scheduler and a web console.

  sextant server               the server: HTTP API and console on
                               http://127.0.0.1:7400, xDS on 127.0.0.1:7402
  sextant register ...         register a service's instance (--keepalive)
  sextant config apply -f ...  routing config (Istio VirtualService,
                               DestinationRule, Gateway)
  sextant gateway              the data plane, configured by the server
  sextant calls stats ...      what the gateway's calls to a service did

The client commands talk to --server (default http://127.0.0.1:7400, or
$SEXTANT_SERVER); "calls" talks to a gateway's admin API. A service is
named NAMESPACE/NAME, or NAME in namespace "default". "sextant bench"
measures a part of Sextant.`,
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
