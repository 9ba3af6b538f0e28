// Package label owns label selectors (the Kubernetes syntax) and the bitmap
// inverted index (key -> value -> set of slots) that answers them without
// scanning. A slot is a small integer its user assigns to one labelled thing
// (an instance, a host). The package does not own what a slot stands for.
package label

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Op is the operator of one requirement.
type Op uint8

const (
	Equals    Op = iota + 1 // k=v, k==v
	NotEquals               // k!=v; also true when k is absent
	In                      // k in (a,b)
	NotIn                   // k notin (a,b); also true when k is absent
	Exists                  // k
	NotExists               // !k
)

func (o Op) String() string {
	switch o {
	case Equals:
		return "="
	case NotEquals:
		return "!="
	case In:
		return "in"
	case NotIn:
		return "notin"
	case Exists:
		return "exists"
	case NotExists:
		return "!"
	}
	return "?"
}

// Requirement is one comma-separated term of a selector.
type Requirement struct {
	Key    string
	Op     Op
	Values []string // one for Equals/NotEquals, one or more for In/NotIn, none otherwise
}

// Selector is a conjunction of requirements; the empty selector matches all.
type Selector []Requirement

// ErrSyntax is wrapped by every parse error.
var ErrSyntax = errors.New("label: invalid selector")

// SyntaxError says where a selector went wrong.
type SyntaxError struct {
	Selector string
	Offset   int
	Msg      string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("label: invalid selector %q at offset %d: %s", e.Selector, e.Offset, e.Msg)
}

func (e *SyntaxError) Unwrap() error { return ErrSyntax }

// MaxKeyLen is the longest key a selector may name (the registry's metadata key limit).
const MaxKeyLen = 128

// ValidKey reports whether k is a metadata key: 1..128 bytes of [A-Za-z0-9._/-].
func ValidKey(k string) bool {
	if len(k) == 0 || len(k) > MaxKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !keyByte(k[i]) {
			return false
		}
	}
	return true
}

func keyByte(c byte) bool { return keyBytes[c] }

// keyBytes is [A-Za-z0-9._/-] as a table: one load per byte, where the
// chain of comparisons branched (ValidKey runs for every metadata key of
// every register).
var keyBytes = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == '/' || c == '-'
	}
	return t
}()

