package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/internal/xds"
)

// newIdentityBootstrapCmd prints a proxyless gRPC workload's xDS
// bootstrap (grpc-go's GRPC_XDS_BOOTSTRAP file).
func newIdentityBootstrapCmd() *cobra.Command {
	var xdsAddr, namespace, dir, node string
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Print the xDS bootstrap of a proxyless gRPC workload (for GRPC_XDS_BOOTSTRAP)",
		Long: `Print the JSON bootstrap grpc-go's xDS client and server read from the file
named by $GRPC_XDS_BOOTSTRAP: the server's xDS address, the node (its namespace
in the metadata, where xds:/// targets resolve), the certificate provider
"sextant" (plugin file_watcher) over the files "sextant identity agent" keeps
in --dir, and the server listener template an xds.NewGRPCServer asks with
(docs/security.md, "Proxyless gRPC servers"). Nothing is asked of the server.`,
		Example: `  sextant identity bootstrap --namespace default --dir ./id/orders > orders.json
  GRPC_XDS_BOOTSTRAP=orders.json ./my-grpc-server`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			abs, err := filepath.Abs(dir)
			if err != nil {
				return fmt.Errorf("identity bootstrap: --dir: %w", err)
			}
			if node == "" {
				host, _ := os.Hostname()
				node = host + "." + namespace
			}
			b := map[string]any{
				"xds_servers": []any{map[string]any{
					"server_uri":      xdsAddr,
					"channel_creds":   []any{map[string]any{"type": "insecure"}},
					"server_features": []string{"xds_v3"},
				}},
				"node": map[string]any{"id": node, "metadata": map[string]string{"NAMESPACE": namespace}},
				"certificate_providers": map[string]any{xds.CertificateProvider: map[string]any{
					"plugin_name": "file_watcher",
					"config": map[string]string{
						"certificate_file":    filepath.Join(abs, "cert.pem"),
						"private_key_file":    filepath.Join(abs, "key.pem"),
						"ca_certificate_file": filepath.Join(abs, "ca.pem"),
						"refresh_interval":    "60s",
					},
				}},
				"server_listener_resource_name_template": xds.ServerListenerPrefix + "%s",
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false)
			return enc.Encode(b)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&xdsAddr, "xds", "127.0.0.1:7402", "the server's xDS address (its --xds)")
	fl.StringVar(&namespace, "namespace", "default", "the workload's namespace")
	fl.StringVar(&dir, "dir", "", `the directory "sextant identity agent" keeps the workload's files in`)
	fl.StringVar(&node, "node", "", "the node id (default HOSTNAME.NAMESPACE)")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}
