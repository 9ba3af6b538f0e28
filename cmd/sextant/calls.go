package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/client"
)

// callsFlags are the flags of "sextant calls": which gateway, which calls.
type callsFlags struct {
	admin, output     string
	service, endpoint string
	since             time.Duration
	from, to          string
	minLat, maxLat    string
	limit             int
	step              string
}

func init() { rootCmd.AddCommand(newCallsCmd()) }

func newCallsCmd() *cobra.Command {
	var f callsFlags
	cmd := &cobra.Command{
		Use:   "calls",
		Short: "Query a gateway's call log (calls and per-step statistics)",
		Long: `Query the call log of a running gateway through its admin API
(--gateway, default http://127.0.0.1:7403: the address of the gateway's
--admin flag).

--service names the service called: prod/orders, or orders for
default/orders. Times are RFC 3339 or unix milliseconds; without --from,
the window is the last --since (default 15m) up to now.`,
	}
	def := os.Getenv("SEXTANT_GATEWAY_ADMIN")
	if def == "" {
		def = "http://127.0.0.1:7403"
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.admin, "gateway", def, "gateway admin URL (env SEXTANT_GATEWAY_ADMIN)")
	pf.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	pf.StringVar(&f.service, "service", "", `service: NAMESPACE/NAME, or NAME in namespace "default" (required)`)
	pf.StringVar(&f.endpoint, "endpoint", "", "only calls to this endpoint (host:port)")
	pf.DurationVar(&f.since, "since", 15*time.Minute, "window length ending now, when --from is not given")
	pf.StringVar(&f.from, "from", "", "window start")
	pf.StringVar(&f.to, "to", "", "window end (default now)")

	list := &cobra.Command{
		Use:     "list",
		Short:   "List the calls of a service, oldest first",
		Example: `  sextant calls list --service orders --since 5m --min-latency 100ms`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q, err := f.window()
			if err != nil {
				return err
			}
			set(q, "min_latency", f.minLat)
			set(q, "max_latency", f.maxLat)
			if f.limit > 0 {
				q.Set("limit", fmt.Sprint(f.limit))
			}
			// The gateway's own types: a field the table shows cannot drift
			// from the key the gateway writes.
			var out struct {
				Calls     []client.Call `json:"calls"`
				Truncated bool          `json:"truncated"`
			}
			raw, err := f.get("/v1/calls", q, &out)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if f.output == "json" {
				_, err := w.Write(raw)
				return err
			}
			tw := newTable(w)
			fmt.Fprintln(tw, "START\tLATENCY\tSTATUS\tENDPOINT\tSUBSET\tRETRIES\tBYTES\tREASON\tMETHOD\tPATH\tPRINCIPAL")
			for _, c := range out.Calls {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", c.Start.Local().Format("15:04:05.000"),
					time.Duration(c.LatencyUs)*time.Microsecond, c.Status, orDash(c.Endpoint), orDash(c.Subset), c.Retries, c.BytesOut, orDash(c.Reason),
					orDash(c.Method), orDash(c.Path), orDash(c.Principal))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if out.Truncated {
				fmt.Fprintln(cmd.ErrOrStderr(), "(more calls in the window: raise --limit or narrow it)")
			}
			return nil
		},
	}
	list.Flags().StringVar(&f.minLat, "min-latency", "", "only calls at least this slow (e.g. 100ms)")
	list.Flags().StringVar(&f.maxLat, "max-latency", "", "only calls at most this slow")
	list.Flags().IntVar(&f.limit, "limit", 0, "at most this many calls (default 1000)")

	stats := &cobra.Command{
		Use:   "stats",
		Short: "Count, errors and latency percentiles of a service per step",
		Long: `Count, errors and latency percentiles of a service's calls per step of
the window. The table starts at the first step with a call (a window
reaching back before the gateway started opens with no rows of zeros);
-o json is the gateway's answer, every step included. A service the
gateway never recorded a call of is an error ("no calls recorded for
default/nosuch"), not a table of zeros.`,
		Example: `  sextant calls stats --service orders --since 1h --step 1m`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q, err := f.window()
			if err != nil {
				return err
			}
			set(q, "step", f.step)
			var out struct {
				Service string            `json:"service"`
				Count   int64             `json:"count"`
				Errors  int64             `json:"errors"`
				Steps   []client.CallStep `json:"steps"`
			}
			raw, err := f.get("/v1/calls/stats", q, &out)
			if err != nil {
				return err
			}
			if out.Count == 0 {
				// A misspelt service answers zeros like an idle one: tell
				// them apart by whether the gateway ever recorded a call.
				// A gateway that cannot list its services (an older one)
				// leaves the zeros as they are.
				if known, err := f.recorded(out.Service); err == nil && !known {
					return fmt.Errorf("no calls recorded for %s", out.Service)
				}
			}
			w := cmd.OutOrStdout()
			if f.output == "json" {
				_, err := w.Write(raw)
				return err
			}
			tw := newTable(w)
			fmt.Fprintln(tw, "STEP\tCOUNT\tERRORS\tAVG_MS\tP50_MS\tP90_MS\tP99_MS")
			for _, s := range trimLeadingSteps(out.Steps) {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\n", s.Start.Local().Format("01-02 15:04:05"),
					s.Count, s.Errors, s.AvgMs, s.P50Ms, s.P90Ms, s.P99Ms)
			}
			fmt.Fprintf(tw, "total\t%d\t%d\t\t\t\t\n", out.Count, out.Errors)
			if err := tw.Flush(); err != nil {
				return err
			}
			if out.Count == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "(no calls to %s in the window)\n", out.Service)
			}
			return nil
		},
	}
	stats.Flags().StringVar(&f.step, "step", "", "step length (default: the window / 60)")
	cmd.AddCommand(list, stats)
	return cmd
}

