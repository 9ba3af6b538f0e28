package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/httpapi"
	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

type serverFlags struct {
	data      string
	http      string
	logFormat string
	logLevel  string
	logSize   int
	pprof     bool
	drain     time.Duration
}

func init() {
	var f serverFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the Sextant registry server",
		Long: `Run the Sextant registry server on the embedded store.

The server creates or opens the store in --data, loads every instance into
memory, and serves the HTTP API (docs/api.md) on --http. On SIGINT or SIGTERM
it stops accepting connections, lets in-flight requests finish (up to
--drain), and closes the store.`,
		Example: `  sextant server
  sextant server --data /var/lib/sextant --http 0.0.0.0:7400 --log-format json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServer(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.data, "data", "./data", "directory of the embedded store (created if missing)")
	fl.StringVar(&f.http, "http", "127.0.0.1:7400", "address the HTTP API listens on")
	fl.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fl.IntVar(&f.logSize, "change-log", 1<<18, "changes kept for /v1/changes and watches before older ones are compacted")
	fl.BoolVar(&f.pprof, "pprof", false, "serve /debug/pprof/ on the HTTP address")
	fl.DurationVar(&f.drain, "drain", 30*time.Second, "how long to wait for in-flight requests on shutdown")
	rootCmd.AddCommand(cmd)
}

func newLogger(format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

func runServer(ctx context.Context, f serverFlags) error {
	log, err := newLogger(f.logFormat, f.logLevel)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.data, 0o755); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	api := httpapi.New(httpapi.Options{Logger: log.With("component", "httpapi"), Metrics: metrics, Gatherer: metrics})
	mux := http.NewServeMux()
	mux.Handle("/", api)
	if f.pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}

	// Listen first so /healthz and /readyz answer while the catalog loads.
	ln, err := net.Listen("tcp", f.http)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", f.http, err)
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(api.Shutdown)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("listening", "http", ln.Addr().String(), "data", f.data)

	st, err := embedded.Open(f.data)
	if err != nil {
		srv.Close()
		return err
	}
	reg, err := registry.Open(st, registry.Options{
		Catalog: catalog.Options{LogSize: f.logSize},
		Logger:  log.With("component", "registry"),
		Metrics: metrics,
	})
	if err != nil {
		srv.Close()
		st.Close()
		return err
	}
	api.SetRegistry(reg)
	// The load's garbage (raw records, decode buffers) is as large as the
	// catalog: hand it back to the OS now rather than over many GC cycles,
	// after the server is already answering.
	go debug.FreeOSMemory()
	log.Info("ready", "instances", reg.Catalog().Len(), "revision", reg.Catalog().Revision())

	select {
	case <-ctx.Done():
		log.Info("shutting down: draining requests", "drain", f.drain)
	case err = <-served:
		log.Error("http server stopped", "err", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), f.drain)
	defer cancel()
	if serr := srv.Shutdown(sctx); serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		log.Warn("drain incomplete", "err", serr)
		srv.Close()
	}
	reg.Close()
	if cerr := st.Close(); cerr != nil {
		return cerr
	}
	log.Info("stopped")
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
