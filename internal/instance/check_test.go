package instance

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// registerOne decodes and prepares one bare instance body.
func registerOne(t *testing.T, body string) (*Instance, error) {
	t.Helper()
	ins, _, err := DecodeRegister([]byte(body))
	if err != nil {
		return nil, err
	}
	return ins[0], Prepare(-1, ins[0])
}

const checkedBody = `{"service":"web","host":"10.0.0.7","port":8080,"checks":[
	{"type":"http","target":"https://10.0.0.7:8443/health","method":"HEAD","header":{"X-A":["1","2"]},"tls_skip_verify":true,
	 "interval":"10s","timeout":"2s","success_before_passing":2,"failures_before_critical":3,"deregister_critical_service_after":"90m"},
	{"id":"db","type":"tcp","interval":"5s"},
	{"name":"grpc-health","type":"grpc","grpc_service":"pkg.Svc","interval":"1m"},
	{"type":"ttl","ttl":"30s","status":"passing"}]}`

func TestDecodeChecks(t *testing.T) {
	in, err := registerOne(t, checkedBody)
	if err != nil {
		t.Fatal(err)
	}
	want := []Check{
		{ID: "http", Type: "http", Target: "https://10.0.0.7:8443/health", Method: "HEAD", Header: map[string][]string{"X-A": {"1", "2"}},
			TLSSkipVerify: true, Interval: 10 * time.Second, Timeout: 2 * time.Second, SuccessBeforePassing: 2, FailuresBeforeCritical: 3,
			DeregisterCriticalServiceAfter: 90 * time.Minute},
		{ID: "db", Type: "tcp", Target: "10.0.0.7:8080", Interval: 5 * time.Second, Timeout: 5 * time.Second},
		{ID: "grpc-health", Name: "grpc-health", Type: "grpc", Target: "10.0.0.7:8080", GRPCService: "pkg.Svc", Interval: time.Minute, Timeout: 10 * time.Second},
		{ID: "ttl", Type: "ttl", TTL: 30 * time.Second, Status: "passing"},
	}
	if d := cmp.Diff(want, in.Checks); d != "" {
		t.Fatalf("checks (-want +got):\n%s", d)
	}
}

// TestCheckErrors: bad checks are refused with the field at fault named.
func TestCheckErrors(t *testing.T) {
	base := `{"service":"s","host":"10.0.0.1","port":80,"checks":[%s]}`
	for _, tc := range []struct{ name, check, field, msg string }{
		{"unknown type", `{"type":"icmp","interval":"1s"}`, "checks[0].type", `unknown check type "icmp"`},
		{"no type", `{"interval":"1s"}`, "checks[0].type", "required"},
		{"interval 0", `{"type":"tcp"}`, "checks[0].interval", "out of range"},
		{"interval huge", `{"type":"tcp","interval":"9999h"}`, "checks[0].interval", "out of range"},
		{"interval not a duration", `{"type":"tcp","interval":"10"}`, "checks[0].interval", "not a duration"},
		{"interval a number", `{"type":"tcp","interval":10}`, "checks", "expected string"},
		{"malformed URL", `{"type":"http","target":"http://[::1","interval":"1s"}`, "checks[0].target", "not a URL"},
		{"URL scheme", `{"type":"http","target":"ftp://h/x","interval":"1s"}`, "checks[0].target", "scheme"},
		{"URL without host", `{"type":"http","target":"http:///x","interval":"1s"}`, "checks[0].target", "no host"},
		{"http without URL", `{"type":"http","interval":"1s"}`, "checks[0].target", "required"},
		{"tcp target", `{"type":"tcp","target":"nohost","interval":"1s"}`, "checks[0].target", "host:port"},
		{"tcp port", `{"type":"tcp","target":"h:0","interval":"1s"}`, "checks[0].target", "out of range"},
		{"ttl without ttl", `{"type":"ttl"}`, "checks[0].ttl", "out of range"},
		{"ttl with interval", `{"type":"ttl","ttl":"5s","interval":"1s"}`, "checks[0].interval", "no interval"},
		{"ttl on tcp", `{"type":"tcp","ttl":"5s","interval":"1s"}`, "checks[0].ttl", "only ttl"},
		{"method on tcp", `{"type":"tcp","method":"GET","interval":"1s"}`, "checks[0].method", "only http"},
		{"bad method", `{"type":"http","target":"http://h/","method":"G T","interval":"1s"}`, "checks[0].method", "not an HTTP method"},
		{"bad header", `{"type":"http","target":"http://h/","header":{"A":["x\ny"]},"interval":"1s"}`, "checks[0].header.A", "CR, LF"},
		{"status", `{"type":"tcp","interval":"1s","status":"ok"}`, "checks[0].status", `unknown check status "ok"`},
		{"threshold", `{"type":"tcp","interval":"1s","failures_before_critical":101}`, "checks[0].failures_before_critical", "out of range"},
		{"deregister", `{"type":"tcp","interval":"1s","deregister_critical_service_after":"1ms"}`, "checks[0].deregister_critical_service_after", "out of range"},
		{"timeout", `{"type":"tcp","interval":"1s","timeout":"1h"}`, "checks[0].timeout", "out of range"},
		{"unknown field", `{"type":"tcp","interval":"1s","http":"x"}`, "checks", `unknown field "http"`},
		{"duplicate id", `{"type":"tcp","interval":"1s"},{"type":"tcp","interval":"2s"}`, "checks[1].id", "repeats"},
		{"bad id", `{"id":"a b","type":"tcp","interval":"1s"}`, "checks[0].id", "not a valid check id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := registerOne(t, strings.Replace(base, "%s", tc.check, 1))
			var fe *FieldError
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v, want a field error", err)
			}
			if fe.Field != tc.field || !strings.Contains(fe.Msg, tc.msg) {
				t.Fatalf("error on %q: %q; want %q containing %q", fe.Field, fe.Msg, tc.field, tc.msg)
			}
		})
	}
	ins, _, err := DecodeRegister([]byte(`{"instances":[{"service":"s","host":"h","port":1,"checks":[{"type":"tcp","interval":"x"}]}]}`))
	var fe *FieldError
	if ins != nil || !errors.As(err, &fe) || fe.Field != "instances[0].checks[0].interval" {
		t.Fatalf("batch: %v", err)
	}
}

