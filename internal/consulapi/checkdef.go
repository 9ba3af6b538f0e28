package consulapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/kv"
)

// The Definition of a check registered through the catalog or a
// transaction: Consul keeps it for display (its catalog runs no check),
// and so does Sextant, normalized to what Consul answers.

// checkDefinitionIn is Consul's HealthCheckDefinition as clients send it:
// durations as strings ("5s") or numbers (nanoseconds), in the
// deprecated fields (Interval, what consul/api sends) or the *Duration
// ones.
type checkDefinitionIn struct {
	HTTP                                   string
	Header                                 map[string][]string
	Method                                 string
	Body                                   string
	TLSServerName                          string
	TLSSkipVerify                          bool
	TCP                                    string
	TCPUseTLS                              bool
	UDP                                    string
	GRPC                                   string
	OSService                              string
	GRPCUseTLS                             bool
	SessionName                            string
	Interval                               json.RawMessage
	Timeout                                json.RawMessage
	DeregisterCriticalServiceAfter         json.RawMessage
	IntervalDuration                       json.RawMessage
	TimeoutDuration                        json.RawMessage
	DeregisterCriticalServiceAfterDuration json.RawMessage
}

// checkDefinitionOut is the Definition answered: durations as Consul's
// strings, which consul/api reads into both of its duration fields.
type checkDefinitionOut struct {
	HTTP                           string              `json:",omitempty"`
	Header                         map[string][]string `json:",omitempty"`
	Method                         string              `json:",omitempty"`
	Body                           string              `json:",omitempty"`
	TLSServerName                  string              `json:",omitempty"`
	TLSSkipVerify                  bool                `json:",omitempty"`
	TCP                            string              `json:",omitempty"`
	TCPUseTLS                      bool                `json:",omitempty"`
	UDP                            string              `json:",omitempty"`
	GRPC                           string              `json:",omitempty"`
	OSService                      string              `json:",omitempty"`
	GRPCUseTLS                     bool                `json:",omitempty"`
	SessionName                    string              `json:",omitempty"`
	Interval                       string              `json:",omitempty"`
	Timeout                        string              `json:",omitempty"`
	DeregisterCriticalServiceAfter string              `json:",omitempty"`
}

// normalizeDefinition decodes a check's Definition strictly (path names
// it in a refusal) and returns its JSON as answered (nil: none) and the
// check type it implies ("" if none).
func normalizeDefinition(raw json.RawMessage, path string) (json.RawMessage, string, error) {
	if isEmptyJSON(raw) {
		return nil, "", nil
	}
	var in checkDefinitionIn
	if err := strictJSON(raw, &in); err != nil {
		var he *httpError
		if errors.As(err, &he) {
			he.msg = path + ": " + he.msg
		}
		return nil, "", err
	}
	out := checkDefinitionOut{HTTP: in.HTTP, Header: in.Header, Method: in.Method, Body: in.Body, TLSServerName: in.TLSServerName,
		TLSSkipVerify: in.TLSSkipVerify, TCP: in.TCP, TCPUseTLS: in.TCPUseTLS, UDP: in.UDP, GRPC: in.GRPC, OSService: in.OSService,
		GRPCUseTLS: in.GRPCUseTLS, SessionName: in.SessionName}
	for _, d := range []struct {
		name        string
		short, long json.RawMessage
		dst         *string
	}{
		{"Interval", in.Interval, in.IntervalDuration, &out.Interval},
		{"Timeout", in.Timeout, in.TimeoutDuration, &out.Timeout},
		{"DeregisterCriticalServiceAfter", in.DeregisterCriticalServiceAfter, in.DeregisterCriticalServiceAfterDuration, &out.DeregisterCriticalServiceAfter},
	} {
		v, err := definitionDuration(d.long)
		if err != nil {
			return nil, "", badRequest(fmt.Sprintf("%s.%sDuration: %v", path, d.name, err))
		}
		if v == 0 {
			if v, err = definitionDuration(d.short); err != nil {
				return nil, "", badRequest(fmt.Sprintf("%s.%s: %v", path, d.name, err))
			}
		}
		if v != 0 {
			*d.dst = v.String()
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, "", fmt.Errorf("consulapi: check definition: %w", err)
	}
	if string(b) == "{}" {
		b = nil
	}
	var typ string
	switch {
	case in.HTTP != "":
		typ = "http"
	case in.TCP != "":
		typ = "tcp"
	case in.UDP != "":
		typ = "udp"
	case in.GRPC != "":
		typ = "grpc"
	case in.OSService != "":
		typ = "os_service"
	}
	return b, typ, nil
}

// definitionDuration reads a duration given as a string or a number of
// nanoseconds; none is 0.
func definitionDuration(raw json.RawMessage) (time.Duration, error) {
	if isEmptyJSON(raw) {
		return 0, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return 0, nil
		}
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("%q is not a duration", s)
		}
		return d, nil
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil || n < 0 {
		return 0, fmt.Errorf("%s is not a duration (a string such as \"10s\", or nanoseconds)", strings.TrimSpace(string(raw)))
	}
	return time.Duration(n), nil
}

// kvCheck is the record of catalog check c: its id defaults to its name,
// its status to critical, its type to the one its definition implies.
func kvCheck(c *catalogCheck, path string) (kv.Check, error) {
	def, typ, err := normalizeDefinition(c.Definition, path+".Definition")
	if err != nil {
		return kv.Check{}, err
	}
	kc := kv.Check{CheckID: c.CheckID, Name: c.Name, Status: c.Status, Notes: c.Notes, Output: c.Output,
		ServiceID: c.ServiceID, ServiceName: c.ServiceName, Type: c.Type, Definition: def}
	if kc.CheckID == "" {
		kc.CheckID = kc.Name
	}
	if kc.Status == "" {
		kc.Status = "critical"
	}
	if kc.Type == "" {
		kc.Type = typ
	}
	if kc.CheckID == "" {
		return kv.Check{}, badRequest(path + ": missing CheckID (and Name)")
	}
	if !instance.ValidStatus(kc.Status) {
		return kv.Check{}, badRequest(fmt.Sprintf("%s.Status: %q is not passing, warning or critical", path, kc.Status))
	}
	return kc, nil
}
