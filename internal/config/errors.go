package config

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinels every FieldError wraps one of; callers branch with errors.Is.
var (
	// ErrUnknownField: the field is not part of the kind's schema (a typo).
	ErrUnknownField = errors.New("unknown field")
	// ErrNotSupported: Istio defines the field but Sextant does not
	// implement it; it is refused rather than silently ignored.
	ErrNotSupported = errors.New("not supported")
	// ErrInvalid: the field's value is wrong (type, range, syntax).
	ErrInvalid = errors.New("invalid value")
)

// FieldError is one problem with one field of one document.
type FieldError struct {
	// Doc is the 0-based index of the document in its stream; Docs is how
	// many the stream held (the message names the document only when >1).
	Doc, Docs int
	// Path names the field, e.g. "spec.http[0].route[1].weight".
	Path string
	// Msg says what is wrong with it.
	Msg string
	// Err is ErrUnknownField, ErrNotSupported or ErrInvalid.
	Err error
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	if e.Docs > 1 {
		fmt.Fprintf(&b, "document %d: ", e.Doc+1)
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *FieldError) Unwrap() error { return e.Err }

// Errors is every problem found in a stream, in document order. Decode
// returns at most maxErrors of them.
type Errors []*FieldError

const maxErrors = 50

func (es Errors) Error() string {
	if len(es) == 1 {
		return es[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "config: %d problems:", len(es))
	for _, e := range es {
		b.WriteString("\n  ")
		b.WriteString(strings.TrimPrefix(e.Error(), "config: "))
	}
	return b.String()
}

// Unwrap lets errors.Is and errors.As see each FieldError.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// errs collects FieldErrors for one document.
type errs struct {
	doc  int
	list *Errors
}

func (c errs) add(path string, sentinel error, format string, args ...any) {
	if len(*c.list) >= maxErrors {
		return
	}
	msg := sentinel.Error()
	if format != "" {
		msg = fmt.Sprintf(format, args...)
	}
	*c.list = append(*c.list, &FieldError{Doc: c.doc, Path: path, Msg: msg, Err: sentinel})
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

func mapKey(path, k string) string { return path + "[" + k + "]" }
