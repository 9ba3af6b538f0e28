package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/client"
)

func init() { rootCmd.AddCommand(newWatchCmd()) }

// errWatchDone ends a watch after --count states.
var errWatchDone = errors.New("watch: done")

// newWatchCmd builds "sextant watch" afresh (tests build their own).
func newWatchCmd() *cobra.Command {
	var (
		opts  client.WatchOptions
		count int
		f     *clientFlags
	)
	cmd := &cobra.Command{
		Use:   "watch [NAMESPACE/]SERVICE",
		Short: "Follow a service and print each change as it happens",
		Long: `Follow one service with blocking queries and print each change as it
arrives: the instances added (+), removed (-) and changed (~, with what
changed) since the previous state. The first state lists every instance as
added. A bare SERVICE means the "default" namespace.

With -o json each state change is one JSON object per line:
{"revision": N, "added": [...], "removed": ["id", ...], "changed": [...]}.

The watch runs until interrupted (Ctrl-C) or, with --count, after that many
states. Transient errors (a server restarting) are reported on stderr and
retried; if the watch falls behind, intermediate states are folded into the
latest.`,
		Example: `  sextant watch prod/orders
  sextant watch orders --selector 'zone=z1' --healthy-only
  sextant watch prod/orders -o json --count 1   # print the current state and exit`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if count < 0 {
				return fmt.Errorf("--count must not be negative")
			}
			ns, svc, err := client.ParseService(args[0], "")
			if err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			opts.OnError = func(err error) {
				fmt.Fprintf(cmd.ErrOrStderr(), "watch: %v (retrying)\n", failed("query "+ns+"/"+svc, err))
			}
			var prev []client.Instance
			states := 0
			err = c.WatchFunc(cmd.Context(), ns, svc, opts, func(res client.QueryResult) error {
				d := diffStates(prev, res.Instances)
				prev = res.Instances
				var err error
				if f.json() {
					err = writeDiffJSON(out, res.Revision, d)
				} else {
					err = writeDiffText(out, ns+"/"+svc, res.Revision, len(res.Instances), d)
				}
				if err != nil {
					return err
				}
				states++
				if count > 0 && states >= count {
					return errWatchDone
				}
				return nil
			})
			if errors.Is(err, errWatchDone) || errors.Is(err, context.Canceled) {
				return nil
			}
			return failed("watch "+ns+"/"+svc, err)
		},
	}
	f = addClientFlags(cmd)
	fl := cmd.Flags()
	fl.StringVarP(&opts.Selector, "selector", "l", "", "label selector over labels (metadata, and version as the label version), e.g. 'zone=z1,version=v2'")
	fl.BoolVar(&opts.HealthyOnly, "healthy-only", false, "only healthy, non-isolated instances")
	fl.DurationVar(&opts.Wait, "wait", 5*time.Minute, "longest time the server holds one blocking query")
	fl.IntVar(&count, "count", 0, "exit after this many states (0: until interrupted)")
	return cmd
}

// stateDiff is what changed between two states of a service.
type stateDiff struct {
	added, changed []client.Instance
	removed        []string
	what           [][]string // per changed instance: what changed
}

// diffStates compares two states, both sorted by id as the API returns them.
func diffStates(old, cur []client.Instance) stateDiff {
	var d stateDiff
	i, j := 0, 0
	for i < len(old) || j < len(cur) {
		switch {
		case j == len(cur) || (i < len(old) && old[i].ID < cur[j].ID):
			d.removed = append(d.removed, old[i].ID)
			i++
		case i == len(old) || cur[j].ID < old[i].ID:
			d.added = append(d.added, cur[j])
			j++
		default:
			if what := changes(&old[i], &cur[j]); len(what) > 0 {
				d.changed = append(d.changed, cur[j])
				d.what = append(d.what, what)
			}
			i++
			j++
		}
	}
	return d
}

// changes lists the fields that differ, as "field old->new".
func changes(a, b *client.Instance) []string {
	var out []string
	diff := func(name, x, y string) {
		if x != y {
			out = append(out, name+" "+x+" -> "+y)
		}
	}
	diff("address", address(a), address(b))
	diff("protocol", orDash(a.Protocol), orDash(b.Protocol))
	diff("version", orDash(a.Version), orDash(b.Version))
	diff("weight", strconv.Itoa(a.EffectiveWeight()), strconv.Itoa(b.EffectiveWeight()))
	diff("status", healthWord(a), healthWord(b))
	diff("ttl", ttlWord(a.TTLSeconds), ttlWord(b.TTLSeconds))
	if !maps.Equal(a.Metadata, b.Metadata) {
		out = append(out, "metadata "+formatMetadata(a.Metadata)+" -> "+formatMetadata(b.Metadata))
	}
	return out
}

func writeDiffText(w io.Writer, name string, rev uint64, n int, d stateDiff) error {
	fmt.Fprintf(w, "%s revision %d: %d instances (+%d -%d ~%d)\n", name, rev, n, len(d.added), len(d.removed), len(d.changed))
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for i := range d.added {
		in := &d.added[i]
		fmt.Fprintf(tw, "  + %s\t%s\t%s\tweight %d\t%s\n", in.ID, address(in), healthWord(in), in.EffectiveWeight(), formatMetadata(in.Metadata))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, id := range d.removed {
		fmt.Fprintf(w, "  - %s\n", id)
	}
	for i := range d.changed {
		fmt.Fprintf(w, "  ~ %s  %s\n", d.changed[i].ID, strings.Join(d.what[i], ", "))
	}
	return nil
}

func writeDiffJSON(w io.Writer, rev uint64, d stateDiff) error {
	nonNil := func(s []client.Instance) []apiInstance { return toAPIInstances(s) }
	removed := d.removed
	if removed == nil {
		removed = []string{}
	}
	// One compact object per line, so the output can be streamed into jq.
	return writeJSONLine(w, struct {
		Revision uint64        `json:"revision"`
		Added    []apiInstance `json:"added"`
		Removed  []string      `json:"removed"`
		Changed  []apiInstance `json:"changed"`
	}{rev, nonNil(d.added), removed, nonNil(d.changed)})
}
