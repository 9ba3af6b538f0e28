package acl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/sextant-mesh/sextant/internal/jsonkeys"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// Limits of policy documents.
const (
	MaxNameLen        = naming.MaxNameLen
	MaxDescriptionLen = 256
	MaxRules          = 256
	MaxPolicies       = 64 // policies linked to one token
)

// BuiltinAdmin is the policy every server has and no one can change or
// delete: it grants everything. The bootstrap token links it.
const BuiltinAdmin = "admin"

// Policy grants access to resources per namespace, and admin.
type Policy struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Admin grants everything, the tokens and policies included.
	Admin bool   `json:"admin,omitempty"`
	Rules []Rule `json:"rules,omitempty"`

	// Revision is the store revision of the policy's last write (set by
	// the server); Builtin marks the admin policy.
	Revision int64 `json:"revision,omitempty"`
	Builtin  bool  `json:"builtin,omitempty"`
}

// Rule grants access levels on resources in the namespaces its pattern
// names: an exact namespace ("orders"), a prefix ("team-a-*") or every
// namespace ("*").
type Rule struct {
	Namespace string
	Grants    [numResources]Access // by Resource; ACL is never set
}

// ruleJSON is a Rule as written: {"namespace": "team-a-*", "instances": "write", "config": "read"}.
type ruleJSON struct {
	Namespace  string `json:"namespace"`
	Instances  string `json:"instances,omitempty"`
	Config     string `json:"config,omitempty"`
	Placements string `json:"placements,omitempty"`
	Push       string `json:"push,omitempty"`
	Identity   string `json:"identity,omitempty"`
	Secret     string `json:"secret,omitempty"`
	KV         string `json:"kv,omitempty"`
}

func (r *ruleJSON) field(res Resource) *string {
	switch res {
	case Instances:
		return &r.Instances
	case Config:
		return &r.Config
	case Placements:
		return &r.Placements
	case Push:
		return &r.Push
	case Identity:
		return &r.Identity
	case Secrets:
		return &r.Secret
	case KV:
		return &r.KV
	}
	return nil
}

// MarshalJSON writes the rule in its document form.
func (r Rule) MarshalJSON() ([]byte, error) {
	j := ruleJSON{Namespace: r.Namespace}
	for _, res := range ruleResources {
		if a := r.Grants[res]; a != None {
			*j.field(res) = a.String()
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads the document form; Validate checks it.
func (r *Rule) UnmarshalJSON(b []byte) error {
	var j ruleJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return err
	}
	*r = Rule{Namespace: j.Namespace}
	for _, res := range ruleResources {
		s := *j.field(res)
		if s == "" {
			continue
		}
		a, ok := parseAccess(s)
		if !ok {
			return &FieldError{Field: res.String(), Msg: fmt.Sprintf("%q is not an access level: want read or write", s)}
		}
		r.Grants[res] = a
	}
	return nil
}

// FieldError is a bad field of a policy, rule or token request, named by
// its JSON path (rules[2].namespace).
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return "acl: " + e.Field + ": " + e.Msg }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

func prefixed(prefix string, err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		f := prefix
		if fe.Field != "" {
			f += "." + fe.Field
		}
		return &FieldError{Field: f, Msg: fe.Msg}
	}
	return &FieldError{Field: prefix, Msg: err.Error()}
}

// checkPattern validates a rule's namespace pattern.
func checkPattern(p string) error {
	if p == "*" {
		return nil
	}
	name, prefix := strings.CutSuffix(p, "*")
	if prefix {
		if name == "" || len(name) >= MaxNameLen || !naming.Alnum(name[0]) || strings.ContainsAny(name, "*") {
			return fmt.Errorf("%q is not a namespace pattern: want a name, a prefix ending in * (team-a-*) or * for every namespace", p)
		}
		for i := 0; i < len(name); i++ {
			if c := name[i]; !naming.Alnum(c) && c != '-' && c != '.' && c != '_' {
				return fmt.Errorf("%q is not a namespace prefix: only [a-z0-9-._] before the *", p)
			}
		}
		return nil
	}
	if !naming.ValidName(name) {
		return fmt.Errorf("%q is not a namespace: 1..128 chars of [a-z0-9-._] starting and ending with a letter or digit (or a prefix ending in *, or *)", p)
	}
	return nil
}

