package consulapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// CheckDefinition is a Consul check of a service registration, as decoded:
// one of TTL, HTTP, TCP or GRPC (Consul's script, Docker, UDP, H2PING and
// alias checks are refused).
type CheckDefinition struct {
	ID, Name, Notes string
	// ServiceID is the service a check registered alone is of
	// (/v1/agent/check/register); "" for one of the node.
	ServiceID string
	// Type is ttl, http, tcp or grpc.
	Type string
	// Target is what an active check probes: the URL (http), host:port
	// (tcp), or host:port[/service] (grpc).
	Target        string
	Method, Body  string
	Header        map[string][]string
	TLSSkipVerify bool
	TLSServerName string
	UseTLS        bool // TCPUseTLS or GRPCUseTLS
	// Status is the initial status: passing, warning or critical ("":
	// Consul's default, critical).
	Status string

	Interval, Timeout, TTL, DeregisterCriticalServiceAfter time.Duration

	SuccessBeforePassing, FailuresBeforeWarning, FailuresBeforeCritical int

	// Args, DockerContainerID and Shell are a script or Docker check's
	// (Type script or docker): kept, never run (scriptchecks.go).
	Args              []string
	DockerContainerID string
	Shell             string
}

func duration(path string, dst *time.Duration) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		if isNull(raw) {
			return nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return typeError(path, `a duration string ("10s")`, raw, err)
		}
		if s == "" {
			return nil
		}
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			// "invalid duration": Consul's words, which its tools look for.
			return badRequest(fmt.Sprintf("%s: %q is not a duration: invalid duration (e.g. \"10s\", \"1m30s\")", path, s))
		}
		*dst = d
		return nil
	}
}

// decodeCheck decodes one check definition of a register body at path
// ("Check", "Checks[2]").
func decodeCheck(raw json.RawMessage, path string) (CheckDefinition, error) {
	var c CheckDefinition
	var http, tcp, grpc, serviceID, status, interval string
	var tcpTLS, grpcTLS bool
	p := func(name string) string { return join(path, name) }
	err := decodeObject(raw, path, []field{
		{"CheckID", str(p("CheckID"), &c.ID)},
		{"ID", str(p("ID"), &c.ID)},
		{"Name", str(p("Name"), &c.Name)},
		{"Notes", str(p("Notes"), &c.Notes)},
		{"ServiceID", str(p("ServiceID"), &serviceID)},
		{"Status", str(p("Status"), &status)},
		{"Interval", func(raw json.RawMessage) error {
			json.Unmarshal(raw, &interval) // the text, for the error below; duration checks it
			return duration(p("Interval"), &c.Interval)(raw)
		}},
		{"Timeout", duration(p("Timeout"), &c.Timeout)},
		{"TTL", duration(p("TTL"), &c.TTL)},
		{"DeregisterCriticalServiceAfter", duration(p("DeregisterCriticalServiceAfter"), &c.DeregisterCriticalServiceAfter)},
		{"HTTP", str(p("HTTP"), &http)},
		{"Method", str(p("Method"), &c.Method)},
		{"Body", str(p("Body"), &c.Body)},
		{"Header", func(raw json.RawMessage) error {
			if isNull(raw) {
				return nil
			}
			if err := json.Unmarshal(raw, &c.Header); err != nil {
				return typeError(p("Header"), "an object of string arrays", raw, err)
			}
			return nil
		}},
		{"TLSSkipVerify", boolean(p("TLSSkipVerify"), &c.TLSSkipVerify)},
		{"TLSServerName", str(p("TLSServerName"), &c.TLSServerName)},
		{"TCP", str(p("TCP"), &tcp)},
		{"TCPUseTLS", boolean(p("TCPUseTLS"), &tcpTLS)},
		{"GRPC", str(p("GRPC"), &grpc)},
		{"GRPCUseTLS", boolean(p("GRPCUseTLS"), &grpcTLS)},
		{"SuccessBeforePassing", integer(p("SuccessBeforePassing"), &c.SuccessBeforePassing)},
		{"FailuresBeforeWarning", integer(p("FailuresBeforeWarning"), &c.FailuresBeforeWarning)},
		{"FailuresBeforeCritical", integer(p("FailuresBeforeCritical"), &c.FailuresBeforeCritical)},
		{"OutputMaxSize", ignored(p("OutputMaxSize"), "a number")},
		{"ScriptArgs", jsonValue(p("ScriptArgs"), "an array of strings", &c.Args)},
		{"Args", jsonValue(p("Args"), "an array of strings", &c.Args)},
		{"DockerContainerID", str(p("DockerContainerID"), &c.DockerContainerID)},
		{"Shell", str(p("Shell"), &c.Shell)},
		{"UDP", refused(p("UDP"), "a UDP check")},
		{"H2PING", refused(p("H2PING"), "an H2PING check")},
		{"H2PingUseTLS", refused(p("H2PingUseTLS"), "an H2PING check")},
		{"AliasNode", refused(p("AliasNode"), "an alias check")},
		{"AliasService", refused(p("AliasService"), "an alias check")},
		{"OSService", refused(p("OSService"), "an OS service check")},
	})
	if err != nil {
		return c, err
	}
	kinds := 0
	for _, k := range []struct {
		typ, target string
		tls         bool
		set         bool
	}{
		{"ttl", "", false, c.TTL > 0},
		{"http", http, false, http != ""},
		{"tcp", tcp, tcpTLS, tcp != ""},
		{"grpc", grpc, grpcTLS, grpc != ""},
		{"script", "", false, len(c.Args) > 0 && c.DockerContainerID == ""},
		{"docker", "", false, c.DockerContainerID != ""},
	} {
		if k.set {
			kinds++
			c.Type, c.Target, c.UseTLS = k.typ, k.target, k.tls
		}
	}
	switch {
	case kinds == 0:
		return c, badRequest(path + ": no check type: give one of TTL, HTTP, TCP, GRPC, Args (script) or DockerContainerID")
	case kinds > 1:
		return c, badRequest(path + ": several check types: give one of TTL, HTTP, TCP, GRPC, Args (script) or DockerContainerID")
	case c.Type == "docker" && len(c.Args) == 0:
		return c, badRequest(path + ".Args: required for a Docker check (the command to run in the container)")
	case c.Shell != "" && c.Type != "docker":
		return c, badRequest(path + ".Shell: only a Docker check has a shell")
	case c.Type != "ttl" && c.Interval <= 0 && interval != "":
		// Given, but zero: Consul's words (Interval must be > 0).
		return c, badRequest(fmt.Sprintf("%s.Interval: must be > 0 for %s check, got %q", path, checkKind(c.Type), interval))
	case c.Type != "ttl" && c.Interval <= 0:
		return c, badRequest(fmt.Sprintf("%s.Interval: required for %s check (a duration > 0, e.g. \"10s\")", path, checkKind(c.Type)))
	case c.SuccessBeforePassing < 0 || c.FailuresBeforeWarning < 0 || c.FailuresBeforeCritical < 0:
		return c, badRequest(path + ": SuccessBeforePassing, FailuresBeforeWarning and FailuresBeforeCritical must not be negative")
	}
	c.ServiceID = serviceID
	switch status {
	case "", "passing", "warning", "critical":
		c.Status = status
	default:
		return c, badRequest(fmt.Sprintf("%s.Status: %q is not passing, warning or critical", path, status))
	}
	return c, nil
}

// checkKind names a check type with its article: "an HTTP", "a TCP".
func checkKind(typ string) string {
	if typ == "http" {
		return "an HTTP"
	}
	return "a " + strings.ToUpper(typ)
}