// trimLeadingSteps drops the steps before the first with a call: a window
// reaching back before the gateway started (or the service's first call)
// would otherwise open with rows of zeros.
func trimLeadingSteps(steps []client.CallStep) []client.CallStep {
	for i, s := range steps {
		if s.Count > 0 {
			return steps[i:]
		}
	}
	return nil
}

// recorded tells whether the gateway's call log holds any call of service
// (as the gateway named it in its answer), at any time.
func (f *callsFlags) recorded(service string) (bool, error) {
	var out struct {
		Services []string `json:"services"`
	}
	if _, err := f.get("/v1/calls/services", url.Values{}, &out); err != nil {
		return false, err
	}
	return slices.Contains(out.Services, service), nil
}

func (f *callsFlags) window() (url.Values, error) {
	if f.output != "table" && f.output != "json" {
		return nil, fmt.Errorf("unknown --output %q: use table or json", f.output)
	}
	if f.service == "" {
		return nil, fmt.Errorf("--service is required")
	}
	// Sent as given: the gateway reads NAME as default/NAME and keeps a
	// call-log partition of exactly that name (another control plane's
	// cluster names, which are no Sextant service names) as it is.
	q := url.Values{"service": {f.service}}
	set(q, "endpoint", f.endpoint)
	to := f.to
	if to == "" {
		to = fmt.Sprint(time.Now().UnixMilli())
	}
	from := f.from
	if from == "" {
		from = fmt.Sprint(time.Now().Add(-f.since).UnixMilli())
	}
	q.Set("from", from)
	q.Set("to", to)
	return q, nil
}

func (f *callsFlags) get(path string, q url.Values, out any) ([]byte, error) {
	resp, err := http.Get(f.admin + path + "?" + q.Encode())
	if err != nil {
		return nil, fmt.Errorf("gateway admin %s: %w", f.admin, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("gateway admin %s: %w", f.admin, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		if json.Unmarshal(raw, &e) == nil && e.Error.Message != "" {
			return nil, fmt.Errorf("%s (%d)", e.Error.Message, resp.StatusCode)
		}
		return nil, fmt.Errorf("gateway admin answered %d", resp.StatusCode)
	}
	return raw, json.Unmarshal(raw, out)
}

func set(q url.Values, k, v string) {
	if v != "" {
		q.Set(k, v)
	}
}
