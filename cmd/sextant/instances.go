package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/client"
)

func init() { rootCmd.AddCommand(newInstancesCmd(), newTopRegisterCmd()) }

// newTopRegisterCmd is "sextant register", the same command as "sextant
// instances register", at the top for the common case of a service process
// registering itself (with --keepalive).
func newTopRegisterCmd() *cobra.Command {
	f := &clientFlags{}
	cmd := newRegisterCmd(f)
	bindClientFlags(cmd, f)
	return cmd
}

// newInstancesCmd builds "sextant instances" afresh (tests build their own).
func newInstancesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "instances",
		Aliases: []string{"instance", "inst"},
		Short:   "Register, deregister, read and list service instances",
		Long: `Register, deregister, read and list the instances of services in a
Sextant registry. Every subcommand talks to --server (default
http://127.0.0.1:7400, or $SEXTANT_SERVER) and prints an aligned table, or
JSON with -o json.`,
	}
	f := addClientFlags(cmd)
	cmd.AddCommand(newRegisterCmd(f), newDeregisterCmd(f), newGetCmd(f), newListCmd(f), newCheckCmd(f))
	return cmd
}

func newRegisterCmd(f *clientFlags) *cobra.Command {
	var (
		in     client.Instance
		weight int
		meta   []string
		ttl    string
		// deregisterAfter is --deregister-after, the removal delay.
		deregisterAfter string
		file            string
		keepalive       bool
		checks          []string
		instFlag        = []string{"namespace", "service", "host", "port", "id", "protocol", "version", "weight", "isolated", "meta", "ttl", "deregister-after", "check"}
	)
	cmd := &cobra.Command{
		Use:   "register",
		Short: "Register (create or replace) instances",
		Long: `Register one instance from flags, or many from a JSON file.

An instance whose id exists is replaced whole (its metadata too). Without
--id the server derives the id from namespace/service/host:port, so
registering the same address again replaces it. A register counts as a
heartbeat. With --ttl the instance turns unhealthy when 3 x TTL pass without
a heartbeat (--ttl 10: unhealthy 30s after the last one), and healthy again at
its next heartbeat. With --deregister-after (or the server's own
--deregister-after) the server deregisters it once it has been unhealthy that
long. --version is selectable as the label "version" (--selector version=v2,
DestinationRule subsets labels {version: v2}).

--keepalive stays in the foreground: it heartbeats every registered instance
at half its TTL (--ttl, default 10s), registers again any instance the server
lost (a restart without its data), retries with backoff while the server is
unreachable, and on Ctrl-C (or SIGTERM) deregisters them and exits. Run it
beside a process that has no Sextant client of its own.

--file takes the API's register body: {"instances": [...]} or one instance
object (a JSON array of instances works too); "-" reads standard input. The
batch is atomic: if one instance is invalid nothing is written, and the error
names the field, e.g. instances[3].port.`,
		Example: `  # one instance, healthy while it heartbeats every 5s
  sextant instances register --service orders --host 10.0.0.1 --port 8080 \
      --meta zone=z1 --meta env=prod --ttl 5s

  # register, heartbeat until Ctrl-C, then deregister
  sextant register --service orders --host 10.0.0.1 --port 8080 --keepalive

  # healthy while the server's HTTP probe of it passes (every 10s)
  sextant instances register --service orders --host 10.0.0.1 --port 8080 \
      --check http=http://10.0.0.1:8080/health,interval=10s

  # drain an instance: weight 0 keeps it registered but never picked
  sextant instances register --service orders --host 10.0.0.1 --port 8080 --weight 0

  # many at once
  sextant instances register --file instances.json
  echo '{"service":"orders","host":"10.0.0.2","port":8080}' | sextant instances register --file -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			var batch []client.Instance
			if file != "" {
				for _, name := range instFlag {
					if cmd.Flags().Changed(name) {
						return fmt.Errorf("--%s cannot be combined with --file", name)
					}
				}
				if batch, err = readInstances(cmd.InOrStdin(), file); err != nil {
					return err
				}
			} else {
				for _, name := range []string{"service", "host", "port"} {
					if !cmd.Flags().Changed(name) {
						return fmt.Errorf("--%s is required (or use --file)", name)
					}
				}
				if strings.Contains(in.Service, "/") {
					if in.Namespace, in.Service, err = serviceFlag(in.Service, in.Namespace); err != nil {
						return err
					}
				}
				if cmd.Flags().Changed("weight") {
					in.Weight = client.Weight(weight)
				}
				if in.Metadata, err = parseMeta(meta); err != nil {
					return err
				}
				if in.TTLSeconds, err = parseTTL(ttl); err != nil {
					return err
				}
				if in.DeregisterAfterSeconds, err = parseSeconds("deregister-after", deregisterAfter); err != nil {
					return err
				}
				for _, spec := range checks {
					c, err := parseCheck(spec)
					if err != nil {
						return err
					}
					in.Checks = append(in.Checks, c)
				}
				batch = []client.Instance{in}
			}
			if keepalive {
				return keepAlive(cmd, c, f, batch)
			}
			res, err := c.Register(cmd.Context(), batch...)
			if err != nil {
				return failed("register", err)
			}
			out := cmd.OutOrStdout()
			if f.json() {
				return writeJSON(out, res)
			}
			tw := newTable(out)
			fmt.Fprintln(tw, "ID\tREVISION")
			for _, id := range res.IDs {
				fmt.Fprintf(tw, "%s\t%d\n", id, res.Revision)
			}
			return tw.Flush()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&in.Namespace, "namespace", "", `namespace (server default "default")`)
	fl.StringVar(&in.Service, "service", "", `service: NAME, or NAMESPACE/NAME (required without --file)`)
	fl.StringVar(&in.Host, "host", "", "IP address or DNS name (required without --file)")
	fl.IntVar(&in.Port, "port", 0, "port, 1..65535 (required without --file)")
	fl.StringVar(&in.ID, "id", "", "instance id (default: derived from namespace/service/host:port)")
	fl.StringVar(&in.Protocol, "protocol", "", "protocol, e.g. http or grpc")
	fl.StringVar(&in.Version, "version", "", `version, e.g. v1; selectable as the label "version"`)
	fl.IntVar(&weight, "weight", client.DefaultWeight, "weight 0..65535; 0 means never picked by weighted balancers")
	fl.BoolVar(&in.Isolated, "isolated", false, "keep the instance but never return it to healthy-only queries")
	fl.StringArrayVar(&meta, "meta", nil, "metadata entry key=value (repeatable)")
	fl.StringVar(&ttl, "ttl", "", "heartbeat TTL, e.g. 5s or 5 (seconds): unhealthy after 3 x TTL without a heartbeat; empty or 0: no heartbeat needed")
	fl.StringVar(&deregisterAfter, "deregister-after", "", "with --ttl: deregister once unhealthy this long, e.g. 5m or 300 (seconds); empty or 0: the server's --deregister-after")
	fl.StringVarP(&file, "file", "f", "", `read instances from a JSON file ("-": standard input)`)
	fl.StringArrayVar(&checks, "check", nil, checkFlagHelp)
	fl.BoolVar(&keepalive, "keepalive", false, "stay in the foreground heartbeating until Ctrl-C, then deregister")
	return cmd
}

// serviceFlag reads --service (NAME or NAMESPACE/NAME, client.ParseService)
// beside --namespace ("" when not given): both may name the namespace, but
// not two different ones.
func serviceFlag(service, namespace string) (ns, name string, err error) {
	ns, name, err = client.ParseService(service, namespace)
	if err != nil {
		return "", "", fmt.Errorf("--service: %w", err)
	}
	if namespace != "" && ns != namespace {
		return "", "", fmt.Errorf("--service %q is in namespace %s, --namespace says %s", service, ns, namespace)
	}
	return ns, name, nil
}

// defaultKeepaliveTTL is the TTL of --keepalive when neither --ttl nor the
// file gives one.
const defaultKeepaliveTTL = 10

// keepAlive registers batch with heartbeats until the command's context
// ends (Ctrl-C, SIGTERM), then deregisters every instance.
func keepAlive(cmd *cobra.Command, c *client.Client, f *clientFlags, batch []client.Instance) error {
	ctx := cmd.Context()
	errOut := cmd.ErrOrStderr()
	var regs []*client.Registration
	closeAll := func() error {
		var errs []error
		for _, r := range regs {
			if err := r.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	for i := range batch {
		if batch[i].TTLSeconds == 0 {
			batch[i].TTLSeconds = defaultKeepaliveTTL
		}
		// The registrations end when this command says so (Close below),
		// not when ctx ends, so that they are deregistered in order. The
		// first one reports errors: a failed batch fails for all of them.
		var opts []client.KeepaliveOption
		if i == 0 {
			opts = append(opts, client.WithKeepaliveErrors(func(err error) { fmt.Fprintln(errOut, "sextant:", err) }))
		}
		r, err := c.Keepalive(context.WithoutCancel(ctx), batch[i], 0, opts...)
		if err != nil {
			return errors.Join(failed("register", err), closeAll())
		}
		regs = append(regs, r)
	}
	out := cmd.OutOrStdout()
	if f.json() {
		ids := make([]string, len(regs))
		for i, r := range regs {
			ids[i] = r.ID()
		}
		if err := writeJSON(out, struct {
			IDs []string `json:"ids"`
		}{ids}); err != nil {
			return errors.Join(err, closeAll())
		}
	} else {
		tw := newTable(out)
		fmt.Fprintln(tw, "ID\tTTL\tHEARTBEAT")
		for _, r := range regs {
			in := r.Instance()
			fmt.Fprintf(tw, "%s\t%ds\tevery %v\n", r.ID(), in.TTLSeconds, time.Duration(float64(in.TTLSeconds)*client.HeartbeatFraction*float64(time.Second)))
		}
		tw.Flush()
	}
	fmt.Fprintf(errOut, "keeping %d instance(s) alive; Ctrl-C deregisters them\n", len(regs))
	<-ctx.Done()
	if err := closeAll(); err != nil {
		return err
	}
	fmt.Fprintf(errOut, "deregistered %d instance(s)\n", len(regs))
	return nil
}

// readInstances reads a register body: {"instances":[...]}, one instance, or
// an array. Unknown fields are rejected here already, as the server would.
func readInstances(stdin io.Reader, name string) ([]client.Instance, error) {
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading instances: %w", err)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("reading instances from %s: empty input", name)
	}
	strict := func(v any) error {
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			return fmt.Errorf("reading instances from %s: %w", name, err)
		}
		if dec.More() {
			return fmt.Errorf("reading instances from %s: trailing data after the JSON value", name)
		}
		return nil
	}
	switch {
	case trimmed[0] == '[':
		var list []client.Instance
		return list, strict(&list)
	case bytes.Contains(trimmed, []byte(`"instances"`)):
		var body struct {
			Instances []client.Instance `json:"instances"`
		}
		return body.Instances, strict(&body)
	default:
		var one client.Instance
		if err := strict(&one); err != nil {
			return nil, err
		}
		return []client.Instance{one}, nil
	}
}

func parseMeta(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	md := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--meta %q: want key=value", kv)
		}
		md[k] = v
	}
	return md, nil
}

// parseTTL accepts whole seconds ("5") or a Go duration ("5s", "1m").
func parseTTL(s string) (int, error) { return parseSeconds("ttl", s) }

// parseSeconds reads flag --name: whole seconds ("5") or a Go duration
// ("5s", "1m").
func parseSeconds(name, s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("--%s %q: must not be negative", name, s)
		}
		return n, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d%time.Second != 0 {
		return 0, fmt.Errorf("--%s %q: want whole seconds, e.g. 5s or 5", name, s)
	}
	return int(d / time.Second), nil
}

func newDeregisterCmd(f *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "deregister ID...",
		Short: "Remove instances by id",
		Long: `Remove instances by id, all in one atomic request. Ids that do not exist are
reported and make the command fail, after the others are removed.`,
		Example: `  sextant instances deregister 3f1c9a0e2b7d4c51
  sextant instances list --service orders -o json | jq -r '.instances[].id' | xargs sextant instances deregister`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, ids []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			rev, notFound, err := c.Deregister(cmd.Context(), ids...)
			if err != nil {
				return failed("deregister", err)
			}
			missing := make(map[string]bool, len(notFound))
			for _, id := range notFound {
				missing[id] = true
			}
			out := cmd.OutOrStdout()
			if f.json() {
				if notFound == nil {
					notFound = []string{}
				}
				err = writeJSON(out, struct {
					Revision uint64   `json:"revision"`
					NotFound []string `json:"not_found"`
				}{rev, notFound})
			} else {
				tw := newTable(out)
				fmt.Fprintln(tw, "ID\tRESULT")
				for _, id := range ids {
					res := "deregistered at revision " + strconv.FormatUint(rev, 10)
					if missing[id] {
						res = "not found"
					}
					fmt.Fprintf(tw, "%s\t%s\n", id, res)
				}
				err = tw.Flush()
			}
			if err == nil && len(notFound) > 0 {
				err = fmt.Errorf("deregister: %d of %d ids not found: %s", len(notFound), len(ids), strings.Join(notFound, ", "))
			}
			return err
		},
	}
}

func newGetCmd(f *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "get ID",
		Short:   "Show one instance",
		Example: `  sextant instances get 3f1c9a0e2b7d4c51 -o json`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			in, err := c.Get(cmd.Context(), args[0])
			if err != nil {
				return failed("get "+args[0], err)
			}
			out := cmd.OutOrStdout()
			if f.json() {
				return writeJSON(out, toAPIInstance(&in))
			}
			tw := newTable(out)
			rows := [][2]string{
				{"ID", in.ID}, {"Namespace", in.Namespace}, {"Service", in.Service},
				{"Address", address(&in)}, {"Protocol", orDash(printable(in.Protocol))}, {"Version", orDash(printable(in.Version))},
				{"Weight", strconv.Itoa(in.EffectiveWeight())}, {"Status", healthWord(&in)},
				{"TTL", ttlWord(in.TTLSeconds)}, {"Revision", strconv.FormatUint(in.Revision, 10)},
				{"Created", in.CreatedAt.Format(time.RFC3339Nano)}, {"Updated", in.UpdatedAt.Format(time.RFC3339Nano)},
				{"Metadata", formatMetadata(in.Metadata)},
			}
			if in.DeregisterAfterSeconds > 0 {
				rows = slices.Insert(rows, 9, [2]string{"Deregister after", (time.Duration(in.DeregisterAfterSeconds) * time.Second).String()})
			}
			rows = append(rows, checkRows(&in)...)
			for _, r := range rows {
				fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
			}
			return tw.Flush()
		},
	}
}

func newListCmd(f *clientFlags) *cobra.Command {
	var opts client.ListOptions
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List instances across services, following pages",
		Long: `List instances, optionally narrowed to a namespace, a service, a label
selector over metadata and healthy instances only. All pages are fetched.
--service orders lists the orders instances of every namespace (a filter,
so nothing is hidden); --service prod/orders, or --namespace prod, narrows
it to one.

Selectors use the Kubernetes syntax: k=v, k==v, k!=v, k in (a,b),
k notin (a,b), k, !k; comma-separated terms must all hold.`,
		Example: `  sextant instances list
  sextant instances list --namespace prod --service orders --selector 'zone in (z1,z2),env!=dev' --healthy-only
  sextant instances list --service orders -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.Contains(opts.Service, "/") {
				var err error
				if opts.Namespace, opts.Service, err = serviceFlag(opts.Service, opts.Namespace); err != nil {
					return err
				}
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			var (
				all   = []client.Instance{}
				rev   uint64
				first = true
			)
			err = c.ListAll(cmd.Context(), opts, func(p client.ListResult) error {
				if first {
					rev, first = p.Revision, false
				}
				all = append(all, p.Instances...)
				return nil
			})
			if err != nil {
				return failed("list", err)
			}
			out := cmd.OutOrStdout()
			if f.json() {
				return writeJSON(out, struct {
					Revision  uint64        `json:"revision"`
					Instances []apiInstance `json:"instances"`
				}{rev, toAPIInstances(all)})
			}
			if len(all) == 0 {
				fmt.Fprintln(out, "no instances")
				return nil
			}
			tw := newTable(out)
			fmt.Fprintln(tw, instanceHeader)
			for i := range all {
				instanceRow(tw, &all[i])
			}
			return tw.Flush()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Namespace, "namespace", "", "only this namespace")
	fl.StringVar(&opts.Service, "service", "", "only this service: NAME (in every namespace, or --namespace's) or NAMESPACE/NAME")
	fl.StringVarP(&opts.Selector, "selector", "l", "", "label selector over labels (metadata, and version as the label version), e.g. 'zone=z1,version=v2'")
	fl.BoolVar(&opts.HealthyOnly, "healthy-only", false, "only healthy, non-isolated instances")
	fl.IntVar(&opts.Limit, "page-size", 0, "instances per request (server default 1000, at most 10000)")
	return cmd
}
