package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/internal/push"
)

func init() { rootCmd.AddCommand(newPushCmd()) }

// newPushCmd builds "sextant push", the control plane's view of its xDS
// subscribers.
func newPushCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "push", Short: "Inspect the control plane's pushes to xDS subscribers"}
	f := addClientFlags(cmd)
	var node string
	status := &cobra.Command{
		Use:   "status",
		Short: "Show every xDS subscriber and whether it is in sync (like istioctl proxy-status)",
		Long: `Show each xDS subscriber (node id, address, protocol, connected since) and,
per resource type, whether the last version sent was ACKed (SYNCED), is still
awaiting its ACK (STALE), was rejected (NACKED: see -o json for the client's
error text) or was never sent, with the updates pending for it.`,
		Example: `  sextant push status
  sextant push status --node client-1 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return err
			}
			c, err := f.client() // the token and TLS flags apply
			if err != nil {
				return err
			}
			path := "/v1/push/status"
			if node != "" {
				path += "?node=" + url.QueryEscape(node)
			}
			var st push.Status
			if err := c.Call(cmd.Context(), http.MethodGet, path, nil, &st); err != nil {
				return failed("push status", err)
			}
			out := cmd.OutOrStdout()
			if f.json() {
				return writeJSON(out, st)
			}
			return writePushStatus(out, st)
		},
	}
	status.Flags().StringVar(&node, "node", "", "only the streams of this node id")
	cmd.AddCommand(status)
	return cmd
}

func writePushStatus(out io.Writer, st push.Status) error {
	fmt.Fprintf(out, "revision %d, %d clusters, %d endpoint sets, %d routes; queues: endpoints %d, config %d\n",
		st.Revision, st.Engine.Resources["clusters"], st.Engine.Resources["endpoints"], st.Engine.Resources["routes"],
		st.Engine.EndpointQueue, st.Engine.ConfigQueue)
	for _, w := range st.Warnings {
		fmt.Fprintln(out, "warning:", w)
	}
	if len(st.Subscribers) == 0 {
		fmt.Fprintln(out, "no subscribers")
		return nil
	}
	tw := newTable(out)
	fmt.Fprintln(tw, "NODE\tADDRESS\tPROTOCOL\tCONNECTED\tCDS\tEDS\tLDS\tRDS\tPENDING")
	for _, s := range st.Subscribers {
		cols := map[string]string{"clusters": "-", "endpoints": "-", "listeners": "-", "routes": "-"}
		pending := 0
		for _, ts := range s.Types {
			pending += ts.Pending
			switch {
			case len(ts.NACKs) > 0 && ts.NACKs[len(ts.NACKs)-1].Version == ts.VersionSent:
				cols[ts.Type] = "NACKED"
			case ts.Responses == 0:
				cols[ts.Type] = "NOT SENT"
			case ts.VersionAcked == ts.VersionSent:
				cols[ts.Type] = "SYNCED"
			default:
				cols[ts.Type] = "STALE"
			}
			cols[ts.Type] += fmt.Sprintf(" (%d)", ts.Resources)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", s.NodeID, s.Address, s.Protocol,
			s.ConnectedSince.Local().Format(time.DateTime), cols["clusters"], cols["endpoints"], cols["listeners"], cols["routes"], pending)
	}
	return tw.Flush()
}
