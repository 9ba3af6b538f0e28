package placement

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	strictjson "sigs.k8s.io/json"

	"github.com/sextant-mesh/sextant/internal/jsonkeys"
	"github.com/sextant-mesh/sextant/internal/manifest"
)

// ErrInvalid is wrapped by every error about bad input (HTTP 400).
var ErrInvalid = errors.New("placement: invalid input")

// FieldError is bad input at one field: Path is a JSON path such as
// items[3].status.allocatable.cpu ("" for the whole body).
type FieldError struct {
	Path string
	Msg  string
}

func (e *FieldError) Error() string {
	if e.Path == "" {
		return "placement: " + e.Msg
	}
	return "placement: " + e.Path + ": " + e.Msg
}

func (e *FieldError) Unwrap() error { return ErrInvalid }

func fieldErr(path, format string, args ...any) *FieldError {
	return &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)}
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// toJSON returns body as JSON: YAML is converted (duplicate keys are an
// error, a syntax error names its line of body), JSON is returned as is.
// A YAML body is one document: several are refused, not read in part.
func toJSON(body []byte, yamlBody bool) ([]byte, error) {
	if !yamlBody {
		return body, nil
	}
	docs := manifest.Split(body)
	switch len(docs) {
	case 0:
		return []byte("null"), nil
	case 1:
	default:
		return nil, fieldErr("", "the YAML body holds %d documents (at lines %d and %d): send one object, or a List of them", len(docs), docs[0].Line, docs[1].Line)
	}
	j, err := docs[0].StrictJSON()
	if err != nil {
		return nil, fieldErr("", "invalid YAML: %v", err)
	}
	return j, nil
}

// list is a Kubernetes List of T.
type list[T any] struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []T `json:"items"`
}

// decodeObjects decodes a T or a List of T (by kind) strictly. kind is the
// kind a single object must have. It reports whether the body was a List,
// since paths then start with items[i].
func decodeObjects[T any](body []byte, yamlBody bool, kind string) ([]T, bool, error) {
	j, err := toJSON(body, yamlBody)
	if err != nil {
		return nil, false, err
	}
	tm, err := peekType(j)
	if err != nil || tm.APIVersion != "v1" || (tm.Kind != "List" && tm.Kind != kind) {
		// Say what is wrong with malformed JSON before blaming its fields.
		if !json.Valid(j) {
			var v any
			err := json.Unmarshal(j, &v)
			var se *json.SyntaxError
			if errors.As(err, &se) {
				return nil, false, fieldErr("", "invalid JSON at offset %d: %v", se.Offset, err)
			}
			return nil, false, fieldErr("", "invalid JSON: %v", err)
		}
	}
	if err != nil {
		return nil, false, err
	}
	if tm.Kind != "List" && tm.Kind != kind {
		return nil, false, fieldErr("kind", "%s", manifest.Mismatch(tm.APIVersion, tm.Kind, "a "+kind+" or a List of them"))
	}
	if tm.APIVersion != "v1" {
		return nil, false, fieldErr("apiVersion", "must be \"v1\", got %q", tm.APIVersion)
	}
	switch tm.Kind {
	case "List":
		var l list[T]
		if err := strictDecode(j, &l); err != nil {
			// An item of another kind fails on its first field that
			// kind does not have: name what it is instead.
			if kerr := itemKinds(j, kind); kerr != nil {
				return nil, true, kerr
			}
			return nil, true, err
		}
		for i := range l.Items {
			if err := checkTypeMeta(reflect.ValueOf(&l.Items[i]).Elem(), index("items", i), kind); err != nil {
				return nil, true, err
			}
		}
		return l.Items, true, nil
	case kind:
		var v T
		if err := strictDecode(j, &v); err != nil {
			return nil, false, err
		}
		return []T{v}, false, nil
	}
	return nil, false, fieldErr("kind", "must be %q or \"List\", got %q", kind, tm.Kind)
}

