package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func init() { rootCmd.AddCommand(newKVCmd()) }

// kvFlags say which server's Consul API the kv commands talk to.
type kvFlags struct {
	addr   string
	output string
	conn   connFlags
}

// newKVCmd builds "sextant kv": Consul's KV store of a server started with
// --consul-api, read and written over that API.
func newKVCmd() *cobra.Command {
	f := &kvFlags{}
	cmd := &cobra.Command{
		Use:   "kv",
		Short: "Get, put, delete and watch keys of the Consul KV store (--consul-api)",
		Long: `Read and write the Consul KV store that "sextant server --consul-api" serves
(docs/compat.md): the keys of its --consul-namespace, the same ones Consul's
clients, consul-template and Vault's Consul storage see.

The commands talk to the server's Consul API: --consul, default
$SEXTANT_CONSUL, else $CONSUL_HTTP_ADDR, else http://127.0.0.1:8500 (an
address without a scheme is http). With ACLs on, --token (or
$SEXTANT_TOKEN, else $CONSUL_HTTP_TOKEN) is a Sextant token with kv:read
to read and kv:write to write the namespace.`,
		Example: `  sextant kv put app/config/db postgres://db:5432
  sextant kv get app/config/db
  sextant kv get --recurse app/
  sextant kv watch --recurse app/config/`,
	}
	def := os.Getenv("SEXTANT_CONSUL")
	if def == "" {
		def = os.Getenv("CONSUL_HTTP_ADDR")
	}
	if def == "" {
		def = "http://127.0.0.1:8500"
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.addr, "consul", def, "the server's Consul API (its --consul-api address; env SEXTANT_CONSUL, CONSUL_HTTP_ADDR); https:// for TLS")
	pf.StringVarP(&f.output, "output", "o", "text", "output format: text (values as they are) or json (the API's entries, values in base64)")
	f.conn.add(pf)
	cmd.AddCommand(newKVGetCmd(f), newKVPutCmd(f), newKVDeleteCmd(f), newKVWatchCmd(f))
	return cmd
}

// kvEntry is an entry as Consul's API answers it.
type kvEntry struct {
	Key         string
	Value       []byte // base64 in JSON, as the API
	Flags       uint64
	CreateIndex uint64
	ModifyIndex uint64
	LockIndex   uint64
	Session     string `json:",omitempty"`
}

// kvClient speaks the KV part of Consul's HTTP API.
type kvClient struct {
	base  *url.URL
	token string
	hc    *http.Client
}

func (f *kvFlags) client() (*kvClient, error) {
	if f.output != "text" && f.output != "json" {
		return nil, fmt.Errorf("unknown --output %q: use text or json", f.output)
	}
	addr := f.addr
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("--consul %q: want an address such as http://127.0.0.1:8500", f.addr)
	}
	tlsCfg, err := clientTLS(f.conn.caFile, f.conn.certFile, f.conn.keyFile)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	tok := f.conn.token
	if tok == "" {
		tok = os.Getenv("CONSUL_HTTP_TOKEN")
	}
	// No overall timeout: a watch's blocking reads last up to their wait.
	return &kvClient{base: u, token: tok, hc: &http.Client{Transport: tr}}, nil
}

// errNoKey is a read of a key that does not exist.
var errNoKey = errors.New("no such key")

// do sends one request for key and returns the answer's body and index.
// A 404 is errNoKey; any other status but 200 an error quoting the server.
func (c *kvClient) do(ctx context.Context, method, key string, q url.Values, body []byte) ([]byte, uint64, error) {
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/kv/" + key
	u.RawQuery = q.Encode()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, 0, err
	}
	if c.token != "" {
		req.Header.Set("X-Consul-Token", c.token)
	}
	req.Header.Set("User-Agent", "sextant-cli/1")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, 0, err
	}
	index, _ := strconv.ParseUint(resp.Header.Get("X-Consul-Index"), 10, 64)
	switch resp.StatusCode {
	case http.StatusOK:
		return b, index, nil
	case http.StatusNotFound:
		return nil, index, errNoKey
	}
	return nil, 0, fmt.Errorf("server answered %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
}

// entries reads key (with recurse: every key under the prefix).
func (c *kvClient) entries(ctx context.Context, key string, recurse bool, index uint64, wait time.Duration) ([]kvEntry, uint64, error) {
	q := url.Values{}
	if recurse {
		q.Set("recurse", "")
	}
	if index > 0 {
		q.Set("index", strconv.FormatUint(index, 10))
		q.Set("wait", wait.String())
	}
	b, idx, err := c.do(ctx, http.MethodGet, key, q, nil)
	if errors.Is(err, errNoKey) {
		return nil, idx, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var out []kvEntry
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, 0, fmt.Errorf("reading the server's answer: %w", err)
	}
	return out, idx, nil
}