// Validate checks the rule.
func (r Rule) Validate() error {
	if r.Namespace == "" {
		return fieldErr("namespace", "required: a namespace, a prefix ending in * or *")
	}
	if err := checkPattern(r.Namespace); err != nil {
		return fieldErr("namespace", "%s", err.Error())
	}
	any := false
	for res, a := range r.Grants {
		if a == None {
			continue
		}
		if Resource(res) == ACL || Resource(res) == 0 || a > Write {
			return fieldErr("", "invalid grant %v on %v", a, Resource(res))
		}
		any = true
	}
	if !any {
		return fieldErr("", "grants nothing: set instances, config, placements or push to read or write")
	}
	return nil
}

// Validate checks the policy as a user wrote it.
func (p *Policy) Validate() error {
	switch {
	case !naming.ValidName(p.Name):
		return fieldErr("name", "%q is not a policy name: 1..%d chars of [a-z0-9-._], starting and ending with a letter or digit", p.Name, MaxNameLen)
	case p.Name == BuiltinAdmin:
		return fieldErr("name", "%q is the built-in policy and cannot be written", BuiltinAdmin)
	case len(p.Description) > MaxDescriptionLen || !utf8.ValidString(p.Description):
		return fieldErr("description", "at most %d bytes of UTF-8", MaxDescriptionLen)
	case len(p.Rules) > MaxRules:
		return fieldErr("rules", "%d rules, at most %d", len(p.Rules), MaxRules)
	case !p.Admin && len(p.Rules) == 0:
		return fieldErr("rules", "the policy grants nothing: add rules or set admin")
	}
	for i, r := range p.Rules {
		if err := r.Validate(); err != nil {
			return prefixed(fmt.Sprintf("rules[%d]", i), err)
		}
	}
	return nil
}

// ParsePolicy decodes a policy document strictly (unknown fields, trailing
// data and server-set fields are errors) and validates it.
func ParsePolicy(b []byte) (*Policy, error) {
	var doc struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Admin       bool            `json:"admin"`
		Rules       json.RawMessage `json:"rules"`
	}
	if err := strictJSON(b, &doc); err != nil {
		return nil, err
	}
	p := &Policy{Name: doc.Name, Description: doc.Description, Admin: doc.Admin}
	if len(doc.Rules) > 0 && string(doc.Rules) != "null" {
		var raw []json.RawMessage
		if err := json.Unmarshal(doc.Rules, &raw); err != nil {
			return nil, fieldErr("rules", "want an array of rules")
		}
		if len(raw) > MaxRules {
			return nil, fieldErr("rules", "%d rules, at most %d", len(raw), MaxRules)
		}
		p.Rules = make([]Rule, len(raw))
		for i, m := range raw {
			if err := p.Rules[i].UnmarshalJSON(m); err != nil {
				return nil, prefixed(fmt.Sprintf("rules[%d]", i), jsonErr(err))
			}
		}
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// strictJSON decodes one JSON object into v: unknown fields and trailing
// data are errors naming what is wrong.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonErr(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fieldErr("", "unexpected data after the JSON object")
	}
	// encoding/json keeps the last of a key given twice: refuse it.
	var de *jsonkeys.DuplicateError
	if errors.As(jsonkeys.Check(b), &de) {
		return fieldErr(de.Field(), "key %q given twice (line %d): give each key once", de.Key, de.Line)
	}
	return nil
}

