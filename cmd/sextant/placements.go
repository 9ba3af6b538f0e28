package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/client"
)

func init() { rootCmd.AddCommand(newPlaceCmd(), newPlacementsCmd()) }

// newPlaceCmd builds "sextant place": place workloads (Kubernetes Pods).
func newPlaceCmd() *cobra.Command {
	var (
		files  []string
		dryRun bool
		f      = &clientFlags{}
	)
	cmd := &cobra.Command{
		Use:   "place -f FILE|DIR|-",
		Short: "Place workloads (Kubernetes Pods) on the best nodes and reserve their resources",
		Long: `Place every Pod of the given files (YAML or JSON; a document may be a Pod
or a List of Pods; -: standard input) in one request, in order, each seeing
the ones before it. The scheduler reads the scheduling part of the Pod spec
(resources.requests, nodeSelector, affinity, tolerations,
topologySpreadConstraints, nodeName, overhead) with kube-scheduler's
semantics and scores every feasible node.

Prints the node each pod is bound to, or kube-scheduler's reasons why none
fits; exits non-zero if a pod is unschedulable. A pod already placed fails
the whole request (nothing is placed). With --dry-run nothing is reserved:
the answer says where each pod would go.`,
		Example: `  sextant place -f web.yaml
  sextant place -f deployment-replicas.yaml --dry-run -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			body, err := readObjects(cmd.InOrStdin(), files, "place", "Pod")
			if err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			res, err := c.Place(cmd.Context(), body, dryRun)
			if err != nil {
				return failed("place", err)
			}
			out := cmd.OutOrStdout()
			unschedulable := 0
			for _, r := range res.Results {
				if r.Node == "" {
					unschedulable++
				}
			}
			if f.json() {
				if err := writeJSON(out, res); err != nil {
					return err
				}
			} else {
				verb := "placed on"
				if dryRun {
					verb = "would be placed on"
				}
				for _, r := range res.Results {
					if r.Node != "" {
						fmt.Fprintf(out, "pod/%s/%s %s %s\n", r.Namespace, r.Name, verb, r.Node)
					} else {
						fmt.Fprintf(out, "pod/%s/%s unschedulable: %s\n", r.Namespace, r.Name, r.Unschedulable)
					}
				}
				if !dryRun {
					fmt.Fprintf(out, "revision %d\n", res.Revision)
				}
			}
			if unschedulable > 0 {
				return fmt.Errorf("place: %d of %d pods are unschedulable", unschedulable, len(res.Results))
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVarP(&files, "filename", "f", nil, "file, directory or - (standard input); repeatable")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "reserve nothing; print where each pod would go")
	bindClientFlags(cmd, f)
	return cmd
}

// newPlacementsCmd builds "sextant placements": list, show and delete
// placements.
func newPlacementsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "placements",
		Aliases: []string{"placement"},
		Short:   "List, show and delete placements (workloads bound to nodes)",
	}
	f := addClientFlags(cmd)

	var opts client.PlacementListOptions
	list := &cobra.Command{
		Use:   "list",
		Short: "List placements, following pages",
		Long: `List placements in namespace/name order, optionally of one namespace, on
one node, or whose labels match a selector.`,
		Example: `  sextant placements list
  sextant placements list --node node-000017
  sextant placements list --namespace prod -l app=web -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			all, rev, err := allPages(opts.PageToken, func(token string) ([]client.Placement, int64, string, error) {
				opts.PageToken = token
				page, err := c.ListPlacements(cmd.Context(), opts)
				if err != nil {
					return nil, 0, "", err
				}
				return page.Items, page.Revision, page.NextPageToken, nil
			})
			if err != nil {
				return failed("placements list", err)
			}
			out := cmd.OutOrStdout()
			if f.json() {
				return writeJSON(out, struct {
					Revision int64              `json:"revision"`
					Items    []client.Placement `json:"items"`
				}{rev, all})
			}
			if len(all) == 0 {
				fmt.Fprintln(out, "no placements")
				return nil
			}
			tw := newTable(out)
			fmt.Fprintln(tw, "NAMESPACE\tNAME\tNODE\tCPU\tMEMORY\tREVISION\tLABELS")
			for _, p := range all {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", p.Namespace, p.Name, p.Node,
					orDash(p.Requests["cpu"]), orDash(p.Requests["memory"]), p.Revision, formatMetadata(p.Labels))
			}
			return tw.Flush()
		},
	}
	fl := list.Flags()
	fl.StringVar(&opts.Namespace, "namespace", "", "only this namespace")
	fl.StringVar(&opts.Node, "node", "", "only placements on this node")
	fl.StringVarP(&opts.Selector, "selector", "l", "", "label selector over the workloads' labels")
	fl.IntVar(&opts.Limit, "page-size", 0, "placements per request (server default 1000, at most 10000)")

	get := &cobra.Command{
		Use:     "get [NAMESPACE/]NAME",
		Short:   "Show one placement (YAML; -o json for JSON)",
		Example: `  sextant placements get prod/web-0`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, name := splitPlacementRef(args[0])
			c, err := f.client()
			if err != nil {
				return err
			}
			p, err := c.GetPlacement(cmd.Context(), ns, name)
			if err != nil {
				return failed("placements get "+args[0], err)
			}
			return writeObject(cmd.OutOrStdout(), f, p)
		},
	}

	del := &cobra.Command{
		Use:     "delete [NAMESPACE/]NAME",
		Short:   "Delete a placement, freeing its resources",
		Example: `  sextant placements delete prod/web-0`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, name := splitPlacementRef(args[0])
			c, err := f.client()
			if err != nil {
				return err
			}
			rev, err := c.DeletePlacement(cmd.Context(), ns, name)
			if err != nil {
				return failed("placements delete "+args[0], err)
			}
			if f.json() {
				return writeJSON(cmd.OutOrStdout(), map[string]int64{"revision": rev})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted placement %s/%s (revision %d)\n", ns, name, rev)
			return nil
		},
	}
	cmd.AddCommand(list, get, del)
	return cmd
}

// splitPlacementRef reads NAMESPACE/NAME, or NAME in namespace default.
func splitPlacementRef(s string) (ns, name string) {
	if ns, name, ok := strings.Cut(s, "/"); ok {
		return ns, name
	}
	return "default", s
}
