package consulapi

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// filter is a parsed Consul filter expression (?filter=), the common part
// of Consul's language (go-bexpr):
//
//	Selector == "value"     Selector != "value"
//	"value" in Selector     "value" not in Selector
//	Selector contains "v"   Selector not contains "v"
//	Selector is empty       Selector is not empty
//	Selector matches "re"   Selector not matches "re"
//	a and b, a or b, not a, ( a )
//
// A selector names a field of the answer's entries as Consul's JSON names
// it (ServiceTags, ServiceMeta.env, Service.Meta["prometheus.io/port"],
// Node.Address, Status). Values are "quoted", `raw`, or bare words and
// numbers. "in" and "contains" test a list's elements, a map's keys or a
// string's substrings. What it does not parse is a 400, never ignored.
type filter struct {
	root expr
}

type expr interface {
	eval(v reflect.Value) (bool, error)
}

type andNode struct{ a, b expr }
type orNode struct{ a, b expr }
type notNode struct{ a expr }

func (n andNode) eval(v reflect.Value) (bool, error) {
	ok, err := n.a.eval(v)
	if err != nil || !ok {
		return false, err
	}
	return n.b.eval(v)
}

func (n orNode) eval(v reflect.Value) (bool, error) {
	ok, err := n.a.eval(v)
	if err != nil || ok {
		return ok, err
	}
	return n.b.eval(v)
}

func (n notNode) eval(v reflect.Value) (bool, error) {
	ok, err := n.a.eval(v)
	return !ok, err
}

// matchNode is one comparison.
type matchNode struct {
	sel   []string // field names and map keys
	op    string   // ==, !=, in, contains, empty, matches
	neg   bool     // not in, not contains, is not empty, not matches
	value string
	re    *regexp.Regexp
}

// parseFilter parses s ("" : nil, no filter).
func parseFilter(s string) (*filter, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	toks, err := lex(s)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	n, err := p.or()
	if err != nil {
		return nil, err
	}
	if p.i < len(p.toks) {
		return nil, filterError("unexpected %q", p.toks[p.i].s)
	}
	return &filter{root: n}, nil
}

func filterError(format string, args ...any) error {
	return badRequest("filter: " + fmt.Sprintf(format, args...))
}

// check evaluates f against a zero entry, so that a selector the answer's
// entries do not have is refused even when there is no entry to test.
func (f *filter) check(proto any) error {
	if f == nil {
		return nil
	}
	_, err := f.root.eval(reflect.ValueOf(proto))
	return err
}

// match reports whether the entry v (a pointer to an answer's struct)
// passes f (nil passes everything).
func (f *filter) match(v any) (bool, error) {
	if f == nil {
		return true, nil
	}
	return f.root.eval(reflect.ValueOf(v))
}

type token struct {
	s      string
	quoted bool
}

func lex(s string) ([]token, error) {
	var out []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '(' || c == ')' || c == '[' || c == ']':
			out = append(out, token{s: string(c)})
			i++
		case c == '=' || c == '!':
			if i+1 >= len(s) || s[i+1] != '=' {
				return nil, filterError("%q at byte %d: want == or !=", string(c), i)
			}
			out = append(out, token{s: s[i : i+2]})
			i += 2
		case c == '"':
			j := i + 1
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(s) {
				return nil, filterError("unterminated string at byte %d", i)
			}
			v, err := strconv.Unquote(s[i : j+1])
			if err != nil {
				return nil, filterError("bad string %s", s[i:j+1])
			}
			out = append(out, token{s: v, quoted: true})
			i = j + 1
		case c == '`':
			j := strings.IndexByte(s[i+1:], '`')
			if j < 0 {
				return nil, filterError("unterminated string at byte %d", i)
			}
			out = append(out, token{s: s[i+1 : i+1+j], quoted: true})
			i += j + 2
		case wordByte(c):
			j := i
			for j < len(s) && wordByte(s[j]) {
				j++
			}
			out = append(out, token{s: s[i:j]})
			i = j
		default:
			return nil, filterError("unexpected %q at byte %d", string(c), i)
		}
	}
	return out, nil
}

func wordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '.' || c == '-' || c == '/' || c == ':'
}

type parser struct {
	toks []token
	i    int
}

func (p *parser) peek() (token, bool) {
	if p.i < len(p.toks) {
		return p.toks[p.i], true
	}
	return token{}, false
}

// keyword consumes the unquoted word w if it comes next.
func (p *parser) keyword(w string) bool {
	if t, ok := p.peek(); ok && !t.quoted && t.s == w {
		p.i++
		return true
	}
	return false
}

