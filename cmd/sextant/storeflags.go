package main

import (
	"fmt"
	"log/slog"
	"math"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

// registerStoreFlags adds the embedded store's disk flags (docs/robustness.md,
// "Disk full" and "A damaged write-ahead log").
func registerStoreFlags(fl *pflag.FlagSet, f *serverFlags) {
	fl.StringVar(&f.dataReserve, "data-reserve", "256MiB", "free space the embedded store keeps on the file system of --data (e.g. 256MiB, 1GiB, off): below it writes answer 507 and resume by themselves once space is freed; a start without room to replay the log opens read-only")
	fl.BoolVar(&f.repair, "repair", false, "start on a write-ahead log damaged before its end by truncating it at the damage, dropping the commits after it (logged); without it such a log stops the start")
}

// parseDataReserve reads --data-reserve: a size (parseMemoryLimit's units)
// or off (-1, the check turned off); empty (serverFlags built in code) is
// the store's default (0).
func parseDataReserve(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := parseMemoryLimit(s)
	if err != nil {
		return 0, fmt.Errorf("--data-reserve %q: want a positive size such as 256MiB or 1GiB, or off", s)
	}
	if n == math.MaxInt64 {
		return -1, nil
	}
	return n, nil
}

// openEmbedded opens the embedded store in --data, says what a repair
// dropped, or that it opened read-only for lack of space, and exports its
// disk's state.
func openEmbedded(f serverFlags, log *slog.Logger, metrics prometheus.Registerer) (*embedded.Store, error) {
	reserve, err := parseDataReserve(f.dataReserve)
	if err != nil {
		return nil, err
	}
	st, err := embedded.OpenWith(f.data, embedded.Options{Reserve: reserve, Repair: f.repair})
	if err != nil {
		return nil, err
	}
	if r := st.Repaired(); r != nil {
		log.Warn("repaired the store: "+r.String(), "file", r.File, "offset", r.Offset, "dropped_commits", r.Lost,
			"first_dropped_revision", r.FirstLost, "last_dropped_revision", r.LastLost)
	}
	if st.ReadOnly() {
		log.Warn("not enough free space to replay the store's log: the store is open read-only; reads and xDS are served, writes answer 507 until space is freed, then the store reopens for writing by itself",
			"data", f.data, "reserve", f.dataReserve)
	}
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sextant_store_disk_free_bytes",
			Help: "Free space of the file system of --data; writes are refused below --data-reserve."},
			func() float64 { n, _ := st.FreeBytes(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sextant_store_read_only",
			Help: "1 while the store is open read-only for lack of space to replay its log."},
			func() float64 { return boolGauge(st.ReadOnly()) }),
	} {
		if err := metrics.Register(c); err != nil {
			st.Close()
			return nil, fmt.Errorf("register store metrics: %w", err)
		}
	}
	return st, nil
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
