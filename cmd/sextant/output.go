package main

// Shared plumbing of the client commands (instances, services, watch): the
// --server and --output flags, tables vs JSON, and how server errors read.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sextant-mesh/sextant/client"
)

// defaultServer is where the client commands go unless --server or
// SEXTANT_SERVER say otherwise.
const defaultServer = "http://127.0.0.1:7400"

// clientFlags are the flags every client command shares.
type clientFlags struct {
	server string
	output string
	conn   connFlags
}

// connFlags say how to reach a server: its ACL token and TLS files.
type connFlags struct {
	token    string
	caFile   string
	certFile string
	keyFile  string
}

// addClientFlags adds --server, --output, --token and the TLS flags to cmd
// and all its subcommands.
func addClientFlags(cmd *cobra.Command) *clientFlags {
	f := &clientFlags{}
	bindClientFlags(cmd, f)
	return f
}

// bindClientFlags adds --server, --output, --token and the TLS flags to
// cmd, bound to f.
func bindClientFlags(cmd *cobra.Command, f *clientFlags) {
	def := os.Getenv("SEXTANT_SERVER")
	if def == "" {
		def = defaultServer
	}
	cmd.PersistentFlags().StringVar(&f.server, "server", def, "registry server URL (env SEXTANT_SERVER); https:// for TLS")
	cmd.PersistentFlags().StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	f.conn.add(cmd.PersistentFlags())
}

// add defines --token, --ca-file, --cert-file and --key-file, with their
// environment defaults.
func (c *connFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&c.token, "token", os.Getenv("SEXTANT_TOKEN"), "ACL token sent as Authorization: Bearer (env SEXTANT_TOKEN; prefer the env: flags show in ps)")
	fl.StringVar(&c.caFile, "ca-file", os.Getenv("SEXTANT_CA_FILE"), "PEM CA certificates to trust for an https server (env SEXTANT_CA_FILE)")
	fl.StringVar(&c.certFile, "cert-file", os.Getenv("SEXTANT_CERT_FILE"), "PEM client certificate for mutual TLS (env SEXTANT_CERT_FILE)")
	fl.StringVar(&c.keyFile, "key-file", os.Getenv("SEXTANT_KEY_FILE"), "PEM key of --cert-file (env SEXTANT_KEY_FILE)")
}

// options are the client options the flags ask for.
func (c *connFlags) options() ([]client.Option, error) {
	opts := []client.Option{client.WithToken(c.token)}
	cfg, err := clientTLS(c.caFile, c.certFile, c.keyFile)
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		opts = append(opts, client.WithTLSConfig(cfg))
	}
	return opts, nil
}

// check validates the flags before a command talks to the server.
func (f *clientFlags) check() error {
	switch f.output {
	case "table", "json":
		return nil
	}
	return fmt.Errorf("unknown --output %q: use table or json", f.output)
}

func (f *clientFlags) json() bool { return f.output == "json" }

func (f *clientFlags) client() (*client.Client, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	opts, err := f.conn.options()
	if err != nil {
		return nil, err
	}
	return client.New(f.server, append(opts, client.WithUserAgent("sextant-cli/1"))...)
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// newTable returns an aligned table writer; call Flush when done.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
}

// serverError is a failed call, worded for people: what we tried, then the
// server's code, message and field.
type serverError struct {
	op  string
	err error
}

func (e *serverError) Error() string {
	var ce *client.Error
	if !errors.As(e.err, &ce) {
		return e.op + ": " + strings.TrimPrefix(e.err.Error(), "client: ")
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s: server answered %d", e.op, ce.Status)
	if ce.Code != "" {
		sb.WriteString(" " + ce.Code)
	}
	if ce.Message != "" {
		sb.WriteString(": " + ce.Message)
	}
	if ce.Field != "" {
		sb.WriteString(" (field " + ce.Field + ")")
	}
	return sb.String()
}

func (e *serverError) Unwrap() error { return e.err }

func failed(op string, err error) error {
	if err == nil {
		return nil
	}
	return &serverError{op: op, err: err}
}

// formatMetadata renders metadata as sorted k=v pairs joined by commas.
func formatMetadata(md map[string]string) string {
	if len(md) == 0 {
		return "-"
	}
	var sb strings.Builder
	for i, k := range slices.Sorted(maps.Keys(md)) {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(k)
		sb.WriteByte('=')
		sb.WriteString(printable(md[k]))
	}
	return sb.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func healthWord(in *client.Instance) string {
	switch {
	case in.Isolated && in.Healthy:
		return "isolated"
	case in.Isolated:
		return "isolated,unhealthy"
	case in.Healthy:
		return "healthy"
	}
	return "unhealthy"
}

func address(in *client.Instance) string {
	if strings.Contains(in.Host, ":") { // IPv6
		return fmt.Sprintf("[%s]:%d", in.Host, in.Port)
	}
	return fmt.Sprintf("%s:%d", in.Host, in.Port)
}

func ttlWord(s int) string {
	if s == 0 {
		return "-"
	}
	return fmt.Sprintf("%ds", s)
}

// instanceHeader and instanceRow are the columns of instance tables.
const instanceHeader = "NAMESPACE\tSERVICE\tID\tADDRESS\tPROTOCOL\tVERSION\tWEIGHT\tSTATUS\tTTL\tREVISION\tMETADATA"

func instanceRow(w io.Writer, in *client.Instance) {
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\n",
		in.Namespace, in.Service, in.ID, address(in), orDash(printable(in.Protocol)), orDash(printable(in.Version)),
		in.EffectiveWeight(), healthWord(in), ttlWord(in.TTLSeconds), in.Revision, formatMetadata(in.Metadata))
}

// writeJSONLine prints v as one line of compact JSON.
func writeJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// allPages fetches pages from token on until one has no next token, and
// returns their items (never nil, so JSON shows []) and the revision of the
// first page.
func allPages[T any](token string, fetch func(token string) (items []T, rev int64, next string, err error)) ([]T, int64, error) {
	all := []T{}
	var first int64
	for i := 0; i == 0 || token != ""; i++ {
		items, rev, next, err := fetch(token)
		if err != nil {
			return nil, 0, err
		}
		if i == 0 {
			first = rev
		}
		all = append(all, items...)
		token = next
	}
	return all, first, nil
}