func (p *parser) or() (expr, error) {
	n, err := p.and()
	if err != nil {
		return nil, err
	}
	for p.keyword("or") {
		m, err := p.and()
		if err != nil {
			return nil, err
		}
		n = orNode{n, m}
	}
	return n, nil
}

func (p *parser) and() (expr, error) {
	n, err := p.unary()
	if err != nil {
		return nil, err
	}
	for p.keyword("and") {
		m, err := p.unary()
		if err != nil {
			return nil, err
		}
		n = andNode{n, m}
	}
	return n, nil
}

func (p *parser) unary() (expr, error) {
	if p.keyword("not") {
		n, err := p.unary()
		if err != nil {
			return nil, err
		}
		return notNode{n}, nil
	}
	if p.keyword("(") {
		n, err := p.or()
		if err != nil {
			return nil, err
		}
		if !p.keyword(")") {
			return nil, filterError("missing )")
		}
		return n, nil
	}
	return p.match()
}

// value reads a value: a quoted string or a bare word.
func (p *parser) value() (string, error) {
	t, ok := p.peek()
	if !ok {
		return "", filterError("a value is missing at the end")
	}
	if !t.quoted && (t.s == "(" || t.s == ")" || t.s == "[" || t.s == "]" || t.s == "==" || t.s == "!=") {
		return "", filterError("want a value, got %q", t.s)
	}
	p.i++
	return t.s, nil
}

// selector reads Name(.Name)*(["key"])*.
func (p *parser) selector() ([]string, error) {
	t, ok := p.peek()
	if !ok || t.quoted || !isIdent(t.s) {
		if !ok {
			return nil, filterError("a selector is missing at the end")
		}
		return nil, filterError("want a selector (a field such as ServiceTags or ServiceMeta.env), got %q", t.s)
	}
	p.i++
	sel := strings.Split(t.s, ".")
	for p.keyword("[") {
		k, ok := p.peek()
		if !ok || !k.quoted {
			return nil, filterError(`want a quoted key in [ ] after %s`, t.s)
		}
		p.i++
		if !p.keyword("]") {
			return nil, filterError("missing ] after %s", t.s)
		}
		sel = append(sel, k.s)
	}
	return sel, nil
}

func isIdent(s string) bool {
	if s == "" || !(s[0] >= 'A' && s[0] <= 'Z' || s[0] >= 'a' && s[0] <= 'z') {
		return false
	}
	switch s {
	case "and", "or", "not", "in", "is", "empty", "contains", "matches":
		return false
	}
	return !strings.Contains(s, "..") && !strings.HasSuffix(s, ".")
}

func (p *parser) match() (expr, error) {
	t, ok := p.peek()
	if !ok {
		return nil, filterError("an expression is missing at the end")
	}
	// "value" [not] in Selector
	if t.quoted || !isIdent(t.s) || p.i+1 < len(p.toks) && (p.toks[p.i+1].s == "in" || p.toks[p.i+1].s == "not") && !p.toks[p.i+1].quoted {
		if v, neg, ok := p.inForm(); ok {
			sel, err := p.selector()
			if err != nil {
				return nil, err
			}
			return &matchNode{sel: sel, op: "in", neg: neg, value: v}, nil
		}
	}
	sel, err := p.selector()
	if err != nil {
		return nil, err
	}
	m := &matchNode{sel: sel}
	switch {
	case p.keyword("=="):
		m.op = "=="
	case p.keyword("!="):
		m.op = "!="
	case p.keyword("is"):
		m.neg = p.keyword("not")
		if !p.keyword("empty") {
			return nil, filterError("want empty after is")
		}
		m.op = "empty"
		return m, nil
	case p.keyword("contains"):
		m.op = "contains"
	case p.keyword("matches"):
		m.op = "matches"
	case p.keyword("not"):
		m.neg = true
		switch {
		case p.keyword("contains"):
			m.op = "contains"
		case p.keyword("matches"):
			m.op = "matches"
		default:
			return nil, filterError("want contains or matches after %s not", strings.Join(sel, "."))
		}
	default:
		if t, ok := p.peek(); ok {
			return nil, filterError("unsupported operator %q after %s (supported: ==, !=, in, not in, contains, not contains, is empty, is not empty, matches, not matches)", t.s, strings.Join(sel, "."))
		}
		return nil, filterError("an operator is missing after %s", strings.Join(sel, "."))
	}
	if m.value, err = p.value(); err != nil {
		return nil, err
	}
	if m.op == "matches" {
		if m.re, err = regexp.Compile(m.value); err != nil {
			return nil, filterError("bad regular expression %q: %v", m.value, err)
		}
	}
	return m, nil
}

