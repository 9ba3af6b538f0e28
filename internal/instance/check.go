package instance

import (
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Check is a health check of an instance that the server runs itself
// (Consul's agent checks): a probe of the instance's endpoint (http, tcp,
// grpc) at an interval, or a TTL the instance (or its client) must keep
// passing. Its definition is the user's; its state (Status, Output,
// ChangedAt) is the server's, set through the registry's SetCheck. An
// instance with checks is healthy while none of them is critical.
// Instances are immutable, and so are their checks: a change is a new
// instance version with a new Checks slice.
type Check struct {
	ID   string // unique in its instance; default: Name, else Type
	Name string
	Type string // CheckTTL, CheckHTTP, CheckTCP, CheckGRPC
	// Target is what is probed: for http the URL, for tcp and grpc
	// host:port (default: the instance's host and port). Empty for ttl.
	Target string
	// GRPCService is the service name of a grpc check's
	// grpc.health.v1.Health/Check request ("": the server as a whole).
	GRPCService string
	// Method, Header and TLSSkipVerify are an http check's request: the
	// method (default GET), headers, and whether an https target's
	// certificate is checked.
	Method        string
	Header        map[string][]string
	TLSSkipVerify bool
	// Interval is how often a probe runs, Timeout how long one may take
	// (default: the smaller of 10s and Interval). Zero for ttl checks.
	Interval time.Duration
	Timeout  time.Duration
	// TTL is how long a ttl check stays passing (or warning) without an
	// update before it turns critical.
	TTL time.Duration
	// SuccessBeforePassing and FailuresBeforeCritical are Consul's
	// thresholds: consecutive probe results needed before the status
	// turns passing, or warning/critical (0 and 1: the first result).
	SuccessBeforePassing   int
	FailuresBeforeCritical int
	// DeregisterCriticalServiceAfter deregisters the instance once this
	// check has been critical this long (0: never).
	DeregisterCriticalServiceAfter time.Duration

	// Set by the server: the status, the output of the result that set
	// it, and when the status last changed. On register, Status is the
	// initial status of a new check (default critical, as Consul's).
	Status    string
	Output    string
	ChangedAt time.Time
}

// Check types.
const (
	CheckTTL  = "ttl"
	CheckHTTP = "http"
	CheckTCP  = "tcp"
	CheckGRPC = "grpc"
)

// Check statuses (Consul's).
const (
	StatusPassing  = "passing"
	StatusWarning  = "warning"
	StatusCritical = "critical"
)

// Limits of checks.
const (
	MaxChecks       = 16
	MaxCheckOutput  = 4096
	MaxCheckURL     = 2048
	MaxCheckHeaders = 32
	MinCheckPeriod  = time.Second      // interval and ttl
	MaxCheckPeriod  = 24 * time.Hour   // interval and ttl
	MaxCheckTimeout = 5 * time.Minute  // timeout
	DefaultTimeout  = 10 * time.Second // timeout, when below the interval
	MaxThreshold    = 100              // success_before_passing, failures_before_critical
	MaxCriticalFor  = MaxDeregisterAfter * time.Second
)

// ValidStatus reports whether s is a check status.
func ValidStatus(s string) bool {
	return s == StatusPassing || s == StatusWarning || s == StatusCritical
}

// SameDefinition reports whether c and o are the same check as the user
// defined it (state aside): re-registering it keeps its state.
func (c *Check) SameDefinition(o *Check) bool {
	return c.ID == o.ID && c.Name == o.Name && c.Type == o.Type && c.Target == o.Target &&
		c.GRPCService == o.GRPCService && c.Method == o.Method && c.TLSSkipVerify == o.TLSSkipVerify &&
		c.Interval == o.Interval && c.Timeout == o.Timeout && c.TTL == o.TTL &&
		c.SuccessBeforePassing == o.SuccessBeforePassing && c.FailuresBeforeCritical == o.FailuresBeforeCritical &&
		c.DeregisterCriticalServiceAfter == o.DeregisterCriticalServiceAfter &&
		maps.EqualFunc(c.Header, o.Header, slices.Equal)
}

// Check returns the instance's check with id, or nil.
func (in *Instance) Check(id string) *Check {
	for i := range in.Checks {
		if in.Checks[i].ID == id {
			return &in.Checks[i]
		}
	}
	return nil
}

// Critical reports whether one of the instance's checks is critical.
func (in *Instance) Critical() bool {
	for i := range in.Checks {
		if in.Checks[i].Status == StatusCritical {
			return true
		}
	}
	return false
}

// SetHealthy sets Healthy from what it is made of: the heartbeat is alive
// (TTLExpired is false) and no check is critical. Warning counts as
// healthy, as Consul's DNS counts it.
func (in *Instance) SetHealthy() { in.Healthy = !in.TTLExpired && !in.Critical() }

// WithCheck returns a copy of the instance whose check i has status and
// output; the status change time moves to now if the status changed.
func (in *Instance) WithCheck(i int, status, output string, now time.Time) *Instance {
	n := in.Clone()
	n.Checks = slices.Clone(in.Checks)
	c := &n.Checks[i]
	if c.Status != status {
		c.ChangedAt = now
	}
	c.Status, c.Output = status, output
	n.SetHealthy()
	return n
}

// KeepChecks gives in's checks their state: the state of cur's check of
// the same definition (a re-register changes nothing of it), else the
// initial status (default critical), changed now.
func (in *Instance) KeepChecks(cur *Instance, now time.Time) {
	for i := range in.Checks {
		c := &in.Checks[i]
		if cur != nil {
			if old := cur.Check(c.ID); old != nil && old.SameDefinition(c) {
				c.Status, c.Output, c.ChangedAt = old.Status, old.Output, old.ChangedAt
				continue
			}
		}
		if c.Status == "" {
			c.Status = StatusCritical
		}
		c.Output, c.ChangedAt = "", now
	}
}

// TrimOutput makes s a check's output: valid UTF-8 of at most
// MaxCheckOutput bytes.
func TrimOutput(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxCheckOutput {
		return s
	}
	s = s[:MaxCheckOutput]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// prepareChecks validates the checks of instance in (index i of its
// batch), fills their defaults, and clears the state the server sets.
func prepareChecks(i int, in *Instance) error {
	if len(in.Checks) > MaxChecks {
		return NewFieldError(i, "checks", "%d checks, at most %d allowed", len(in.Checks), MaxChecks)
	}
	for j := range in.Checks {
		c := &in.Checks[j]
		f := "checks[" + strconv.Itoa(j) + "]."
		if err := prepareCheck(i, f, c, in); err != nil {
			return err
		}
		for k := range j {
			if in.Checks[k].ID == c.ID {
				return NewFieldError(i, f+"id", "%q repeats the id of checks[%d]: give each check its own id", c.ID, k)
			}
		}
	}
	return nil
}

func prepareCheck(i int, f string, c *Check, in *Instance) error {
	switch c.Type {
	case CheckTTL, CheckHTTP, CheckTCP, CheckGRPC:
	case "":
		return NewFieldError(i, f+"type", "required: ttl, http, tcp or grpc")
	default:
		return NewFieldError(i, f+"type", "unknown check type %q: want ttl, http, tcp or grpc", c.Type)
	}
	if len(c.Name) > MaxNameLen || !utf8.ValidString(c.Name) {
		return NewFieldError(i, f+"name", "must be at most %d bytes of UTF-8", MaxNameLen)
	}
	if c.ID == "" {
		c.ID = c.Name
		if c.ID == "" {
			c.ID = c.Type
		}
	}
	if !ValidID(c.ID) {
		return NewFieldError(i, f+"id", "%q is not a valid check id: 1..128 chars of [A-Za-z0-9._:-] (without an id, the name is the id)", c.ID)
	}
	if c.Status != "" && !ValidStatus(c.Status) {
		return NewFieldError(i, f+"status", "unknown check status %q: want passing, warning or critical (the initial status; default critical)", c.Status)
	}
	c.Output, c.ChangedAt = "", time.Time{}
	if c.SuccessBeforePassing < 0 || c.SuccessBeforePassing > MaxThreshold {
		return NewFieldError(i, f+"success_before_passing", "%d is out of range 0..%d", c.SuccessBeforePassing, MaxThreshold)
	}
	if c.FailuresBeforeCritical < 0 || c.FailuresBeforeCritical > MaxThreshold {
		return NewFieldError(i, f+"failures_before_critical", "%d is out of range 0..%d", c.FailuresBeforeCritical, MaxThreshold)
	}
	if d := c.DeregisterCriticalServiceAfter; d != 0 && (d < time.Second || d > MaxCriticalFor) {
		return NewFieldError(i, f+"deregister_critical_service_after", "%v is out of range: 0 (never) or 1s..%v", d, MaxCriticalFor)
	}
	if c.Type != CheckHTTP {
		switch {
		case c.Method != "":
			return NewFieldError(i, f+"method", "only http checks have a method")
		case len(c.Header) > 0:
			return NewFieldError(i, f+"header", "only http checks have headers")
		case c.TLSSkipVerify:
			return NewFieldError(i, f+"tls_skip_verify", "only http checks have TLS")
		}
	}
	if c.Type != CheckGRPC && c.GRPCService != "" {
		return NewFieldError(i, f+"grpc_service", "only grpc checks have a service name")
	}
	if c.Type == CheckTTL {
		switch {
		case c.Target != "":
			return NewFieldError(i, f+"target", "a ttl check probes nothing: it has no target")
		case c.Interval != 0 || c.Timeout != 0:
			return NewFieldError(i, f+"interval", "a ttl check has no interval or timeout: set ttl")
		case c.TTL < MinCheckPeriod || c.TTL > MaxCheckPeriod:
			return NewFieldError(i, f+"ttl", "%v is out of range %v..%v", c.TTL, MinCheckPeriod, MaxCheckPeriod)
		}
		return nil
	}
	if c.TTL != 0 {
		return NewFieldError(i, f+"ttl", "only ttl checks have a ttl")
	}
	if c.Interval < MinCheckPeriod || c.Interval > MaxCheckPeriod {
		return NewFieldError(i, f+"interval", "%v is out of range %v..%v", c.Interval, MinCheckPeriod, MaxCheckPeriod)
	}
	if c.Timeout == 0 {
		c.Timeout = min(DefaultTimeout, c.Interval)
	}
	if c.Timeout < time.Millisecond || c.Timeout > MaxCheckTimeout {
		return NewFieldError(i, f+"timeout", "%v is out of range 1ms..%v", c.Timeout, MaxCheckTimeout)
	}
	switch c.Type {
	case CheckHTTP:
		return prepareHTTPCheck(i, f, c)
	case CheckGRPC:
		if len(c.GRPCService) > 256 || !utf8.ValidString(c.GRPCService) {
			return NewFieldError(i, f+"grpc_service", "must be at most 256 bytes of UTF-8")
		}
	}
	if c.Target == "" {
		c.Target = net.JoinHostPort(in.Host, strconv.Itoa(in.Port))
	}
	host, port, err := net.SplitHostPort(c.Target)
	if err != nil || !validHost(host) {
		return NewFieldError(i, f+"target", "%q is not host:port (an IP address or DNS name, and a port)", c.Target)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return NewFieldError(i, f+"target", "%q: port %q is out of range 1..65535", c.Target, port)
	}
	return nil
}

func prepareHTTPCheck(i int, f string, c *Check) error {
	if c.Target == "" {
		return NewFieldError(i, f+"target", "required: the URL to probe, e.g. http://10.0.0.1:8080/health")
	}
	u, err := url.Parse(c.Target)
	switch {
	case len(c.Target) > MaxCheckURL:
		return NewFieldError(i, f+"target", "URL longer than %d bytes", MaxCheckURL)
	case err != nil:
		return NewFieldError(i, f+"target", "%q is not a URL: %v", c.Target, strings.TrimPrefix(err.Error(), "parse "))
	case u.Scheme != "http" && u.Scheme != "https":
		return NewFieldError(i, f+"target", "%q: the scheme must be http or https", c.Target)
	case u.Host == "" || u.Hostname() == "":
		return NewFieldError(i, f+"target", "%q has no host", c.Target)
	case u.User != nil:
		return NewFieldError(i, f+"target", "%q: credentials in the URL are not stored; send them as a header", c.Target)
	}
	if c.Method == "" {
		c.Method = "GET"
	}
	if len(c.Method) > 16 || !validToken(c.Method) {
		return NewFieldError(i, f+"method", "%q is not an HTTP method", c.Method)
	}
	if len(c.Header) > MaxCheckHeaders {
		return NewFieldError(i, f+"header", "%d headers, at most %d allowed", len(c.Header), MaxCheckHeaders)
	}
	for name, values := range c.Header {
		if len(name) > 256 || !validToken(name) {
			return NewFieldError(i, f+"header", "%q is not a header name", name)
		}
		for _, v := range values {
			if len(v) > MaxValueLen || strings.ContainsAny(v, "\r\n\x00") || !utf8.ValidString(v) {
				return NewFieldError(i, f+"header."+name, "a value must be at most %d bytes of UTF-8 without CR, LF or NUL", MaxValueLen)
			}
		}
	}
	return nil
}

// validToken reports whether s is an HTTP token (RFC 9110), as method and
// header names are.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}
