package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// captureChain is the nat chain of the capture rules (Istio's init names
// its ISTIO_OUTPUT).
const captureChain = "SEXTANT_OUTPUT"

type captureFlags struct {
	outboundPort int
	include      []string
	excludeUID   int
	cleanup      bool
	dryRun       bool
}

func newCaptureCmd() *cobra.Command {
	var f captureFlags
	cmd := &cobra.Command{
		Use:   "capture",
		Short: "Send the workload's outbound TCP to its sidecar with iptables, as Istio's init container does",
		Long: `Install the iptables rules (nat table, chain SEXTANT_OUTPUT) that send the
workload's outbound TCP connections to the sidecar's --outbound port, so that
an app's plain "GET http://orders:8080/" goes through the mesh without a proxy
setting: run it once in the workload's network namespace (as root, or with
CAP_NET_ADMIN), before the app starts, as Istio's init container runs
istio-iptables.

Connections to --include-cidrs (the services' virtual addresses, e.g. a
Kubernetes cluster's service range) are redirected; "*" takes every
destination and then needs --exclude-uid, the user the sidecar runs as, so
that the sidecar's own connections are not sent back to it. Loopback is never
redirected. --dry-run prints the iptables commands instead; --cleanup removes
the rules. See docs/sidecar.md.`,
		Example: `  sextant sidecar capture --outbound-port 15001 --include-cidrs 10.96.0.0/12
  sextant sidecar capture --outbound-port 15001 --include-cidrs '*' --exclude-uid 1337 --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmds, err := f.commands()
			if err != nil {
				return err
			}
			if f.dryRun {
				for _, c := range cmds {
					fmt.Fprintln(cmd.OutOrStdout(), "iptables "+strings.Join(c, " "))
				}
				return nil
			}
			return runIptables(cmds, f.cleanup)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.outboundPort, "outbound-port", 15001, "the sidecar's --outbound port, where captured connections go")
	fl.StringSliceVar(&f.include, "include-cidrs", nil, `destinations to capture, CIDRs (comma-separated or repeated), or "*" for all (required)`)
	fl.IntVar(&f.excludeUID, "exclude-uid", -1, "the sidecar's user id: its connections are never captured (required with --include-cidrs '*')")
	fl.BoolVar(&f.cleanup, "cleanup", false, "remove the rules instead")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the iptables commands, run nothing")
	return cmd
}

// commands are the iptables argument lists that install (or, with
// cleanup, remove) the capture.
func (f captureFlags) commands() ([][]string, error) {
	nat := func(args ...string) []string { return append([]string{"-t", "nat"}, args...) }
	if f.cleanup {
		return [][]string{nat("-D", "OUTPUT", "-p", "tcp", "-j", captureChain), nat("-F", captureChain), nat("-X", captureChain)}, nil
	}
	if f.outboundPort <= 0 || f.outboundPort > 65535 {
		return nil, fmt.Errorf("--outbound-port %d: want the sidecar's outbound port, 1 to 65535", f.outboundPort)
	}
	if len(f.include) == 0 {
		return nil, errors.New(`--include-cidrs: required: the services' addresses to capture (CIDRs), or "*"`)
	}
	out := [][]string{nat("-N", captureChain), nat("-A", "OUTPUT", "-p", "tcp", "-j", captureChain)}
	if f.excludeUID >= 0 {
		out = append(out, nat("-A", captureChain, "-m", "owner", "--uid-owner", strconv.Itoa(f.excludeUID), "-j", "RETURN"))
	}
	out = append(out, nat("-A", captureChain, "-d", "127.0.0.0/8", "-j", "RETURN"))
	port := strconv.Itoa(f.outboundPort)
	for _, c := range f.include {
		if c == "*" {
			if f.excludeUID < 0 {
				return nil, errors.New(`--include-cidrs "*": needs --exclude-uid, the sidecar's user, or its own connections would be sent back to it`)
			}
			out = append(out, nat("-A", captureChain, "-p", "tcp", "-j", "REDIRECT", "--to-ports", port))
			continue
		}
		p, err := netip.ParsePrefix(c)
		if err != nil || !p.Addr().Is4() {
			return nil, fmt.Errorf("--include-cidrs %q: want an IPv4 CIDR such as 10.96.0.0/12, or \"*\"", c)
		}
		out = append(out, nat("-A", captureChain, "-p", "tcp", "-d", p.Masked().String(), "-j", "REDIRECT", "--to-ports", port))
	}
	return out, nil
}

// runIptables runs each command; a failure stops the install (and is only
// reported after trying every step of a cleanup).
func runIptables(cmds [][]string, cleanup bool) error {
	bin, err := exec.LookPath("iptables")
	if err != nil {
		return errors.New("sidecar capture: iptables is not installed (Debian: apt-get install iptables)")
	}
	var errs []error
	for _, c := range cmds {
		if out, err := exec.Command(bin, c...).CombinedOutput(); err != nil {
			err = fmt.Errorf("sidecar capture: iptables %s: %v: %s", strings.Join(c, " "), err, strings.TrimSpace(string(out)))
			if !cleanup {
				return err
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