// inForm reads `value [not] in` if it comes next.
func (p *parser) inForm() (string, bool, bool) {
	start := p.i
	t := p.toks[p.i]
	p.i++
	neg := p.keyword("not")
	if p.keyword("in") {
		return t.s, neg, true
	}
	p.i = start
	return "", false, false
}

func (m *matchNode) eval(v reflect.Value) (bool, error) {
	f, present, err := resolve(v, m.sel)
	if err != nil {
		return false, err
	}
	var ok bool
	switch m.op {
	case "empty":
		ok = !present || f.Len() == 0
	case "==", "!=":
		eq, err := equal(f, present, m.value, m.sel)
		if err != nil {
			return false, err
		}
		ok = eq == (m.op == "==")
		return ok, nil
	case "in", "contains":
		ok = present && contains(f, m.value)
		if present && !ok && f.Kind() != reflect.String && f.Kind() != reflect.Slice && f.Kind() != reflect.Map {
			return false, filterError("%s is not a list, map or string: use == for it", strings.Join(m.sel, "."))
		}
	case "matches":
		if present && f.Kind() != reflect.String {
			return false, filterError("%s is not a string: matches needs one", strings.Join(m.sel, "."))
		}
		ok = present && m.re.MatchString(f.String())
	}
	if m.op == "empty" && present && f.Kind() != reflect.String && f.Kind() != reflect.Slice && f.Kind() != reflect.Map {
		return false, filterError("%s is not a list, map or string: is empty needs one", strings.Join(m.sel, "."))
	}
	return ok != m.neg, nil
}

// resolve follows sel from v: struct fields by name (without regard to
// case, as Consul's filters), then map keys. present is false for a map
// key that is not there.
func resolve(v reflect.Value, sel []string) (reflect.Value, bool, error) {
	for i, name := range sel {
		for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
			v = v.Elem()
		}
		switch v.Kind() {
		case reflect.Struct:
			f := v.FieldByNameFunc(func(n string) bool { return strings.EqualFold(n, name) })
			if !f.IsValid() {
				return v, false, filterError("selector %q is not valid: %s has no field %s", strings.Join(sel, "."), orRoot(sel[:i]), name)
			}
			v = f
		case reflect.Map:
			e := v.MapIndex(reflect.ValueOf(name))
			if !e.IsValid() {
				if i < len(sel)-1 {
					return v, false, filterError("selector %q is not valid: %s is a map of strings", strings.Join(sel, "."), strings.Join(sel[:i], "."))
				}
				return v, false, nil
			}
			v = e
		case reflect.Slice:
			return v, false, filterError("selector %q is not supported: filters on the objects of a list (%s) are not", strings.Join(sel, "."), strings.Join(sel[:i], "."))
		default:
			return v, false, filterError("selector %q is not valid: %s has no fields", strings.Join(sel, "."), strings.Join(sel[:i], "."))
		}
	}
	if v.Kind() == reflect.Slice && v.Type().Elem().Kind() != reflect.String {
		return v, false, filterError("selector %q is not supported: filters on lists of objects are not", strings.Join(sel, "."))
	}
	return v, true, nil
}

func orRoot(sel []string) string {
	if len(sel) == 0 {
		return "the entry"
	}
	return strings.Join(sel, ".")
}

func equal(f reflect.Value, present bool, value string, sel []string) (bool, error) {
	if !present {
		return false, nil
	}
	switch f.Kind() {
	case reflect.String:
		return f.String() == value, nil
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return false, filterError("%s is a number: %q is not", strings.Join(sel, "."), value)
		}
		return f.Int() == n, nil
	case reflect.Bool:
		b, err := strconv.ParseBool(value)
		if err != nil {
			return false, filterError("%s is a boolean: %q is not", strings.Join(sel, "."), value)
		}
		return f.Bool() == b, nil
	}
	return false, filterError("%s is a list or map: use in, contains or is empty", strings.Join(sel, "."))
}

func contains(f reflect.Value, value string) bool {
	switch f.Kind() {
	case reflect.String:
		return strings.Contains(f.String(), value)
	case reflect.Slice:
		return slices.Contains(f.Interface().([]string), value)
	case reflect.Map:
		return f.MapIndex(reflect.ValueOf(value)).IsValid()
	}
	return false
}
