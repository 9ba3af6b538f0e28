package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/client"
)

// checkFlagHelp is --check's help: one check per flag, TYPE[=TARGET] then
// its options, comma-separated.
const checkFlagHelp = `health check the server runs (repeatable): TYPE[=TARGET][,key=value...], e.g.
"http=http://10.0.0.1:8080/health,interval=10s", "tcp,interval=5s" (target: the instance's host:port),
"grpc=10.0.0.1:9090/pkg.Svc,interval=10s", "ttl=30s"; keys: id, name, interval, timeout, method,
header=Name:Value, tls-skip-verify, success-before-passing, failures-before-critical,
deregister-critical-after, status (docs/health.md)`

// parseCheck reads one --check value.
func parseCheck(spec string) (client.Check, error) {
	var c client.Check
	parts := strings.Split(spec, ",")
	typ, target, _ := strings.Cut(parts[0], "=")
	c.Type = strings.TrimSpace(typ)
	bad := func(format string, args ...any) (client.Check, error) {
		return client.Check{}, fmt.Errorf("--check %q: "+format, append([]any{spec}, args...)...)
	}
	switch c.Type {
	case "http", "tcp":
		c.Target = target
	case "grpc":
		// host:port/service, as Consul's GRPC field.
		c.Target = target
		if addr, svc, ok := strings.Cut(target, "/"); ok {
			c.Target, c.GRPCService = addr, svc
		}
	case "ttl":
		if target == "" {
			return bad("a ttl check needs its TTL: ttl=30s")
		}
		d, err := time.ParseDuration(target)
		if err != nil {
			return bad("ttl %q is not a duration such as 30s", target)
		}
		c.TTL = client.Duration(d)
	default:
		return bad("unknown check type %q: want http, tcp, grpc or ttl", c.Type)
	}
	for _, kv := range parts[1:] {
		k, v, _ := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		dur := func(d *client.Duration) error {
			x, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("--check %q: %s %q is not a duration such as 10s", spec, k, v)
			}
			*d = client.Duration(x)
			return nil
		}
		num := func(n *int) error {
			x, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("--check %q: %s %q is not a number", spec, k, v)
			}
			*n = x
			return nil
		}
		var err error
		switch k {
		case "id":
			c.ID = v
		case "name":
			c.Name = v
		case "interval":
			err = dur(&c.Interval)
		case "timeout":
			err = dur(&c.Timeout)
		case "deregister-critical-after":
			err = dur(&c.DeregisterCriticalServiceAfter)
		case "method":
			c.Method = v
		case "header":
			name, value, ok := strings.Cut(v, ":")
			if !ok {
				return bad("header %q: want Name:Value", v)
			}
			if c.Header == nil {
				c.Header = map[string][]string{}
			}
			name = strings.TrimSpace(name)
			c.Header[name] = append(c.Header[name], strings.TrimSpace(value))
		case "tls-skip-verify":
			c.TLSSkipVerify = v == "" || v == "true"
		case "success-before-passing":
			err = num(&c.SuccessBeforePassing)
		case "failures-before-critical":
			err = num(&c.FailuresBeforeCritical)
		case "status":
			c.Status = v
		default:
			return bad("unknown key %q", k)
		}
		if err != nil {
			return client.Check{}, err
		}
	}
	return c, nil
}

func newCheckCmd(f *clientFlags) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "check ID CHECK passing|warning|critical",
		Short: "Set the status of an instance's health check (a ttl check's update)",
		Long: `Set the status of one health check of an instance: the update that keeps a
ttl check passing (it renews the TTL), or a probed check's status until its
next result changes it. Nothing is written if neither the status nor the
output changes.`,
		Example: `  sextant instances check orders-1 ttl passing --output "queue depth 3"`,
		Args:    cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			rev, err := c.SetCheck(cmd.Context(), args[0], args[1], args[2], output)
			if err != nil {
				return failed("check "+args[0]+" "+args[1], err)
			}
			if f.json() {
				return writeJSON(cmd.OutOrStdout(), map[string]uint64{"revision": rev})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s (revision %d)\n", args[0], args[1], args[2], rev)
			return nil
		},
	}
	cmd.Flags().StringVar(&output, "output", "", "the check's output: what the status is about")
	return cmd
}

// checkRows are the lines of an instance's checks in "instances get".
func checkRows(in *client.Instance) [][2]string {
	var rows [][2]string
	for _, c := range in.Checks {
		what := c.Type
		if c.Target != "" {
			what += " " + c.Target
		}
		if c.GRPCService != "" {
			what += "/" + c.GRPCService
		}
		if c.Interval != 0 {
			what += " every " + time.Duration(c.Interval).String()
		}
		if c.TTL != 0 {
			what += " " + time.Duration(c.TTL).String()
		}
		line := fmt.Sprintf("%s: %s since %s (%s)", c.ID, c.Status, c.ChangedAt.Format(time.RFC3339), what)
		if out := strings.TrimSpace(c.Output); out != "" {
			if len(out) > 120 {
				out = out[:120] + "..."
			}
			line += ": " + printable(strings.ReplaceAll(out, "\n", " "))
		}
		rows = append(rows, [2]string{"Check", line})
	}
	return rows
}