// checkedInstance is a prepared instance with checks and their state.
func checkedInstance(t *testing.T) *Instance {
	in, err := registerOne(t, checkedBody)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1700000000, 123).UTC()
	in.KeepChecks(nil, now)
	in.Checks[1].Output = "dial tcp: refused \"x\"\n"
	in.TTLExpired = true
	in.SetHealthy()
	in.CreatedAt, in.UpdatedAt = now, now
	return in
}

var cmpInstance = []cmp.Option{cmpopts.IgnoreUnexported(Instance{}), cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) }),
	cmp.Comparer(func(a, b interface{ Len() int }) bool { return a.Len() == b.Len() })}

func TestCheckCodecRoundTrip(t *testing.T) {
	in := checkedInstance(t)
	if in.Healthy || !in.Critical() || in.Checks[3].Status != StatusPassing {
		t.Fatalf("state: healthy %v critical %v ttl check %q", in.Healthy, in.Critical(), in.Checks[3].Status)
	}
	b := in.AppendBinary(nil)
	if b[0] != codecVersion3 {
		t.Fatalf("version %d", b[0])
	}
	got, err := Decode(b, 7)
	if err != nil {
		t.Fatal(err)
	}
	got.Revision = 0
	if d := cmp.Diff(in, got, cmpInstance...); d != "" {
		t.Fatalf("round trip (-want +got):\n%s", d)
	}
	// Without checks an instance keeps its version 1 bytes.
	plain := &Instance{ID: "x", Service: "s", Host: "h", Port: 1}
	if b := plain.AppendBinary(nil); b[0] != codecVersion {
		t.Fatalf("plain instance written as version %d", b[0])
	}
	// The API's JSON is valid and reads back as the same definitions.
	js := in.JSON()
	for _, want := range []string{`"checks":[{"id":"http","type":"http"`, `"status":"critical","output":"dial tcp: refused \"x\"\n"`,
		`"interval":"10s"`, `"deregister_critical_service_after":"1h30m0s"`, `"healthy":false`} {
		if !strings.Contains(string(js), want) {
			t.Fatalf("JSON %s lacks %s", js, want)
		}
	}
	back, err := registerOne(t, string(js))
	if err != nil {
		t.Fatalf("the JSON of an instance does not register back: %v\n%s", err, js)
	}
	if !back.SameSpec(in) {
		t.Fatalf("re-registered JSON is another spec:\n%+v\n%+v", back.Checks, in.Checks)
	}
}

func TestCheckColumnsRoundTrip(t *testing.T) {
	in := checkedInstance(t)
	vals, _, err := Columns{}.Values(nil, in.ID, nil, in)
	if err != nil {
		t.Fatal(err)
	}
	dest, record := Columns{}.NewRow()
	if len(vals) != len(dest) || len(dest) != len(Columns{}.Names()) {
		t.Fatalf("%d values, %d destinations, %d names", len(vals), len(dest), len(Columns{}.Names()))
	}
	scanInto(t, dest, vals)
	_, rec, err := record(nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(rec, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(in, got, cmpInstance...); d != "" {
		t.Fatalf("round trip through the columns (-want +got):\n%s", d)
	}
}

func TestKeepChecks(t *testing.T) {
	cur := checkedInstance(t)
	cur.Checks[0].Status, cur.Checks[0].Output = StatusPassing, "200 OK"
	again, err := registerOne(t, strings.Replace(checkedBody, `"interval":"5s"`, `"interval":"6s"`, 1))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1800000000, 0)
	again.KeepChecks(cur, now)
	if c := again.Checks[0]; c.Status != StatusPassing || c.Output != "200 OK" || !c.ChangedAt.Equal(cur.Checks[0].ChangedAt) {
		t.Fatalf("unchanged check lost its state: %+v", c)
	}
	if c := again.Checks[1]; c.Status != StatusCritical || c.Output != "" || !c.ChangedAt.Equal(now) {
		t.Fatalf("changed check kept its state: %+v", c)
	}
}

// scanInto plays database/sql's part: each value into its destination.
func scanInto(t *testing.T, dest, vals []any) {
	t.Helper()
	for i, v := range vals {
		switch d := dest[i].(type) {
		case *sql.RawBytes:
			switch v := v.(type) {
			case string:
				*d = sql.RawBytes(v)
			case []byte:
				*d = v
			case nil:
				*d = nil
			default:
				t.Fatalf("column %d: %T into RawBytes", i, v)
			}
		case *int:
			switch v := v.(type) {
			case int:
				*d = v
			case int32:
				*d = int(v)
			default:
				t.Fatalf("column %d: %T into int", i, v)
			}
		case *int64:
			*d = v.(int64)
		case *bool:
			*d = v.(bool)
		default:
			t.Fatalf("column %d: destination %T", i, d)
		}
	}
}
