package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The attributes an access log filter may compare (docs/telemetry.md).
const (
	AttrResponseCode     = "response.code"
	AttrResponseDuration = "response.duration"
)

// LogFilter is a Telemetry accessLogging[].filter.expression read into
// comparisons: all of Terms joined by "||" (Or) or by "&&". It covers the
// common CEL forms Envoy's own status and duration filters express; any
// other expression is refused by ParseLogFilter.
type LogFilter struct {
	Or    bool
	Terms []LogTerm
}

// LogTerm is one comparison: Attr (AttrResponseCode or
// AttrResponseDuration) Op Value; Value is a status code, or a duration in
// whole milliseconds.
type LogTerm struct {
	Attr  string
	Op    string // ==, !=, <, <=, >, >=
	Value int64
}

// Match reports whether a call answered with status code after d passes.
func (f *LogFilter) Match(code int, d time.Duration) bool {
	for _, t := range f.Terms {
		v := int64(code)
		if t.Attr == AttrResponseDuration {
			v = d.Milliseconds()
		}
		ok := compare(v, t.Op, t.Value)
		if f.Or && ok {
			return true
		}
		if !f.Or && !ok {
			return false
		}
	}
	return !f.Or
}

func compare(v int64, op string, x int64) bool {
	switch op {
	case "==":
		return v == x
	case "!=":
		return v != x
	case "<":
		return v < x
	case "<=":
		return v <= x
	case ">":
		return v > x
	}
	return v >= x
}

// maxFilterTerms bounds an expression: a filter is a few comparisons.
const maxFilterTerms = 16

// logFilterForms says, in errors, which expressions are read.
const logFilterForms = `response.code OP INTEGER or response.duration OP duration("500ms"), OP one of == != < <= > >=, several joined by || or by &&`

// ParseLogFilter reads the CEL forms Sextant accepts in an access log
// filter: comparisons of response.code with an integer and of
// response.duration with duration("...") (whole milliseconds), several
// joined all by "||" or all by "&&", with no parentheses. Anything else
// (other attributes, functions, mixed operators) is an error saying what
// is accepted.
func ParseLogFilter(expr string) (*LogFilter, error) {
	s := strings.TrimSpace(expr)
	if s == "" {
		return nil, errors.New("empty expression")
	}
	if len(s) > 1024 {
		return nil, errors.New("longer than 1024 bytes")
	}
	hasOr, hasAnd := strings.Contains(s, "||"), strings.Contains(s, "&&")
	if hasOr && hasAnd {
		return nil, fmt.Errorf("%q: mixes || and &&, which needs parentheses; not supported (accepted: %s)", expr, logFilterForms)
	}
	f := &LogFilter{Or: hasOr}
	sep := "&&"
	if hasOr {
		sep = "||"
	}
	parts := strings.Split(s, sep)
	if len(parts) > maxFilterTerms {
		return nil, fmt.Errorf("%q: %d comparisons, more than %d", expr, len(parts), maxFilterTerms)
	}
	for _, p := range parts {
		t, err := parseLogTerm(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("%q: %w (accepted: %s)", expr, err, logFilterForms)
		}
		f.Terms = append(f.Terms, t)
	}
	return f, nil
}

var logOps = []string{"==", "!=", "<=", ">=", "<", ">"} // two-character ones first

func parseLogTerm(s string) (LogTerm, error) {
	if s == "" {
		return LogTerm{}, errors.New("an empty comparison")
	}
	if strings.ContainsAny(s, "()") && !strings.Contains(s, "duration(") {
		return LogTerm{}, errors.New("parentheses are not supported")
	}
	var t LogTerm
	i := -1
	for _, op := range logOps {
		if j := strings.Index(s, op); j >= 0 && (i < 0 || j < i) {
			i, t.Op = j, op
		}
	}
	if i < 0 {
		return LogTerm{}, fmt.Errorf("%q is not a comparison", s)
	}
	t.Attr = strings.TrimSpace(s[:i])
	val := strings.TrimSpace(s[i+len(t.Op):])
	switch t.Attr {
	case AttrResponseCode:
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil || n < 0 || n > 999 {
			return LogTerm{}, fmt.Errorf("response.code compares with an integer 0..999, not %q", val)
		}
		t.Value = n
	case AttrResponseDuration:
		inner, ok := strings.CutPrefix(val, "duration(")
		if ok {
			inner, ok = strings.CutSuffix(inner, ")")
		}
		if ok {
			inner, ok = unquoteCEL(strings.TrimSpace(inner))
		}
		if !ok {
			return LogTerm{}, fmt.Errorf(`response.duration compares with duration("500ms"), not %q`, val)
		}
		d, err := time.ParseDuration(inner)
		if err != nil || d < 0 {
			return LogTerm{}, fmt.Errorf("duration(%q): not a duration such as \"500ms\" or \"1.5s\"", inner)
		}
		if d%time.Millisecond != 0 {
			return LogTerm{}, fmt.Errorf("duration(%q): whole milliseconds only (Envoy's duration filter counts milliseconds)", inner)
		}
		t.Value = d.Milliseconds()
	default:
		return LogTerm{}, fmt.Errorf("attribute %q is not supported (response.code, response.duration)", t.Attr)
	}
	return t, nil
}

// unquoteCEL reads a CEL string literal in single or double quotes,
// without escapes.
func unquoteCEL(s string) (string, bool) {
	if len(s) < 2 || (s[0] != '"' && s[0] != '\'') || s[len(s)-1] != s[0] {
		return "", false
	}
	in := s[1 : len(s)-1]
	if strings.ContainsAny(in, "\"'\\") {
		return "", false
	}
	return in, true
}

// String writes f back as the expression it reads.
func (f *LogFilter) String() string {
	var b strings.Builder
	for i, t := range f.Terms {
		if i > 0 {
			if f.Or {
				b.WriteString(" || ")
			} else {
				b.WriteString(" && ")
			}
		}
		b.WriteString(t.Attr + " " + t.Op + " ")
		if t.Attr == AttrResponseDuration {
			b.WriteString(`duration("` + (time.Duration(t.Value) * time.Millisecond).String() + `")`)
		} else {
			b.WriteString(strconv.FormatInt(t.Value, 10))
		}
	}
	return b.String()
}
