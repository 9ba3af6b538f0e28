package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/client"
)

func init() { rootCmd.AddCommand(newServicesCmd()) }

// newServicesCmd builds "sextant services" afresh (tests build their own).
func newServicesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "services",
		Aliases: []string{"service", "svc"},
		Short:   "List services and their instance counts",
	}
	f := addClientFlags(cmd)
	var namespace string
	list := &cobra.Command{
		Use:   "list",
		Short: "List services with instance and healthy counts",
		Long: `List the services of one namespace, or of every namespace when --namespace
is not given, with how many instances each has, how many are healthy, and the
service's revision (its last change).`,
		Example: `  sextant services list
  sextant services list --namespace prod -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			namespaces := []string{namespace}
			var rev uint64
			if namespace == "" {
				ns, err := c.Namespaces(ctx)
				if err != nil {
					return failed("list namespaces", err)
				}
				namespaces, rev = ns.Namespaces, ns.Revision
			}
			all := []client.Service{}
			for _, ns := range namespaces {
				res, err := c.Services(ctx, ns)
				if err != nil {
					return failed("list services of "+ns, err)
				}
				rev = max(rev, res.Revision)
				all = append(all, res.Services...)
			}
			out := cmd.OutOrStdout()
			if f.json() {
				return writeJSON(out, client.ServicesResult{Revision: rev, Services: all})
			}
			if len(all) == 0 {
				fmt.Fprintln(out, "no services")
				return nil
			}
			tw := newTable(out)
			fmt.Fprintln(tw, "NAMESPACE\tSERVICE\tINSTANCES\tHEALTHY\tREVISION")
			for _, s := range all {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", s.Namespace, s.Name, s.Instances, s.Healthy, s.Revision)
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVar(&namespace, "namespace", "", "only this namespace (default: all namespaces)")
	cmd.AddCommand(list)
	return cmd
}
