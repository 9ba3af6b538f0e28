package main

import (
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/client"
)

func init() { rootCmd.AddCommand(newIdentityCmd()) }

// newIdentityCmd builds "sextant identity" afresh (tests build their own).
func newIdentityCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "identity",
		Short: "Get workload certificates from the server's authority and keep them fresh",
		Long: `Workload identities (docs/security.md, "Workload identity"): the server's
certificate authority signs short-lived certificates for SPIFFE IDs
spiffe://TRUST_DOMAIN/ns/NAMESPACE/sa/NAME. The key is made here and never
leaves this machine. With ACLs on, the token needs identity:write on the
namespace.

"sextant identity agent" writes cert.pem, key.pem and ca.pem into --dir and
keeps them fresh (a new certificate at half of its lifetime, and at once
when the authority's root rotates): point grpc-go's file_watcher
certificate provider, or any TLS server, at them.`,
	}
	f := addClientFlags(cmd)
	cmd.AddCommand(newIdentityCertCmd(f), newIdentityAgentCmd(f), newIdentityBundleCmd(f), newIdentityRotateCmd(f), newIdentityBootstrapCmd())
	return cmd
}

type identityArgs struct {
	namespace, account, dir string
	ttl                     time.Duration
}

func (a *identityArgs) bind(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&a.namespace, "namespace", "default", "namespace of the identity")
	fl.StringVar(&a.account, "service-account", "default", "service account of the identity")
	fl.StringVar(&a.dir, "dir", "", "directory to write cert.pem, key.pem and ca.pem into (created 0700)")
	fl.DurationVar(&a.ttl, "ttl", 0, "certificate lifetime (default: the server's --cert-ttl)")
	_ = cmd.MarkFlagRequired("dir")
}

func newIdentityCertCmd(f *clientFlags) *cobra.Command {
	var a identityArgs
	cmd := &cobra.Command{
		Use:     "cert",
		Short:   "Get one certificate and write it, its key and the trust bundle into --dir",
		Example: "  sextant identity cert --namespace orders --service-account api --dir ./orders-api",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			cert, err := c.Certificate(cmd.Context(), a.namespace, a.account, a.ttl)
			if err != nil {
				return failed("get a certificate", err)
			}
			if err := client.WriteIdentity(a.dir, cert); err != nil {
				return err
			}
			return printCertificate(cmd, f, a.dir, cert)
		},
	}
	a.bind(cmd)
	return cmd
}

func printCertificate(cmd *cobra.Command, f *clientFlags, dir string, cert client.Certificate) error {
	if f.json() {
		cert.CertificateChain, cert.Bundle = "", "" // in the files; keep the output short
		return writeJSON(cmd.OutOrStdout(), struct {
			client.Certificate
			Dir string `json:"dir"`
		}{cert, dir})
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s  valid until %s  written to %s\n", cert.Identity, cert.NotAfter.Local().Format(time.RFC3339), dir)
	return nil
}

func newIdentityAgentCmd(f *clientFlags) *cobra.Command {
	var a identityArgs
	var check time.Duration
	var sds string
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Keep a certificate, its key and the trust bundle in --dir fresh until stopped",
		Long: `Keep the workload's certificate, key and trust bundle in --dir fresh: a new
certificate at half of its lifetime, and at once when the root rotates.
With --sds unix://PATH it also serves them over SDS on that unix socket
(0600), as istio-agent does for Envoy: the secret "default" (certificate
chain and key) and "ROOTCA" (the roots), pushed again at every renewal.`,
		Example: `  sextant identity agent --namespace orders --service-account api --dir /var/run/sextant/orders-api
  # then, in grpc-go's xDS bootstrap: "certificate_providers": {"sextant": {"plugin_name": "file_watcher",
  #   "config": {"certificate_file": ".../cert.pem", "private_key_file": ".../key.pem", "ca_certificate_file": ".../ca.pem"}}}
  sextant identity agent --namespace orders --service-account api \
      --dir /var/run/sextant/orders-api --sds unix:///var/run/sextant/orders-api/sds.sock`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context() // cancelled by SIGINT and SIGTERM (main.go)
			errOut := cmd.ErrOrStderr()
			publish := func(client.Certificate) {}
			if sds != "" {
				agent, err := startSDSAgent(ctx, sds)
				if err != nil {
					return err
				}
				defer agent.stop()
				publish = agent.publish
			}
			err = c.KeepIdentity(ctx, a.namespace, a.account, a.dir, a.ttl, check,
				func(cert client.Certificate) {
					publish(cert)
					_ = printCertificate(cmd, f, a.dir, cert)
				},
				func(err error) { fmt.Fprintf(errOut, "sextant identity agent: %v (retrying)\n", err) })
			if ctx.Err() != nil {
				return nil // stopped by a signal
			}
			return failed("keep the identity", err)
		},
	}
	a.bind(cmd)
	cmd.Flags().DurationVar(&check, "check", time.Minute, "how often to look for a rotated root")
	cmd.Flags().StringVar(&sds, "sds", "", "also serve the certificate over SDS on this unix socket (unix://PATH): \"default\" and \"ROOTCA\", for Envoy")
	return cmd
}

func newIdentityBundleCmd(f *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "bundle",
		Short: "Print the trust bundle (the roots workloads trust) as PEM, or its roots with -o json",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			b, err := c.TrustBundle(cmd.Context())
			if err != nil {
				return failed("read the trust bundle", err)
			}
			if f.json() {
				return writeJSON(cmd.OutOrStdout(), b)
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), b.Bundle)
			return err
		},
	}
}

func newIdentityRotateCmd(f *clientFlags) *cobra.Command {
	var certFile, keyFile string
	cmd := &cobra.Command{
		Use:   "rotate",
		Short: "Rotate the authority's root: a new generated one, or your CA from --ca-cert/--ca-key (admin)",
		Long: `Make a new root (or your own CA) the signer. The old root stays in the trust
bundle for the server's --cert-max-ttl, so certificates it signed keep
verifying while workloads renew theirs; agents renew at once when they see
the new bundle.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (certFile == "") != (keyFile == "") {
				return fmt.Errorf("--ca-cert and --ca-key go together")
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			var req struct {
				Certificate string `json:"certificate,omitempty"`
				Key         string `json:"key,omitempty"`
			}
			if certFile != "" {
				cb, err := os.ReadFile(certFile)
				if err != nil {
					return err
				}
				kb, err := os.ReadFile(keyFile)
				if err != nil {
					return err
				}
				req.Certificate, req.Key = string(cb), string(kb)
			}
			var b client.TrustBundle
			if err := c.Call(cmd.Context(), http.MethodPost, "/v1/identity/rotate", req, &b); err != nil {
				return failed("rotate the root", err)
			}
			if f.json() {
				return writeJSON(cmd.OutOrStdout(), b)
			}
			for _, r := range b.Roots {
				state := "trusted until its certificates expire"
				if r.Signing {
					state = "signing"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s  %s  sha256:%s\n", state, r.Subject, r.SHA256[:16])
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&certFile, "ca-cert", "", "PEM certificate of your CA (a root, or an intermediate followed by its issuers)")
	cmd.Flags().StringVar(&keyFile, "ca-key", "", "PEM private key of --ca-cert")
	return cmd
}