// peekType reads apiVersion and kind from the top level of j with a
// scanner that skips nested values without decoding them (kubectl puts
// "items" before "kind", and a List of a thousand Pods should be parsed
// once). Malformed JSON is left to the strict decoder to report.
func peekType(j []byte) (metav1.TypeMeta, error) {
	var tm metav1.TypeMeta
	i := skipSpace(j, 0)
	if i >= len(j) || j[i] != '{' {
		return tm, fieldErr("", "must be a JSON object")
	}
	i++
	for {
		i = skipSpace(j, i)
		if i >= len(j) || j[i] == '}' {
			return tm, nil
		}
		if j[i] == ',' {
			i++
			continue
		}
		kEnd := skipValue(j, i) // the key: a string
		var key string
		_ = json.Unmarshal(j[i:kEnd], &key)
		i = min(skipSpace(j, kEnd)+1, len(j)) // past ':'
		i = skipSpace(j, i)
		vEnd := skipValue(j, i)
		if key == "apiVersion" || key == "kind" {
			var v string
			if err := json.Unmarshal(j[i:vEnd], &v); err != nil {
				return tm, fieldErr(key, "must be of type string")
			}
			if key == "kind" {
				tm.Kind = v
			} else {
				tm.APIVersion = v
			}
		}
		i = vEnd
	}
}

func skipSpace(j []byte, i int) int {
	for i < len(j) && (j[i] == ' ' || j[i] == '\t' || j[i] == '\n' || j[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the JSON value starting at i (at most
// len(j); on malformed input, some later index).
func skipValue(j []byte, i int) int {
	return min(skipRaw(j, i), len(j))
}

func skipRaw(j []byte, i int) int {
	depth := 0
	for i < len(j) {
		switch c := j[i]; c {
		case '"':
			i++
			for i < len(j) && j[i] != '"' {
				if j[i] == '\\' {
					i++
				}
				i++
			}
			i++
			if depth == 0 {
				return i
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		case ',', ':', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
		i++
	}
	return i
}

// checkTypeMeta requires an item of a List to be of kind (apiVersion v1);
// both may be left out.
func checkTypeMeta(v reflect.Value, path, kind string) error {
	tm := v.FieldByName("TypeMeta").Interface().(metav1.TypeMeta)
	return checkItemType(tm, path, kind)
}

func checkItemType(tm metav1.TypeMeta, path, kind string) error {
	if tm.Kind != "" && tm.Kind != kind {
		return fieldErr(join(path, "kind"), "%s", manifest.Mismatch(tm.APIVersion, tm.Kind, "a "+kind))
	}
	if tm.APIVersion != "" && tm.APIVersion != "v1" {
		return fieldErr(join(path, "apiVersion"), "must be \"v1\", got %q", tm.APIVersion)
	}
	return nil
}

// itemKinds checks the apiVersion and kind of each item of the List j, for
// a List that failed to decode.
func itemKinds(j []byte, kind string) error {
	var l struct {
		Items []json.RawMessage `json:"items"`
	}
	if json.Unmarshal(j, &l) != nil {
		return nil
	}
	for i, it := range l.Items {
		tm, err := peekType(it)
		if err != nil {
			continue // the decoder's error says more
		}
		if err := checkItemType(tm, index("items", i), kind); err != nil {
			return err
		}
	}
	return nil
}

// strictDecode decodes j into v with Kubernetes' strict decoder: an unknown
// or duplicate field is an error naming its path; a value of the wrong type
// or a malformed quantity is located by walking the document.
func strictDecode(j []byte, v any) error {
	strict, err := strictjson.UnmarshalStrict(j, v)
	if err != nil {
		if ok, off := strictjson.SyntaxErrorOffset(err); ok {
			return fieldErr("", "invalid JSON at offset %d: %v", off, err)
		}
		return locate(j, reflect.TypeOf(v).Elem(), err)
	}
	if len(strict) > 0 {
		var fe strictjson.FieldError
		if errors.As(strict[0], &fe) {
			msg := "unknown field"
			if strings.HasPrefix(fe.Error(), "duplicate") {
				msg = "duplicate field"
				var de *jsonkeys.DuplicateError
				if errors.As(jsonkeys.Check(j), &de) {
					msg = fmt.Sprintf("duplicate field: key %q given twice (line %d)", de.Key, de.Line)
				}
			}
			return fieldErr(fe.FieldPath(), "%s", msg)
		}
		return fieldErr("", "%v", strict[0])
	}
	return nil
}

// locate finds the first value of doc that does not decode into its place
// in t, and names it. It runs only after a decode failed, so its cost (a
// decode per level) does not matter.
func locate(doc []byte, t reflect.Type, cause error) error {
	if path, msg, ok := walk(doc, t, ""); ok {
		return fieldErr(path, "%s", msg)
	}
	return fieldErr("", "%v", cause)
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

func walk(raw []byte, t reflect.Type, path string) (string, string, bool) {
	raw = bytes.TrimSpace(raw)
	if bytes.Equal(raw, []byte("null")) {
		return "", "", false
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshaler) || t.Implements(unmarshaler) {
		return leaf(raw, t, path)
	}
	switch t.Kind() {
	case reflect.Struct:
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return path, "must be an object", true
		}
		fields := map[string]reflect.Type{}
		structFields(t, fields)
		for k, v := range m {
			if ft, ok := fields[k]; ok {
				if p, msg, bad := walk(v, ft, join(path, k)); bad {
					return p, msg, true
				}
			}
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return leaf(raw, t, path)
		}
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return path, "must be an array", true
		}
		for i, it := range items {
			if p, msg, bad := walk(it, t.Elem(), index(path, i)); bad {
				return p, msg, true
			}
		}
	case reflect.Map:
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return path, "must be an object", true
		}
		for k, v := range m {
			if p, msg, bad := walk(v, t.Elem(), join(path, k)); bad {
				return p, msg, true
			}
		}
	default:
		return leaf(raw, t, path)
	}
	return "", "", false
}

func leaf(raw []byte, t reflect.Type, path string) (string, string, bool) {
	if err := json.Unmarshal(raw, reflect.New(t).Interface()); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return path, fmt.Sprintf("must be of type %s, got %s", jsonType(t), te.Value), true
		}
		return path, fmt.Sprintf("invalid value %s: %v", raw, err), true
	}
	return "", "", false
}

func jsonType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "boolean"
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	}
	return t.String()
}

