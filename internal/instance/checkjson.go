package instance

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sextant-mesh/sextant/internal/jsonkeys"
	"github.com/sextant-mesh/sextant/internal/jsonstring"
)

// The JSON of checks: an instance's "checks" member in the API, and the
// sx_instance checks column. Durations are Go duration strings ("10s"),
// as Consul writes them. Checks are few and rare, so they are decoded
// with encoding/json, strictly, into checkJSON.

// checkJSON is a check as the API writes and reads it.
type checkJSON struct {
	ID                             string              `json:"id"`
	Name                           string              `json:"name"`
	Type                           string              `json:"type"`
	Target                         string              `json:"target"`
	GRPCService                    string              `json:"grpc_service"`
	Method                         string              `json:"method"`
	Header                         map[string][]string `json:"header"`
	TLSSkipVerify                  bool                `json:"tls_skip_verify"`
	Interval                       string              `json:"interval"`
	Timeout                        string              `json:"timeout"`
	TTL                            string              `json:"ttl"`
	SuccessBeforePassing           int                 `json:"success_before_passing"`
	FailuresBeforeCritical         int                 `json:"failures_before_critical"`
	DeregisterCriticalServiceAfter string              `json:"deregister_critical_service_after"`
	Status                         string              `json:"status"`
	Output                         string              `json:"output"`
	ChangedAt                      string              `json:"changed_at"`
}

// appendChecksJSON appends checks as a JSON array: every field that is set,
// and the state (status, output, changed_at) always.
func appendChecksJSON(b []byte, checks []Check) []byte {
	b = append(b, '[')
	for i := range checks {
		c := &checks[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = jsonstring.Append(b, c.ID)
		b = appendOptString(b, "name", c.Name)
		b = appendOptString(b, "type", c.Type)
		b = appendOptString(b, "target", c.Target)
		b = appendOptString(b, "grpc_service", c.GRPCService)
		b = appendOptString(b, "method", c.Method)
		if len(c.Header) > 0 {
			b = append(b, `,"header":{`...)
			names := make([]string, 0, len(c.Header))
			for n := range c.Header {
				names = append(names, n)
			}
			slices.Sort(names)
			for j, n := range names {
				if j > 0 {
					b = append(b, ',')
				}
				b = jsonstring.Append(b, n)
				b = append(b, ":["...)
				for k, v := range c.Header[n] {
					if k > 0 {
						b = append(b, ',')
					}
					b = jsonstring.Append(b, v)
				}
				b = append(b, ']')
			}
			b = append(b, '}')
		}
		if c.TLSSkipVerify {
			b = append(b, `,"tls_skip_verify":true`...)
		}
		b = appendOptDuration(b, "interval", c.Interval)
		b = appendOptDuration(b, "timeout", c.Timeout)
		b = appendOptDuration(b, "ttl", c.TTL)
		b = appendOptInt(b, "success_before_passing", c.SuccessBeforePassing)
		b = appendOptInt(b, "failures_before_critical", c.FailuresBeforeCritical)
		b = appendOptDuration(b, "deregister_critical_service_after", c.DeregisterCriticalServiceAfter)
		b = append(b, `,"status":`...)
		b = jsonstring.Append(b, c.Status)
		b = append(b, `,"output":`...)
		b = jsonstring.Append(b, c.Output)
		b = append(b, `,"changed_at":"`...)
		b = c.ChangedAt.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, `"}`...)
	}
	return append(b, ']')
}

func appendOptString(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	b = append(b, `,"`+name+`":`...)
	return jsonstring.Append(b, v)
}

func appendOptInt(b []byte, name string, v int) []byte {
	if v == 0 {
		return b
	}
	b = append(b, `,"`+name+`":`...)
	return strconv.AppendInt(b, int64(v), 10)
}

func appendOptDuration(b []byte, name string, d time.Duration) []byte {
	if d == 0 {
		return b
	}
	b = append(b, `,"`+name+`":"`...)
	return append(append(b, d.String()...), '"')
}