func jsonErr(err error) error {
	var fe *FieldError
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &fe):
		return fe
	case errors.As(err, &te):
		return fieldErr(te.Field, "expected %s, got JSON %s", te.Type, te.Value)
	case errors.As(err, &se):
		return fieldErr("", "malformed JSON at byte %d", se.Offset)
	case errors.Is(err, io.EOF):
		return fieldErr("", "empty body: a JSON object is required")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fieldErr("", "truncated JSON")
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, `json: unknown field "`); ok {
		f = strings.TrimSuffix(f, `"`)
		return fieldErr(f, "unknown field")
	}
	return fieldErr("", "invalid JSON: %s", strings.TrimPrefix(msg, "json: "))
}

// ParseRule reads the command line's short form of a rule:
// NAMESPACE:RESOURCE=ACCESS[,RESOURCE=ACCESS...], where NAMESPACE is a
// name, a prefix ending in * or *, RESOURCE is instances, config,
// placements, push or * (all four) and ACCESS is read or write. Examples:
// "orders:instances=write,config=read", "team-a-*:*=read".
func ParseRule(s string) (Rule, error) {
	ns, grants, ok := strings.Cut(s, ":")
	if !ok {
		return Rule{}, fmt.Errorf("acl: rule %q: want NAMESPACE:RESOURCE=ACCESS[,...], e.g. orders:instances=write", s)
	}
	r := Rule{Namespace: ns}
	if err := checkPattern(ns); err != nil {
		return Rule{}, fmt.Errorf("acl: rule %q: %w", s, err)
	}
	for _, g := range strings.Split(grants, ",") {
		res, acc, ok := strings.Cut(g, "=")
		if !ok {
			return Rule{}, fmt.Errorf("acl: rule %q: %q is not RESOURCE=ACCESS", s, g)
		}
		a, ok := parseAccess(acc)
		if !ok {
			return Rule{}, fmt.Errorf("acl: rule %q: %q is not an access level: want read or write", s, acc)
		}
		if res == "*" {
			// Not secrets nor KV: a wildcard written before they existed
			// must not start granting the gateway's certificates or what
			// Consul's clients keep in KV (Vault's storage, ...).
			for _, rr := range ruleResources {
				if rr != Secrets && rr != KV {
					r.Grants[rr] = max(r.Grants[rr], a)
				}
			}
			continue
		}
		rr, ok := parseResource(res)
		if !ok {
			return Rule{}, fmt.Errorf("acl: rule %q: %q is not a resource: want instances, config, placements, push, identity, secret, kv or *", s, res)
		}
		r.Grants[rr] = max(r.Grants[rr], a)
	}
	if err := r.Validate(); err != nil {
		return Rule{}, fmt.Errorf("acl: rule %q: %w", s, err)
	}
	return r, nil
}

// String is the rule in ParseRule's form.
func (r Rule) String() string {
	var sb strings.Builder
	sb.WriteString(r.Namespace)
	sb.WriteByte(':')
	first := true
	for _, res := range ruleResources {
		if a := r.Grants[res]; a != None {
			if !first {
				sb.WriteByte(',')
			}
			first = false
			sb.WriteString(res.String() + "=" + a.String())
		}
	}
	return sb.String()
}

const recordVersion = 1

// encodePolicy is the stored form: a version byte and the JSON document.
func encodePolicy(p *Policy) []byte {
	q := *p
	q.Revision, q.Builtin = 0, false
	b, err := json.Marshal(&q)
	if err != nil {
		panic("acl: encode policy: " + err.Error()) // plain strings and ints: cannot fail
	}
	return append([]byte{recordVersion}, b...)
}

func decodePolicy(b []byte, rev int64) (*Policy, error) {
	if len(b) == 0 || b[0] != recordVersion {
		return nil, errors.New("acl: policy record: unknown version")
	}
	var p Policy
	if err := json.Unmarshal(b[1:], &p); err != nil {
		return nil, fmt.Errorf("acl: policy record: %w", err)
	}
	p.Revision = rev
	return &p, nil
}
