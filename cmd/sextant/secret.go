package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/client"
)

func init() { rootCmd.AddCommand(newSecretCmd()) }

// newSecretCmd builds "sextant secret": TLS secrets a Gateway's
// credentialName names, like kubectl's TLS secrets.
func newSecretCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secret",
		Short: "Create, list, show and delete TLS secrets (certificates for gateways)",
		Long: `A TLS secret holds a certificate chain, its private key and, for mutual TLS,
the CA that verifies the other side (Istio's ca.crt). A CA secret holds CA
certificates only (a Kubernetes generic secret with just ca.crt). An Istio
Gateway server names a TLS secret by tls.credentialName; a DestinationRule's
trafficPolicy.tls names one for mode MUTUAL (the gateway's client certificate)
and a TLS or CA secret for mode SIMPLE (the CA that verifies the endpoints; a
CA secret NAME-cacert beside a TLS secret NAME is read as its CA, as in
Istio). The control plane sends them to gateways over SDS. The server checks
a secret when it is written (the PEM parses, the key matches the certificate,
no certificate has expired) and never shows the key or the PEM back: list and
get show names, subject alternative names, expiry and the SHA-256
fingerprint. Writing needs the ACL permission secret:write on the namespace,
reading secret:read (docs/controlplane.md).`,
	}
	f := addClientFlags(cmd)
	var namespace string
	cmd.PersistentFlags().StringVarP(&namespace, "namespace", "n", "default", "the secret's namespace")

	var certFile, keyFile, caFile string
	var replace bool
	create := &cobra.Command{
		Use:   "create tls|ca NAME [--cert FILE --key FILE] [--ca FILE]",
		Short: "Create (or with --replace, rotate) a TLS or CA secret from PEM files",
		Example: `  sextant secret create tls shop-cert --cert shop.crt --key shop.key
  sextant secret create tls shop-cert --cert new.crt --key new.key --replace   # rotate
  sextant secret create tls mtls-cert --cert s.crt --key s.key --ca clients-ca.crt
  sextant secret create ca backend-ca --ca backend-ca.crt   # CA only: DestinationRule tls SIMPLE`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch args[0] {
			case "tls":
				if certFile == "" || keyFile == "" {
					return fmt.Errorf("secret create tls: --cert and --key are required")
				}
			case "ca":
				if caFile == "" || certFile != "" || keyFile != "" {
					return fmt.Errorf("secret create ca: --ca is required, --cert and --key are not used (a CA secret holds CA certificates only)")
				}
			default:
				return fmt.Errorf("secret create: %q: want tls (a certificate and key) or ca (CA certificates only)", args[0])
			}
			s := client.TLSSecret{Namespace: namespace, Name: args[1], Type: args[0]}
			for _, x := range []struct {
				flag, file string
				to         *string
			}{{"--cert", certFile, &s.Cert}, {"--key", keyFile, &s.Key}, {"--ca", caFile, &s.CA}} {
				if x.file == "" {
					continue
				}
				b, err := os.ReadFile(x.file)
				if err != nil {
					return fmt.Errorf("secret create %s: %s: %w", args[0], x.flag, err)
				}
				*x.to = string(b)
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			res, err := c.PutSecret(cmd.Context(), s, replace)
			if err != nil {
				return failed("secret create "+args[0]+" "+args[1], err)
			}
			if f.json() {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			i := res.Secret
			fmt.Fprintf(cmd.OutOrStdout(), "secret %s/%s %s (revision %d): %s, not after %s, sha256 %s\n", i.Namespace, i.Name, res.Action,
				res.Revision, strings.Join(append(i.DNSNames, i.IPAddresses...), ","), i.NotAfter.Format(time.RFC3339), i.Fingerprint)
			return nil
		},
	}
	create.Flags().StringVar(&certFile, "cert", "", "PEM certificate chain (leaf first)")
	create.Flags().StringVar(&keyFile, "key", "", "PEM private key of the leaf")
	create.Flags().StringVar(&caFile, "ca", "", "PEM CA certificates (ca.crt): of a Gateway's MUTUAL clients, or of the endpoints a DestinationRule's tls trusts")
	create.Flags().BoolVar(&replace, "replace", false, "replace the secret if it exists (rotation)")

	var all bool
	list := &cobra.Command{
		Use:     "list",
		Short:   "List secrets (metadata only)",
		Example: "  sextant secret list --all-namespaces",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			ns := namespace
			if all {
				ns = ""
			}
			items, err := c.ListSecrets(cmd.Context(), ns)
			if err != nil {
				return failed("secret list", err)
			}
			if f.json() {
				return writeJSON(cmd.OutOrStdout(), items)
			}
			if len(items) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no secrets")
				return nil
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "NAMESPACE\tNAME\tNAMES\tNOT AFTER\tCA\tREVISION")
			for _, i := range items {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", i.Namespace, i.Name, strings.Join(append(i.DNSNames, i.IPAddresses...), ","),
					i.NotAfter.Format(time.RFC3339), i.CA, i.Revision)
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVarP(&all, "all-namespaces", "A", false, "every namespace you may read")

	get := &cobra.Command{
		Use:     "get NAME",
		Short:   "Show a secret's metadata (never its key)",
		Example: "  sextant secret get shop-cert -o json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			i, err := c.GetSecret(cmd.Context(), namespace, args[0])
			if err != nil {
				return failed("secret get "+args[0], err)
			}
			if f.json() {
				return writeJSON(cmd.OutOrStdout(), i)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "secret:      %s/%s (revision %d)\nsubject:     %s\nissuer:      %s\nnames:       %s\nnot before:  %s\nnot after:   %s\nkey:         %s\nchain:       %d certificates\nca:          %d certificates\nsha256:      %s\n",
				i.Namespace, i.Name, i.Revision, i.Subject, i.Issuer, strings.Join(append(i.DNSNames, i.IPAddresses...), ","),
				i.NotBefore.Format(time.RFC3339), i.NotAfter.Format(time.RFC3339), i.KeyType, i.Chain, i.CA, i.Fingerprint)
			return nil
		},
	}
	del := &cobra.Command{
		Use:     "delete NAME",
		Short:   "Delete a secret",
		Example: "  sextant secret delete shop-cert",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			rev, err := c.DeleteSecret(cmd.Context(), namespace, args[0])
			if err != nil {
				return failed("secret delete "+args[0], err)
			}
			if f.json() {
				return writeJSON(cmd.OutOrStdout(), map[string]int64{"revision": rev})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted secret %s/%s (revision %d)\n", namespace, args[0], rev)
			return nil
		},
	}
	cmd.AddCommand(create, list, get, del)
	return cmd
}