// checks decodes the register body's "checks" member, at the cursor,
// into in.Checks (a definition: the state the server sets is dropped,
// except status, the initial status of a new check).
func (d *decodeState) checks(in *Instance) error {
	if d.null() {
		in.Checks = nil
		return nil
	}
	if d.peek() != '[' {
		return d.typeErr("checks", "array")
	}
	var wire []*checkJSON
	n, err := decodeJSONValue(d.b[d.i:], &wire)
	if err != nil {
		return invalid(d.field("checks"), "%s", err.Error())
	}
	if jsonkeys.Check(d.b[d.i:d.i+n]) != nil {
		return d.duplicate()
	}
	d.i += n
	in.Checks = nil
	if len(wire) > 0 {
		in.Checks = make([]Check, len(wire))
	}
	for j, w := range wire {
		if w == nil {
			continue // a null check: an empty definition, refused by Prepare
		}
		if err := w.definition(&in.Checks[j]); err != nil {
			var fe *FieldError
			if errors.As(err, &fe) {
				return invalid(d.field("checks["+strconv.Itoa(j)+"]."+fe.Field), "%s", fe.Msg)
			}
			return err
		}
	}
	return nil
}

// decodeJSONValue decodes the JSON value at the start of b into v, strictly
// (unknown fields refused), and returns its length.
func decodeJSONValue(b []byte, v any) (int, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			return 0, errors.New(te.Field + ": expected " + te.Type.String() + ", got JSON " + te.Value)
		case errors.As(err, &se):
			return 0, errors.New("malformed JSON: " + strings.TrimPrefix(err.Error(), "json: "))
		}
		return 0, errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	return int(dec.InputOffset()), nil
}

// definition fills c with w's definition and initial status.
func (w *checkJSON) definition(c *Check) error {
	*c = Check{ID: w.ID, Name: w.Name, Type: w.Type, Target: w.Target, GRPCService: w.GRPCService,
		Method: w.Method, Header: w.Header, TLSSkipVerify: w.TLSSkipVerify, Status: w.Status,
		SuccessBeforePassing: w.SuccessBeforePassing, FailuresBeforeCritical: w.FailuresBeforeCritical}
	if len(c.Header) == 0 {
		c.Header = nil
	}
	for _, f := range [...]struct {
		name string
		s    string
		d    *time.Duration
	}{
		{"interval", w.Interval, &c.Interval}, {"timeout", w.Timeout, &c.Timeout}, {"ttl", w.TTL, &c.TTL},
		{"deregister_critical_service_after", w.DeregisterCriticalServiceAfter, &c.DeregisterCriticalServiceAfter},
	} {
		if f.s == "" {
			continue
		}
		d, err := time.ParseDuration(f.s)
		if err != nil {
			return NewFieldError(-1, f.name, "%q is not a duration such as \"10s\" or \"1m30s\"", f.s)
		}
		*f.d = d
	}
	return nil
}

// parseChecksColumn reads the checks column (appendChecksJSON's form),
// state included.
func parseChecksColumn(b []byte) ([]Check, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil
	}
	var wire []checkJSON
	if _, err := decodeJSONValue(b, &wire); err != nil {
		return nil, errors.New("instance: bad checks column: " + err.Error())
	}
	if len(wire) == 0 {
		return nil, nil
	}
	out := make([]Check, len(wire))
	for j := range wire {
		if err := wire[j].definition(&out[j]); err != nil {
			return nil, errors.New("instance: bad checks column: " + err.Error())
		}
		out[j].Output = wire[j].Output
		if wire[j].ChangedAt != "" {
			t, err := time.Parse(time.RFC3339Nano, wire[j].ChangedAt)
			if err != nil {
				return nil, errors.New("instance: bad checks column: changed_at: " + err.Error())
			}
			out[j].ChangedAt = t.UTC()
		}
	}
	return out, nil
}
