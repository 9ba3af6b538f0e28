package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/sextant-mesh/sextant/client"
)

func init() { rootCmd.AddCommand(newNodesCmd()) }

// newNodesCmd builds "sextant nodes": the scheduler's hosts, as Kubernetes
// Nodes.
func newNodesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "nodes",
		Aliases: []string{"node"},
		Short:   "Apply, list, show and delete the placement scheduler's nodes",
		Long: `Nodes are the hosts the scheduler places workloads on, written as
Kubernetes Nodes (the output of "kubectl get node -o yaml" is accepted): the
scheduler reads metadata.name, metadata.labels, spec.taints,
spec.unschedulable and status.allocatable (cpu, memory, pods and extended
resources), and ignores the other Kubernetes fields (docs/placement.md).`,
	}
	f := addClientFlags(cmd)

	var files []string
	apply := &cobra.Command{
		Use:   "apply -f FILE|DIR|-",
		Short: "Create or replace nodes from files (atomic: all or none)",
		Long: `Apply every Node of the given files (YAML or JSON; a document may be a
Node or a List of Nodes; a directory: its *.yaml, *.yml and *.json files in
name order; -: standard input) in one atomic request. Each node is printed as
kubectl does: created (new), configured (replaced) or unchanged (stored with
the same fields). A replaced node keeps its placements, even if they no
longer fit, as Kubernetes does. An error's field path (items[3]...) counts
the nodes of all documents in order.`,
		Example: `  sextant nodes apply -f nodes.yaml
  kubectl get nodes -o yaml | sextant nodes apply -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			body, err := readObjects(cmd.InOrStdin(), files, "nodes apply", "Node")
			if err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			res, err := c.ApplyNodes(cmd.Context(), body)
			if err != nil {
				return failed("nodes apply", err)
			}
			out := cmd.OutOrStdout()
			if f.json() {
				return writeJSON(out, res)
			}
			// kubectl's words: created (new), configured (replaced),
			// unchanged (stored as given already).
			action := map[string]string{}
			for _, n := range res.Changed {
				action[n] = "configured"
			}
			for _, n := range res.Created {
				action[n] = "created"
			}
			for _, n := range res.Names {
				action := action[n]
				if action == "" {
					action = "unchanged"
				}
				fmt.Fprintf(out, "node/%s %s\n", n, action)
			}
			fmt.Fprintf(out, "revision %d\n", res.Revision)
			return nil
		},
	}
	apply.Flags().StringSliceVarP(&files, "filename", "f", nil, "file, directory or - (standard input); repeatable")

	var opts client.NodeListOptions
	list := &cobra.Command{
		Use:   "list",
		Short: "List nodes with what is reserved on them, following pages",
		Long: `List nodes in name order, optionally those whose labels match a selector
(Kubernetes syntax: k=v, k!=v, k in (a,b), k notin (a,b), k, !k). CPU and
MEMORY are reserved/allocatable; PODS is placements/allocatable pods.`,
		Example: `  sextant nodes list
  sextant nodes list -l 'topology.kubernetes.io/zone in (zone-a,zone-b)' -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			all, rev, err := allPages(opts.PageToken, func(token string) ([]client.NodeItem, int64, string, error) {
				opts.PageToken = token
				page, err := c.ListNodes(cmd.Context(), opts)
				if err != nil {
					return nil, 0, "", err
				}
				return page.Items, page.Revision, page.NextPageToken, nil
			})
			if err != nil {
				return failed("nodes list", err)
			}
			out := cmd.OutOrStdout()
			if f.json() {
				return writeJSON(out, struct {
					Revision int64             `json:"revision"`
					Items    []client.NodeItem `json:"items"`
				}{rev, all})
			}
			if len(all) == 0 {
				fmt.Fprintln(out, "no nodes")
				return nil
			}
			tw := newTable(out)
			fmt.Fprintln(tw, "NAME\tCPU\tMEMORY\tPODS\tTAINTS\tSTATUS\tREVISION\tLABELS")
			for _, it := range all {
				n := &it.Node
				status := "schedulable"
				if n.Spec.Unschedulable {
					status = "unschedulable"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%s\t%s\t%s\t%s\t%s\n", n.Metadata.Name,
					usage(it.Requested, n.Status.Allocatable, "cpu"), usage(it.Requested, n.Status.Allocatable, "memory"),
					it.Placements, orDash(n.Status.Allocatable["pods"]), taints(n.Spec.Taints), status,
					n.Metadata.ResourceVersion, formatMetadata(n.Metadata.Labels))
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVarP(&opts.Selector, "selector", "l", "", "label selector over node labels, e.g. 'zone=a,disk!=hdd'")
	list.Flags().IntVar(&opts.Limit, "page-size", 0, "nodes per request (server default 1000, at most 10000)")

	get := &cobra.Command{
		Use:     "get NAME",
		Short:   "Show one node and what is reserved on it (YAML; -o json for JSON)",
		Example: `  sextant nodes get node-000017`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			it, err := c.GetNode(cmd.Context(), args[0])
			if err != nil {
				return failed("nodes get "+args[0], err)
			}
			return writeObject(cmd.OutOrStdout(), f, it)
		},
	}

	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a node and release its placements",
		Long: `Delete a node. Its placements are released (deleted) in the same
write, and named in the answer.`,
		Example: `  sextant nodes delete node-000017`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			res, err := c.DeleteNode(cmd.Context(), args[0])
			if err != nil {
				return failed("nodes delete "+args[0], err)
			}
			out := cmd.OutOrStdout()
			if f.json() {
				return writeJSON(out, res)
			}
			fmt.Fprintf(out, "deleted node/%s (revision %d)\n", args[0], res.Revision)
			for _, k := range res.Released {
				fmt.Fprintf(out, "released placement %s\n", k)
			}
			return nil
		},
	}
	cmd.AddCommand(apply, list, get, del)
	return cmd
}

// usage renders requested/allocatable of one resource.
func usage(requested, allocatable map[string]string, name string) string {
	r := requested[name]
	if r == "" {
		r = "0"
	}
	return r + "/" + orDash(allocatable[name])
}

func taints(ts []client.Taint) string {
	if len(ts) == 0 {
		return "-"
	}
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.Key
		if t.Value != "" {
			parts[i] += "=" + t.Value
		}
		parts[i] += ":" + t.Effect
	}
	return strings.Join(parts, ",")
}

// writeObject prints v as YAML, or indented JSON with -o json.
func writeObject(w io.Writer, f *clientFlags, v any) error {
	if f.json() {
		return writeJSON(w, v)
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
