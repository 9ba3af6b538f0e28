package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	benchreg "github.com/sextant-mesh/sextant/internal/bench/registry"
)

func init() { benchCmd.AddCommand(newBenchClusterCmd()) }

func newBenchClusterCmd() *cobra.Command {
	var (
		cfg       benchreg.ClusterConfig
		storeURL  string
		n         int
		scenarios string
		quiet     bool
		logs      bool
		extra     []string
	)
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Run several servers over one MySQL/MariaDB database and load them: register, cross-server watch, join",
		Long: `Starts --servers "sextant server" processes of this binary over the database
of --store (docs/cluster.md), loads them over loopback HTTP and prints one
JSON object of figures. Progress goes to stderr. The servers are stopped at
the end; what was registered is deregistered unless --keep.

Scenarios, in order (select with --scenarios):
  register    single-instance registers from --conns connections spread
              round-robin over the servers, for --duration
  crosswatch  a blocking query parked on one server, a register through
              another: time until the query answers (--watch-rounds rounds)
  join        --join-instances instances registered, then one more server
              starts on the database: time until its /readyz answers 200

Every server, the database and the load generator share this machine:
read the figures with that in mind.`,
		Example: `  sextant bench cluster --store 'mysql://root@tcp(127.0.0.1:3306)/sextant_bench'
  sextant bench cluster --store 'mysql://root@tcp(127.0.0.1:3306)/sx' --scenarios register --duration 5s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if storeURL == "" {
				return fmt.Errorf("--store is required: the database the servers share")
			}
			if n < 2 {
				return fmt.Errorf("--servers %d: want at least 2", n)
			}
			if scenarios != "" {
				cfg.Scenarios = strings.Split(scenarios, ",")
			}
			if !quiet {
				cfg.Progress = os.Stderr
			}
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var procs []*exec.Cmd
			defer func() {
				for _, p := range procs {
					stopProcess(p)
				}
			}()
			start := func(ctx context.Context, name string) (string, *exec.Cmd, error) {
				addr, err := freeLoopbackAddr()
				if err != nil {
					return "", nil, err
				}
				args := append([]string{"server", "--store", storeURL, "--http", addr, "--xds", "",
					"--cluster-id", name, "--log-level", "warn"}, extra...)
				p := exec.Command(bin, args...)
				if logs {
					p.Stderr = os.Stderr
				}
				if err := p.Start(); err != nil {
					return "", nil, err
				}
				return "http://" + addr, p, nil
			}
			for i := range n {
				u, p, err := start(ctx, fmt.Sprintf("bench-s%d", i+1))
				if err != nil {
					return err
				}
				procs = append(procs, p)
				if err := waitReady(ctx, u, time.Minute); err != nil {
					return err
				}
				cfg.Servers = append(cfg.Servers, u)
				fmt.Fprintf(os.Stderr, "server bench-s%d: %s\n", i+1, u)
			}
			cfg.Join = func(ctx context.Context) (string, func(), error) {
				u, p, err := start(ctx, "bench-join")
				if err != nil {
					return "", nil, err
				}
				return u, func() { stopProcess(p) }, nil
			}
			_, err = benchreg.RunCluster(ctx, cfg, cmd.OutOrStdout())
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&storeURL, "store", "", "the database the servers share: mysql://user:pass@tcp(host:3306)/database")
	fl.IntVar(&n, "servers", 3, "servers to start")
	fl.StringVar(&scenarios, "scenarios", "", "comma-separated scenarios (default: "+strings.Join(benchreg.ClusterScenarios, ",")+")")
	fl.StringVar(&cfg.Namespace, "namespace", "", "namespace for everything registered (default bench-cluster-<unix time>)")
	fl.DurationVar(&cfg.Duration, "duration", 0, "register: length (default 10s)")
	fl.IntVar(&cfg.Conns, "conns", 0, "register: connections over all servers (default 256)")
	fl.IntVar(&cfg.WatchRounds, "watch-rounds", 0, "crosswatch: rounds (default 300)")
	fl.IntVar(&cfg.JoinInstances, "join-instances", 0, "join: instances held when the new server starts (default 200000)")
	fl.BoolVar(&cfg.Keep, "keep", false, "leave the registered instances in place")
	fl.BoolVarP(&quiet, "quiet", "q", false, "no progress bars")
	fl.BoolVar(&logs, "server-logs", false, "pass the servers' logs to stderr")
	fl.StringArrayVar(&extra, "server-arg", nil, "an extra argument for every server started (repeat: --server-arg=--pprof)")
	return cmd
}

func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func waitReady(ctx context.Context, u string, limit time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		resp, err := hc.Get(u + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
	}
	return fmt.Errorf("server %s not ready in %v", u, limit)
}

func stopProcess(p *exec.Cmd) {
	if p.Process == nil || p.ProcessState != nil {
		return
	}
	p.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { p.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		p.Process.Kill()
		<-done
	}
}
