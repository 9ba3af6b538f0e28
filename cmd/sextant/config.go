package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/sextant-mesh/sextant/client"
)

func init() { rootCmd.AddCommand(newConfigCmd()) }

// newConfigCmd builds "sextant config": routing config (Istio
// VirtualServices and DestinationRules) on the server.
func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Apply, list, show and delete config (Istio's routing and security kinds)",
		Long: `Config is Istio's own VirtualService, DestinationRule and Gateway
(networking.istio.io/v1) and PeerAuthentication and AuthorizationPolicy
(security.istio.io/v1, docs/security.md) and Telemetry (telemetry.istio.io/v1,
docs/telemetry.md), in YAML or JSON, stored by the
server and pushed to every xDS subscriber. Sextant supports a subset of
their fields; a field outside it is refused with its path ("not
supported"), never ignored (docs/controlplane.md).`,
	}
	f := addClientFlags(cmd)

	var files []string
	var dryRun, wait bool
	var waitTimeout time.Duration
	apply := &cobra.Command{
		Use:   "apply -f FILE|DIR|-",
		Short: "Create or replace config objects from files (idempotent, atomic)",
		Long: `Apply every document of the given files (a directory: its *.yaml, *.yml
and *.json files, in name order; -: standard input) in one atomic request:
all objects are written or none. An object that is already stored as given is
unchanged. With --dry-run nothing is written: the answer says what would be
created or configured and which xDS resources would change.

Each document is checked here first: a YAML syntax error names its file and
line, an object of another kind (a Pod, a Node) what it is. Warnings (a
host naming a service with no instances, a route to a subset no
DestinationRule defines, an object shadowed by another for the same host)
are printed under their object; they do not stop the apply.

The server answers once its control plane has published the new config, so
an xDS client connecting after the answer gets it. With --wait the command
then waits until every connected xDS subscriber has been sent it and ACKed it
(like istioctl --wait), and on --timeout prints who is still behind and exits
non-zero.`,
		Example: `  sextant config apply -f routing.yaml
  sextant config apply -f ./config/ --dry-run
  sextant config apply -f routing.yaml --wait --timeout 30s
  cat vs.yaml | sextant config apply -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return fmt.Errorf("config apply: name what to apply with -f FILE, -f DIR or -f -")
			}
			if wait && dryRun {
				return fmt.Errorf("config apply: --wait and --dry-run: a dry run publishes nothing to wait for")
			}
			if waitTimeout <= 0 {
				return fmt.Errorf("config apply: --timeout %v: must be positive", waitTimeout)
			}
			body, docs, err := readConfigFiles(cmd.InOrStdin(), files)
			if err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			res, err := c.ApplyConfig(cmd.Context(), body, dryRun)
			if err != nil {
				return fileOf(failed("config apply", err), docs)
			}
			out := cmd.OutOrStdout()
			if f.json() {
				if err := writeJSON(out, res); err != nil || !wait {
					return err
				}
				return waitApplied(cmd.Context(), cmd.ErrOrStderr(), c, "config apply", res.Revision, res.Published, res.Warning, waitTimeout)
			}
			suffix := ""
			if dryRun {
				suffix = " (dry run)"
			}
			for _, r := range res.Results {
				fmt.Fprintf(out, "%s %s/%s %s%s\n", strings.ToLower(r.Kind), r.Namespace, r.Name, r.Action, suffix)
				for _, w := range r.Warnings {
					fmt.Fprintf(out, "  warning: %s\n", w)
				}
			}
			if dryRun && len(res.Resources) > 0 {
				fmt.Fprintln(out, "xDS resources that would change:")
				for _, x := range res.Resources {
					fmt.Fprintf(out, "  %s %s\n", x.Type, x.Name)
				}
			}
			if dryRun && res.Calls != nil {
				printCallsDryRun(out, res.Calls)
			}
			if res.Warning != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", res.Warning)
			}
			if wait {
				return waitApplied(cmd.Context(), out, c, "config apply", res.Revision, res.Published, res.Warning, waitTimeout)
			}
			return nil
		},
	}
	apply.Flags().StringSliceVarP(&files, "filename", "f", nil, "file, directory or - (standard input); repeatable")
	apply.Flags().BoolVar(&dryRun, "dry-run", false, "write nothing; print what would change")
	apply.Flags().BoolVar(&wait, "wait", false, "wait until every connected xDS subscriber has ACKed the applied config")
	apply.Flags().DurationVar(&waitTimeout, "timeout", 30*time.Second, "with --wait: how long to wait before printing who is behind and failing")

	var kind, namespace string
	list := &cobra.Command{
		Use:   "list",
		Short: "List config objects",
		Example: `  sextant config list
  sextant config list --kind vs --namespace prod -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			res, err := c.ListConfig(cmd.Context(), kind, namespace)
			if err != nil {
				return failed("config list", err)
			}
			out := cmd.OutOrStdout()
			if f.json() {
				return writeJSON(out, res)
			}
			if len(res.Items) == 0 {
				fmt.Fprintln(out, "no config objects")
				return nil
			}
			tw := newTable(out)
			fmt.Fprintln(tw, "KIND\tNAMESPACE\tNAME\tREVISION\tHOSTS")
			for _, raw := range res.Items {
				var o struct {
					Kind     string `json:"kind"`
					Metadata struct {
						Name            string `json:"name"`
						Namespace       string `json:"namespace"`
						ResourceVersion string `json:"resourceVersion"`
					} `json:"metadata"`
					Spec struct {
						Hosts []string `json:"hosts"`
						Host  string   `json:"host"`
					} `json:"spec"`
				}
				if err := json.Unmarshal(raw, &o); err != nil {
					return fmt.Errorf("config list: %w", err)
				}
				hosts := o.Spec.Hosts
				if o.Spec.Host != "" {
					hosts = []string{o.Spec.Host}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", o.Kind, o.Metadata.Namespace, o.Metadata.Name, o.Metadata.ResourceVersion, strings.Join(hosts, ","))
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVar(&kind, "kind", "", "only this kind: VirtualService (vs) or DestinationRule (dr)")
	list.Flags().StringVar(&namespace, "namespace", "", "only this namespace")

	get := &cobra.Command{
		Use:   "get KIND/NAMESPACE/NAME | KIND/NAME",
		Short: "Show one config object (YAML; -o json for JSON)",
		Long: `Show one config object. KIND/NAME is in namespace default. KIND is the
kind's name in any case (virtualservice, DestinationRule) or its short
name: vs, dr, gw, pa, ap.`,
		Example: `  sextant config get vs/default/orders
  sextant config get vs/orders                  # namespace default
  sextant config get DestinationRule/default/orders -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, ns, name, err := splitConfigRef(args[0])
			if err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			raw, err := c.GetConfig(cmd.Context(), k, ns, name)
			if err != nil {
				return failed("config get "+args[0], err)
			}
			out := cmd.OutOrStdout()
			if f.json() {
				var buf bytes.Buffer
				if err := json.Indent(&buf, raw, "", "  "); err != nil {
					return err
				}
				buf.WriteByte('\n')
				_, err := out.Write(buf.Bytes())
				return err
			}
			y, err := yaml.JSONToYAML(raw)
			if err != nil {
				return err
			}
			_, err = out.Write(y)
			return err
		},
	}

	var delWait bool
	var delTimeout time.Duration
	del := &cobra.Command{
		Use:   "delete KIND/NAMESPACE/NAME | KIND/NAME",
		Short: "Delete one config object",
		Long: `Delete one config object. KIND/NAME is in namespace default; the answer
names the namespace the object was deleted from. As with apply, the server
answers once its control plane has published the delete; with --wait the
command then waits until every connected xDS subscriber has ACKed it, and on
--timeout prints who is still behind and exits non-zero.`,
		Example: `  sextant config delete vs/prod/orders
  sextant config delete vs/orders               # namespace default
  sextant config delete dr/orders --wait --timeout 30s`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if delTimeout <= 0 {
				return fmt.Errorf("config delete: --timeout %v: must be positive", delTimeout)
			}
			k, ns, name, err := splitConfigRef(args[0])
			if err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			res, err := c.DeleteConfigPublished(cmd.Context(), k, ns, name)
			if err != nil {
				return failed("config delete "+args[0], err)
			}
			out, waitOut := cmd.OutOrStdout(), cmd.OutOrStdout()
			if f.json() {
				if err := writeJSON(out, res); err != nil || !delWait {
					return err
				}
				waitOut = cmd.ErrOrStderr()
			} else {
				// As placements delete names its object: the namespace said
				// even when the reference left it out, the kind as apply prints it.
				fmt.Fprintf(out, "deleted %s %s/%s (revision %d)\n", configKindName(k), ns, name, res.Revision)
				if res.Warning != "" {
					fmt.Fprintln(cmd.ErrOrStderr(), "warning:", res.Warning)
				}
			}
			if !delWait {
				return nil
			}
			return waitApplied(cmd.Context(), waitOut, c, "config delete", res.Revision, res.Published, res.Warning, delTimeout)
		},
	}
	del.Flags().BoolVar(&delWait, "wait", false, "wait until every connected xDS subscriber has ACKed the delete")
	del.Flags().DurationVar(&delTimeout, "timeout", 30*time.Second, "with --wait: how long to wait before printing who is behind and failing")
	cmd.AddCommand(apply, list, get, del)
	return cmd
}

// configKindName is a kind as config apply prints it (virtualservice),
// from any of the forms the server reads (vs, VirtualServices); one it
// does not know stays as given.
func configKindName(k string) string {
	switch strings.ToLower(k) {
	case "virtualservice", "virtualservices", "vs":
		return "virtualservice"
	case "destinationrule", "destinationrules", "dr":
		return "destinationrule"
	case "gateway", "gateways", "gw":
		return "gateway"
	case "serviceentry", "serviceentries", "se":
		return "serviceentry"
	case "workloadentry", "workloadentries", "we":
		return "workloadentry"
	case "sidecar", "sidecars":
		return "sidecar"
	case "peerauthentication", "peerauthentications", "pa":
		return "peerauthentication"
	case "authorizationpolicy", "authorizationpolicies", "ap":
		return "authorizationpolicy"
	case "requestauthentication", "requestauthentications", "ra":
		return "requestauthentication"
	case "telemetry", "telemetries":
		return "telemetry"
	}
	return k
}

// splitConfigRef reads KIND/NAMESPACE/NAME, or KIND/NAME in namespace
// default.
func splitConfigRef(s string) (kind, ns, name string, err error) {
	parts := strings.Split(s, "/")
	switch len(parts) {
	case 2:
		return parts[0], "default", parts[1], nil
	case 3:
		return parts[0], parts[1], parts[2], nil
	}
	return "", "", "", fmt.Errorf("%q: want KIND/NAMESPACE/NAME or KIND/NAME (namespace default), e.g. vs/default/orders", s)
}

// printCallsDryRun prints, per gateway, the recorded calls an apply would
// start denying, grouped, and what could not be told.
func printCallsDryRun(out io.Writer, c *client.CallsDryRun) {
	fmt.Fprintf(out, "Recorded calls the change would start denying (%s):\n", c.Note)
	if len(c.Ports) == 0 {
		fmt.Fprintln(out, "  no Gateway listener: the gateways enforce nothing of it")
		return
	}
	if c.NotAsked != "" {
		fmt.Fprintf(out, "  no gateway asked: %s\n", c.NotAsked)
		return
	}
	if len(c.Gateways) == 0 {
		fmt.Fprintln(out, "  no gateway is registered")
		return
	}
	for _, g := range c.Gateways {
		if g.Error != "" || g.Result == nil {
			fmt.Fprintf(out, "  gateway %s (%s, %s): could not be asked: %s\n", g.ID, g.Service, g.Admin, g.Error)
			continue
		}
		r := g.Result
		fmt.Fprintf(out, "  gateway %s (%s, %s): %d calls read, %d newly denied, %d newly allowed, %d undetermined\n",
			g.ID, g.Service, g.Admin, r.Scanned, r.NewlyDenied, r.NewlyAllowed, r.Undetermined)
		if len(r.Denied) > 0 {
			tw := newTable(out)
			fmt.Fprintln(tw, "    CALLS\tSERVICE\tROUTE\tPRINCIPAL\tMETHOD\tPATH\tPORT\tPOLICY")
			for _, d := range r.Denied {
				fmt.Fprintf(tw, "    %d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", d.Count, d.Service, orDash(d.Route), orDash(d.Principal),
					orDash(d.Method), orDash(d.Path), d.Port, d.Policy)
			}
			tw.Flush()
			if r.GroupsTruncated {
				fmt.Fprintln(out, "    (more groups than listed; the counts cover every call)")
			}
		}
		attrs := make([]string, 0, len(r.UndeterminedBy))
		for a := range r.UndeterminedBy {
			attrs = append(attrs, a)
		}
		slices.Sort(attrs)
		for _, a := range attrs {
			fmt.Fprintf(out, "    undetermined: %d calls: a rule reads %s\n", r.UndeterminedBy[a], a)
		}
		if r.Truncated {
			fmt.Fprintf(out, "    scan cut (%s): the counts cover the calls read\n", r.TruncatedBy)
		}
		for _, e := range r.Errors {
			fmt.Fprintf(out, "    not read (not counted): %s\n", e)
		}
	}
}
