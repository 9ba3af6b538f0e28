package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/internal/acl"
)

func init() { rootCmd.AddCommand(newACLCmd()) }

// aclToken is a token as the /v1/acl routes answer it.
type aclToken struct {
	AccessorID  string    `json:"accessor_id"`
	Secret      string    `json:"secret,omitempty"`
	Description string    `json:"description,omitempty"`
	Policies    []string  `json:"policies"`
	CreatedAt   time.Time `json:"created_at"`
	Revision    int64     `json:"revision,omitempty"`
}

// tokenList and policyList are the listings of /v1/acl/tokens and
// /v1/acl/policies.
type (
	tokenList struct {
		Revision int64      `json:"revision"`
		Tokens   []aclToken `json:"tokens"`
	}
	policyList struct {
		Revision int64        `json:"revision"`
		Policies []acl.Policy `json:"policies"`
	}
)

// newACLCmd builds "sextant acl" afresh (tests build their own).
func newACLCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "acl",
		Short: "Bootstrap ACLs and manage tokens and policies",
		Long: `Manage the access control of a server started with --acl (docs/security.md).

"sextant acl bootstrap" creates the first token, with the built-in admin
policy; it works once per server (or cluster). Then, with an admin token in
SEXTANT_TOKEN or --token, create policies (what may be done where) and tokens
linked to them. A token's secret is printed once, at its creation: the server
keeps only its hash. Tokens are named by their accessor id, which is not
secret.`,
	}
	f := addClientFlags(cmd)
	token := &cobra.Command{Use: "token", Short: "Create, list and delete tokens"}
	token.AddCommand(newTokenCreateCmd(f), newTokenListCmd(f), newTokenDeleteCmd(f))
	policy := &cobra.Command{Use: "policy", Short: "Create, list, read and delete policies"}
	policy.AddCommand(newPolicyCreateCmd(f), newPolicyListCmd(f), newPolicyGetCmd(f), newPolicyDeleteCmd(f))
	cmd.AddCommand(newBootstrapCmd(f), token, policy)
	return cmd
}

// printSecret shows a new token; the secret is shown this once.
func printSecret(cmd *cobra.Command, f *clientFlags, t aclToken) error {
	out := cmd.OutOrStdout()
	if f.json() {
		return writeJSON(out, t)
	}
	fmt.Fprintf(out, "AccessorID:   %s\nSecretID:     %s\nDescription:  %s\nPolicies:     %s\n",
		t.AccessorID, t.Secret, t.Description, strings.Join(t.Policies, ", "))
	fmt.Fprintln(cmd.ErrOrStderr(), "The secret is shown only now: the server keeps its hash. Store it safely.")
	return nil
}

func newBootstrapCmd(f *clientFlags) *cobra.Command {
	var desc string
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Create the first token (admin), once",
		Long: `Create the first token, linked to the built-in admin policy. Bootstrap
works once: a second one is refused, on this server and on every server
sharing its store. Run it right after starting a server with --acl.`,
		Example: `  sextant acl bootstrap
  export SEXTANT_TOKEN=sxt_...   # the SecretID printed`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			var t aclToken
			if err := c.Call(cmd.Context(), http.MethodPost, "/v1/acl/bootstrap", map[string]string{"description": desc}, &t); err != nil {
				return failed("bootstrap", err)
			}
			return printSecret(cmd, f, t)
		},
	}
	cmd.Flags().StringVar(&desc, "description", "bootstrap token", "what the token is for")
	return cmd
}

func newTokenCreateCmd(f *clientFlags) *cobra.Command {
	var req acl.TokenRequest
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a token linked to policies",
		Example: `  sextant acl token create --policy orders-writer --description "orders deployer"
  sextant acl token create --policy admin`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(req.Policies) == 0 {
				return fmt.Errorf("--policy is required (at least one; %q grants everything)", acl.BuiltinAdmin)
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			var t aclToken
			if err := c.Call(cmd.Context(), http.MethodPost, "/v1/acl/tokens", req, &t); err != nil {
				return failed("create token", err)
			}
			return printSecret(cmd, f, t)
		},
	}
	cmd.Flags().StringArrayVar(&req.Policies, "policy", nil, "policy to link (repeat for several)")
	cmd.Flags().StringVar(&req.Description, "description", "", "what the token is for")
	return cmd
}

func newTokenListCmd(f *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List tokens (accessors and policies; secrets are never shown again)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			var res tokenList
			if err := c.Call(cmd.Context(), http.MethodGet, "/v1/acl/tokens", nil, &res); err != nil {
				return failed("list tokens", err)
			}
			if f.json() {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "ACCESSOR\tPOLICIES\tCREATED\tDESCRIPTION")
			for _, t := range res.Tokens {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.AccessorID, strings.Join(t.Policies, ","), t.CreatedAt.Format(time.RFC3339), orDash(t.Description))
			}
			return tw.Flush()
		},
	}
}

func newTokenDeleteCmd(f *clientFlags) *cobra.Command {
	return newACLDeleteCmd(f, "delete ACCESSOR...", "Revoke tokens: refused from the next request on", "token", "/v1/acl/tokens/")
}