func space(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// valueByte: values run up to a delimiter. '=' and '!' are excluded so that
// typos such as "k=!v" or "k=a=b" are reported rather than read literally.
func valueByte(c byte) bool {
	return !space(c) && c != ',' && c != '(' && c != ')' && c != '=' && c != '!'
}

type parser struct {
	s   string
	pos int
}

func (p *parser) fail(msg string, args ...any) error {
	return &SyntaxError{Selector: p.s, Offset: p.pos, Msg: fmt.Sprintf(msg, args...)}
}

func (p *parser) skipSpace() {
	for p.pos < len(p.s) && space(p.s[p.pos]) {
		p.pos++
	}
}

func (p *parser) word(ok func(byte) bool) string {
	start := p.pos
	for p.pos < len(p.s) && ok(p.s[p.pos]) {
		p.pos++
	}
	return p.s[start:p.pos]
}

// Parse reads a selector: comma-separated terms k=v, k==v, k!=v,
// k in (a,b), k notin (a,b), k and !k. Whitespace around tokens is ignored;
// the empty string is the empty selector.
func Parse(s string) (Selector, error) {
	p := &parser{s: s}
	var sel Selector
	p.skipSpace()
	if p.pos == len(s) {
		return nil, nil
	}
	for {
		r, err := p.requirement()
		if err != nil {
			return nil, err
		}
		sel = append(sel, r)
		p.skipSpace()
		if p.pos == len(s) {
			return sel, nil
		}
		if s[p.pos] != ',' {
			return nil, p.fail("expected ',' or end, found %q", s[p.pos])
		}
		p.pos++
		p.skipSpace()
		if p.pos == len(s) {
			return nil, p.fail("expected a term after ','")
		}
	}
}

func (p *parser) requirement() (Requirement, error) {
	if p.s[p.pos] == '!' {
		p.pos++
		p.skipSpace()
		k, err := p.key()
		if err != nil {
			return Requirement{}, err
		}
		return Requirement{Key: k, Op: NotExists}, nil
	}
	k, err := p.key()
	if err != nil {
		return Requirement{}, err
	}
	p.skipSpace()
	rest := p.s[p.pos:]
	switch {
	case rest == "" || rest[0] == ',':
		return Requirement{Key: k, Op: Exists}, nil
	case strings.HasPrefix(rest, "=="):
		p.pos += 2
		return p.single(k, Equals)
	case strings.HasPrefix(rest, "!="):
		p.pos += 2
		return p.single(k, NotEquals)
	case rest[0] == '=':
		p.pos++
		return p.single(k, Equals)
	}
	// "in" and "notin" are words; the key already stopped at a space.
	opAt := p.pos
	op := p.word(keyByte)
	switch op {
	case "in":
		return p.set(k, In)
	case "notin":
		return p.set(k, NotIn)
	case "":
		return Requirement{}, p.fail("expected an operator after key %q, found %q", k, p.s[p.pos])
	}
	p.pos = opAt
	return Requirement{}, p.fail("unknown operator %q after key %q (want =, ==, !=, in, notin)", op, k)
}

func (p *parser) key() (string, error) {
	start := p.pos
	k := p.word(keyByte)
	if k == "" {
		if p.pos == len(p.s) {
			return "", p.fail("expected a key, found end")
		}
		return "", p.fail("expected a key, found %q", p.s[p.pos])
	}
	if len(k) > MaxKeyLen {
		p.pos = start
		return "", p.fail("key longer than %d bytes", MaxKeyLen)
	}
	return k, nil
}

func (p *parser) single(k string, op Op) (Requirement, error) {
	p.skipSpace()
	v := p.word(valueByte)
	if p.pos < len(p.s) && !space(p.s[p.pos]) && p.s[p.pos] != ',' {
		return Requirement{}, p.fail("unexpected %q in value of key %q", p.s[p.pos], k)
	}
	return Requirement{Key: k, Op: op, Values: []string{v}}, nil
}

func (p *parser) set(k string, op Op) (Requirement, error) {
	p.skipSpace()
	if p.pos == len(p.s) || p.s[p.pos] != '(' {
		return Requirement{}, p.fail("expected '(' after %s", op)
	}
	p.pos++
	var vals []string
	for {
		p.skipSpace()
		v := p.word(valueByte)
		p.skipSpace()
		if p.pos == len(p.s) {
			return Requirement{}, p.fail("unclosed '(' in values of key %q", k)
		}
		switch p.s[p.pos] {
		case ',':
			vals = append(vals, v)
			p.pos++
			continue
		case ')':
			vals = append(vals, v)
			p.pos++
			if len(vals) == 1 && vals[0] == "" {
				return Requirement{}, p.fail("empty value set for key %q", k)
			}
			slices.Sort(vals)
			return Requirement{Key: k, Op: op, Values: slices.Compact(vals)}, nil
		}
		return Requirement{}, p.fail("unexpected %q in values of key %q", p.s[p.pos], k)
	}
}

// Matches reports whether labels satisfy every requirement. It is the
// reference semantics the index must agree with.
func (s Selector) Matches(labels Getter) bool {
	for _, r := range s {
		v, ok := labels.Get(r.Key)
		switch r.Op {
		case Equals:
			if !ok || v != r.Values[0] {
				return false
			}
		case NotEquals:
			if ok && v == r.Values[0] {
				return false
			}
		case In:
			if !ok || !slices.Contains(r.Values, v) {
				return false
			}
		case NotIn:
			if ok && slices.Contains(r.Values, v) {
				return false
			}
		case Exists:
			if !ok {
				return false
			}
		case NotExists:
			if ok {
				return false
			}
		}
	}
	return true
}

// String renders the selector in canonical syntax; Parse(s.String()) == s.
func (s Selector) String() string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		switch r.Op {
		case Equals, NotEquals:
			b.WriteString(r.Key + r.Op.String() + r.Values[0])
		case In, NotIn:
			b.WriteString(r.Key + " " + r.Op.String() + " (" + strings.Join(r.Values, ",") + ")")
		case Exists:
			b.WriteString(r.Key)
		case NotExists:
			b.WriteString("!" + r.Key)
		}
	}
	return b.String()
}
