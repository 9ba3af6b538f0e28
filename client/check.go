package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"
)

// Check is a health check the server runs for an instance (docs/health.md):
// an HTTP, TCP or gRPC probe every Interval, or a TTL the instance keeps
// passing with SetCheck. Status, Output and ChangedAt are the server's; on
// register, Status is a new check's initial status (default critical).
type Check struct {
	ID            string              `json:"id,omitempty"`
	Name          string              `json:"name,omitempty"`
	Type          string              `json:"type"` // "http", "tcp", "grpc" or "ttl"
	Target        string              `json:"target,omitempty"`
	GRPCService   string              `json:"grpc_service,omitempty"`
	Method        string              `json:"method,omitempty"`
	Header        map[string][]string `json:"header,omitempty"`
	TLSSkipVerify bool                `json:"tls_skip_verify,omitempty"`
	Interval      Duration            `json:"interval,omitzero"`
	Timeout       Duration            `json:"timeout,omitzero"`
	TTL           Duration            `json:"ttl,omitzero"`
	// Consecutive results before the status changes (0: the first).
	SuccessBeforePassing   int `json:"success_before_passing,omitempty"`
	FailuresBeforeCritical int `json:"failures_before_critical,omitempty"`
	// DeregisterCriticalServiceAfter deregisters the instance once the
	// check has been critical this long (0: never).
	DeregisterCriticalServiceAfter Duration `json:"deregister_critical_service_after,omitzero"`

	Status    string    `json:"status,omitempty"` // "passing", "warning" or "critical"
	Output    string    `json:"output,omitempty"`
	ChangedAt time.Time `json:"changed_at,omitzero"`
}

// Duration is a time.Duration written in JSON as Go writes durations
// ("10s"), as the API reads them.
type Duration time.Duration

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}

// SetCheck sets the status ("passing", "warning" or "critical") and output
// of check checkID of instance id: a ttl check's update, which renews its
// TTL. Nothing is written when neither changes. An unknown instance or
// check is an error that errors.Is(err, ErrNotFound).
func (c *Client) SetCheck(ctx context.Context, id, checkID, status, output string) (revision uint64, err error) {
	body, err := json.Marshal(struct {
		Status string `json:"status"`
		Output string `json:"output"`
	}{status, output})
	if err != nil {
		return 0, err
	}
	var res deregisterAnswer
	err = c.do(ctx, http.MethodPut, "/v1/instances/"+url.PathEscape(id)+"/checks/"+url.PathEscape(checkID), body, &res)
	return res.Revision, err
}