type policyAnswer struct {
	Revision int64      `json:"revision"`
	Policy   acl.Policy `json:"policy"`
}

func newPolicyCreateCmd(f *clientFlags) *cobra.Command {
	var (
		p       acl.Policy
		rules   []string
		file    string
		replace bool
	)
	cmd := &cobra.Command{
		Use:   "create [NAME]",
		Short: "Create (or with --replace, replace) a policy",
		Long: `Create a policy from --rule flags or from a JSON document (--file, "-" for
standard input). A rule reads NAMESPACE:RESOURCE=ACCESS[,RESOURCE=ACCESS...]:
NAMESPACE is a name, a prefix ending in * (team-a-*) or * (every namespace);
RESOURCE is instances, config, placements, push, identity, secret, kv (Consul's
KV store) or * (all but secret and kv); ACCESS is read or write (write includes
read). --admin grants everything, tokens and policies included.

The document form:
  {"name": "orders-writer", "description": "...",
   "rules": [{"namespace": "orders", "instances": "write", "config": "read"},
             {"namespace": "team-a-*", "push": "read"}]}`,
		Example: `  sextant acl policy create orders-writer --rule 'orders:instances=write,config=read'
  sextant acl policy create readers --rule '*:*=read'
  sextant acl policy create --file policy.json --replace`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var body []byte
			if file != "" {
				if len(rules) > 0 || len(args) > 0 || p.Admin || p.Description != "" {
					return fmt.Errorf("--file carries the whole policy: no NAME, --rule, --admin or --description with it")
				}
				var err error
				if body, err = readFileArg(cmd.InOrStdin(), file); err != nil {
					return err
				}
			} else {
				if len(args) == 0 {
					return fmt.Errorf("NAME is required (or use --file)")
				}
				p.Name = args[0]
				for _, s := range rules {
					r, err := acl.ParseRule(s)
					if err != nil {
						return fmt.Errorf("--rule: %w", err)
					}
					p.Rules = append(p.Rules, r)
				}
				body = mustJSON(p)
			}
			parsed, err := acl.ParsePolicy(body)
			if err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			method, path := http.MethodPost, "/v1/acl/policies"
			if replace {
				method, path = http.MethodPut, "/v1/acl/policies/"+url.PathEscape(parsed.Name)
			}
			var res policyAnswer
			if err := c.Call(cmd.Context(), method, path, parsed, &res); err != nil {
				return failed("create policy", err)
			}
			if f.json() {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "policy %s written (revision %d)\n", res.Policy.Name, res.Revision)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&rules, "rule", nil, "NAMESPACE:RESOURCE=ACCESS[,...] (repeat for several)")
	fl.BoolVar(&p.Admin, "admin", false, "grant everything, tokens and policies included")
	fl.StringVar(&p.Description, "description", "", "what the policy is for")
	fl.StringVar(&file, "file", "", `JSON policy document ("-": standard input)`)
	fl.BoolVar(&replace, "replace", false, "replace an existing policy of that name instead of creating one")
	return cmd
}

func readFileArg(stdin io.Reader, name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(name)
}

func mustJSON(v any) []byte {
	var sb strings.Builder
	if err := writeJSONLine(&sb, v); err != nil {
		panic(err) // plain structs
	}
	return []byte(sb.String())
}

func rulesText(p acl.Policy) string {
	if p.Admin {
		return "admin"
	}
	parts := make([]string, len(p.Rules))
	for i, r := range p.Rules {
		parts[i] = r.String()
	}
	return strings.Join(parts, " ")
}

func newPolicyListCmd(f *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List policies (the built-in admin policy included)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			var res policyList
			if err := c.Call(cmd.Context(), http.MethodGet, "/v1/acl/policies", nil, &res); err != nil {
				return failed("list policies", err)
			}
			if f.json() {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "NAME\tRULES\tDESCRIPTION")
			for _, p := range res.Policies {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, rulesText(p), orDash(p.Description))
			}
			return tw.Flush()
		},
	}
}

func newPolicyGetCmd(f *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Print a policy as a JSON document",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			var p acl.Policy
			if err := c.Call(cmd.Context(), http.MethodGet, "/v1/acl/policies/"+url.PathEscape(args[0]), nil, &p); err != nil {
				return failed("get policy", err)
			}
			return writeJSON(cmd.OutOrStdout(), p)
		},
	}
}

func newPolicyDeleteCmd(f *clientFlags) *cobra.Command {
	return newACLDeleteCmd(f, "delete NAME...", "Delete policies; tokens linked to them lose what they granted", "policy", "/v1/acl/policies/")
}

// newACLDeleteCmd deletes the named tokens or policies (what) one by one
// under path, saying the revision of each.
func newACLDeleteCmd(f *clientFlags, use, short, what, path string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			for _, name := range args {
				var res struct {
					Revision int64 `json:"revision"`
				}
				if err := c.Call(cmd.Context(), http.MethodDelete, path+url.PathEscape(name), nil, &res); err != nil {
					return failed("delete "+what+" "+name, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted %s (revision %d)\n", name, res.Revision)
			}
			return nil
		},
	}
}