// structFields maps the JSON names of t's fields, flattening inline ones.
func structFields(t reflect.Type, out map[string]reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" && opts == "" {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				structFields(ft, out)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
}

// DecodeNodes decodes a Node or a List of Nodes (JSON, or YAML when
// yamlBody) and validates every item: the first bad field is a
// *FieldError (ErrInvalid) naming its path.
func DecodeNodes(body []byte, yamlBody bool) ([]*Node, error) {
	items, isList, err := decodeObjects[corev1.Node](body, yamlBody, "Node")
	if err != nil {
		return nil, err
	}
	out := make([]*Node, len(items))
	seen := make(map[string]int, len(items))
	for i := range items {
		path := ""
		if isList {
			path = index("items", i)
		}
		n, err := CompileNode(&items[i], path)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[n.Name]; dup {
			return nil, fieldErr(join(path, "metadata.name"), "node %q also at items[%d]", n.Name, j)
		}
		seen[n.Name] = i
		out[i] = n
	}
	return out, nil
}

// DecodeNode decodes exactly one Node (a List is refused), for a write
// that names the node.
func DecodeNode(body []byte, yamlBody bool) (*Node, error) {
	items, isList, err := decodeObjects[corev1.Node](body, yamlBody, "Node")
	if err != nil {
		return nil, err
	}
	if isList {
		return nil, fieldErr("kind", "must be \"Node\", got \"List\"")
	}
	return CompileNode(&items[0], "")
}

// DecodePods decodes a Pod or a List of Pods and compiles each into a
// Workload; a bad item rejects the whole body.
func DecodePods(body []byte, yamlBody bool) ([]*Workload, error) {
	items, isList, err := decodeObjects[corev1.Pod](body, yamlBody, "Pod")
	if err != nil {
		return nil, err
	}
	out := make([]*Workload, len(items))
	seen := make(map[Key]int, len(items))
	for i := range items {
		path := ""
		if isList {
			path = index("items", i)
		}
		w, err := CompilePod(&items[i], path)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[w.Key]; dup {
			return nil, fieldErr(join(path, "metadata.name"), "pod %s also at items[%d]", w.Key, j)
		}
		seen[w.Key] = i
		out[i] = w
	}
	return out, nil
}