func newKVGetCmd(f *kvFlags) *cobra.Command {
	var recurse, keys bool
	var sep string
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Print a key's value, or the keys and values under a prefix",
		Long: `Print the value of KEY as it is stored, followed by a newline. A key that
does not exist is an error (exit 1).

--recurse prints every key under the prefix KEY as KEY:VALUE lines, in key
order; --keys prints the keys alone, and with --separator (default /) stops
at the next separator, as a directory listing. With -o json the entries are
printed as the API answers them (values in base64, flags, indexes and the
session holding a lock).`,
		Example: `  sextant kv get app/config/db
  sextant kv get --recurse app/
  sextant kv get --keys app/`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			key, out := args[0], cmd.OutOrStdout()
			if keys {
				if recurse {
					return errors.New("kv get: --keys and --recurse go apart: --keys lists the keys, --recurse the keys and values")
				}
				q := url.Values{"keys": {""}}
				if sep != "" {
					q.Set("separator", sep)
				}
				b, _, err := c.do(cmd.Context(), http.MethodGet, key, q, nil)
				if errors.Is(err, errNoKey) {
					return fmt.Errorf("kv get: no key under %q", key)
				}
				if err != nil {
					return fmt.Errorf("kv get: %w", err)
				}
				var list []string
				if err := json.Unmarshal(b, &list); err != nil {
					return fmt.Errorf("kv get: reading the server's answer: %w", err)
				}
				if f.output == "json" {
					return writeJSON(out, list)
				}
				for _, k := range list {
					fmt.Fprintln(out, k)
				}
				return nil
			}
			es, _, err := c.entries(cmd.Context(), key, recurse, 0, 0)
			if err != nil {
				return fmt.Errorf("kv get: %w", err)
			}
			if len(es) == 0 {
				if recurse {
					return fmt.Errorf("kv get: no key under %q", key)
				}
				return fmt.Errorf("kv get: no key %q", key)
			}
			if f.output == "json" {
				if !recurse {
					return writeJSON(out, es[0])
				}
				return writeJSON(out, es)
			}
			if !recurse {
				_, err := fmt.Fprintf(out, "%s\n", es[0].Value)
				return err
			}
			for _, e := range es {
				fmt.Fprintf(out, "%s:%s\n", e.Key, e.Value)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&recurse, "recurse", false, "print every key under the prefix KEY, as KEY:VALUE lines")
	cmd.Flags().BoolVar(&keys, "keys", false, "print the keys under the prefix KEY, without values")
	cmd.Flags().StringVar(&sep, "separator", "/", "with --keys: list up to the next separator only (empty: every key)")
	return cmd
}

func newKVPutCmd(f *kvFlags) *cobra.Command {
	var flags uint64
	var cas int64
	cmd := &cobra.Command{
		Use:   "put KEY [VALUE|-|@FILE]",
		Short: "Write a key's value",
		Long: `Write VALUE to KEY, creating or replacing it. VALUE "-" reads the value
from standard input, "@FILE" from a file; none writes an empty value. Values
are bytes: nothing is added or trimmed.

--cas INDEX writes only if the key's ModifyIndex is still INDEX (0: only if
the key does not exist), and fails (exit 1) otherwise: a check-and-set for
writers that must not lose each other's updates. --flags stores an opaque
number with the key, as Consul's clients use it.`,
		Example: `  sextant kv put app/config/db postgres://db:5432
  sextant kv put app/config/tls @cert.pem
  echo on | sextant kv put app/feature/x -
  sextant kv put --cas 0 app/owner me      # only if nobody wrote it yet`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			key := args[0]
			var value []byte
			if len(args) == 2 {
				switch v := args[1]; {
				case v == "-":
					value, err = io.ReadAll(cmd.InOrStdin())
				case strings.HasPrefix(v, "@"):
					value, err = os.ReadFile(v[1:])
				default:
					value = []byte(v)
				}
				if err != nil {
					return fmt.Errorf("kv put: reading the value: %w", err)
				}
			}
			q := url.Values{}
			if cmd.Flags().Changed("flags") {
				q.Set("flags", strconv.FormatUint(flags, 10))
			}
			if cmd.Flags().Changed("cas") {
				if cas < 0 {
					return fmt.Errorf("kv put: --cas %d: an index is 0 or more", cas)
				}
				q.Set("cas", strconv.FormatInt(cas, 10))
			}
			b, _, err := c.do(cmd.Context(), http.MethodPut, key, q, value)
			if err != nil {
				return fmt.Errorf("kv put: %w", err)
			}
			if strings.TrimSpace(string(b)) != "true" {
				if !cmd.Flags().Changed("cas") {
					return fmt.Errorf("kv put: the server did not write %q (it answered %s)", key, strings.TrimSpace(string(b)))
				}
				if cas == 0 {
					return fmt.Errorf("kv put: %q exists; --cas 0 writes only a new key", key)
				}
				return fmt.Errorf("kv put: %q changed since index %d (or does not exist); nothing written", key, cas)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: written\n", key)
			return nil
		},
	}
	cmd.Flags().Uint64Var(&flags, "flags", 0, "an opaque number stored with the key")
	cmd.Flags().Int64Var(&cas, "cas", 0, "write only if the key's ModifyIndex is this index (0: only if it does not exist)")
	return cmd
}

func newKVDeleteCmd(f *kvFlags) *cobra.Command {
	var recurse bool
	var cas int64
	cmd := &cobra.Command{
		Use:   "delete KEY",
		Short: "Delete a key, or every key under a prefix",
		Long: `Delete KEY; deleting a key that does not exist succeeds. --recurse deletes
every key under the prefix KEY, in one write. --cas INDEX deletes only if the
key's ModifyIndex is still INDEX, and fails (exit 1) otherwise.`,
		Example: `  sextant kv delete app/config/db
  sextant kv delete --recurse app/`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			key := args[0]
			q := url.Values{}
			if recurse {
				if cmd.Flags().Changed("cas") {
					return errors.New("kv delete: --cas deletes one key; it does not go with --recurse")
				}
				q.Set("recurse", "")
			}
			if cmd.Flags().Changed("cas") {
				q.Set("cas", strconv.FormatInt(cas, 10))
			}
			b, _, err := c.do(cmd.Context(), http.MethodDelete, key, q, nil)
			if err != nil {
				return fmt.Errorf("kv delete: %w", err)
			}
			if strings.TrimSpace(string(b)) != "true" {
				return fmt.Errorf("kv delete: %q changed since index %d; nothing deleted", key, cas)
			}
			what := key
			if recurse {
				what = "every key under " + strconv.Quote(key)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: deleted\n", what)
			return nil
		},
	}
	cmd.Flags().BoolVar(&recurse, "recurse", false, "delete every key under the prefix KEY")
	cmd.Flags().Int64Var(&cas, "cas", 0, "delete only if the key's ModifyIndex is this index")
	return cmd
}

func newKVWatchCmd(f *kvFlags) *cobra.Command {
	var recurse bool
	var count int
	cmd := &cobra.Command{
		Use:   "watch KEY",
		Short: "Follow a key, or a prefix, and print each change as it happens",
		Long: `Follow KEY with blocking reads (as consul-template does) and print its value
each time it changes, starting with the current one; "KEY deleted" when it
is removed. --recurse follows every key under the prefix KEY and prints each
key that changed as KEY:VALUE, each removed one as "KEY deleted".

With -o json each change is one JSON object per line: the entry as the API
answers it, or {"Key": ..., "Deleted": true}. The watch runs until
interrupted (Ctrl-C) or, with --count, after that many changes (the current
state counts as the first). Transient errors (a server restarting) are
reported on stderr and retried.`,
		Example: `  sextant kv watch app/config/db
  sextant kv watch --recurse app/config/ -o json
  sextant kv watch app/leader --count 2    # the current value, then the next`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if count < 0 {
				return fmt.Errorf("kv watch: --count must not be negative")
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			return kvWatch(cmd.Context(), c, args[0], recurse, count, f.output == "json", cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().BoolVar(&recurse, "recurse", false, "follow every key under the prefix KEY")
	cmd.Flags().IntVar(&count, "count", 0, "stop after this many changes (0: until interrupted)")
	return cmd
}

// kvWatch prints the changes of key (or the prefix) until ctx ends or
// count changes were printed.
func kvWatch(ctx context.Context, c *kvClient, key string, recurse bool, count int, asJSON bool, out, errOut io.Writer) error {
	seen := map[string]uint64{} // key -> the ModifyIndex printed
	var index uint64
	printed, first, backoff := 0, true, time.Second
	emit := func(e kvEntry, deleted bool) bool {
		switch {
		case asJSON && deleted:
			b, _ := json.Marshal(map[string]any{"Key": e.Key, "Deleted": true})
			fmt.Fprintf(out, "%s\n", b)
		case asJSON:
			b, _ := json.Marshal(e)
			fmt.Fprintf(out, "%s\n", b)
		case deleted:
			fmt.Fprintf(out, "%s deleted\n", e.Key)
		case recurse:
			fmt.Fprintf(out, "%s:%s\n", e.Key, e.Value)
		default:
			fmt.Fprintf(out, "%s\n", e.Value)
		}
		printed++
		return count > 0 && printed >= count
	}
	for {
		es, idx, err := c.entries(ctx, key, recurse, index, 5*time.Minute)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			fmt.Fprintf(errOut, "sextant: kv watch: %v; retrying in %v\n", err, backoff)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		if idx < index {
			index = 0 // the server's index went back (a restore): read afresh
		} else {
			index = max(idx, 1)
		}
		sort.Slice(es, func(i, j int) bool { return es[i].Key < es[j].Key })
		now := map[string]bool{}
		for _, e := range es {
			if !recurse && e.Key != key {
				continue
			}
			now[e.Key] = true
			if seen[e.Key] == e.ModifyIndex {
				continue
			}
			seen[e.Key] = e.ModifyIndex
			if emit(e, false) {
				return nil
			}
		}
		gone := make([]string, 0)
		for k := range seen {
			if !now[k] {
				gone = append(gone, k)
			}
		}
		sort.Strings(gone)
		for _, k := range gone {
			delete(seen, k)
			if emit(kvEntry{Key: k}, true) {
				return nil
			}
		}
		if first && !recurse && len(now) == 0 {
			fmt.Fprintf(errOut, "sextant: kv watch: %q does not exist yet; waiting for it\n", key)
		}
		first = false
	}
}
