package instance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/jsonkeys"
	"github.com/sextant-mesh/sextant/internal/label"
)

// The encoding/json baseline of the hand-written register decoder: the
// same bodies decoded strictly (decodeStrict, DisallowUnknownFields) into
// the reference types FuzzDecodeRegisterMatchesEncodingJSON holds the
// decoder to, then built into the same catalog instances. decode.go is
// worth keeping only if it is much faster than this (docs/perf/registry.md).

// decodeRegisterEncodingJSON is decodeRegister done the plain way.
func decodeRegisterEncodingJSON(body []byte) ([]*Instance, error) {
	var ref referenceBody
	if err := decodeStrict(body, &ref); err != nil {
		return nil, err
	}
	src := ref.Instances
	if src == nil {
		src = []referenceInstance{ref.referenceInstance}
	}
	out := make([]*Instance, len(src))
	for i := range src {
		r := &src[i]
		w := DefaultWeight
		if r.Weight != nil {
			w = *r.Weight
		}
		out[i] = &Instance{ID: r.ID, Namespace: r.Namespace, Service: r.Service, Host: r.Host, Port: r.Port,
			Protocol: r.Protocol, Version: r.Version, Weight: w, Isolated: r.Isolated,
			Metadata: label.FromMap(r.Metadata), TTLSeconds: r.TTLSeconds}
	}
	return out, nil
}

// registerBodies are the bodies both decoders are timed on: the batch of
// BenchmarkDecodeRegister (500 instances, 16 metadata entries of 10-byte
// keys and values each) and one instance of it alone, the single register.
func registerBodies() map[string][]byte {
	var items []string
	for i := range 500 {
		md := map[string]string{}
		for j := 1; j <= 16; j++ {
			md[fmt.Sprintf("meta-key%02d", j)] = fmt.Sprintf("v%02d-%06d", j, i%(1<<j))
		}
		items = append(items, inst("svc", "10.0.0.1", 8000+i, md))
	}
	return map[string][]byte{"batch500": []byte(batch(items...)), "one": []byte(items[7])}
}

// TestEncodingJSONBaselineBuildsTheSameInstances keeps the comparison
// fair: both decoders build the same instances from the benchmark bodies.
func TestEncodingJSONBaselineBuildsTheSameInstances(t *testing.T) {
	for name, body := range registerBodies() {
		got, _, err := DecodeRegister(body)
		if err != nil {
			t.Fatal(err)
		}
		base, err := decodeRegisterEncodingJSON(body)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(base) || len(got) == 0 {
			t.Fatalf("%s: %d instances from decodeRegister, %d from encoding/json", name, len(got), len(base))
		}
		for i := range got {
			a, b := got[i], base[i]
			if a.ID != b.ID || a.Namespace != b.Namespace || a.Service != b.Service || a.Host != b.Host || a.Port != b.Port ||
				a.Protocol != b.Protocol || a.Version != b.Version || a.Weight != b.Weight || a.Isolated != b.Isolated ||
				a.TTLSeconds != b.TTLSeconds || !a.Metadata.Equal(b.Metadata) || a.Metadata.Len() != 16 {
				t.Fatalf("%s: instance %d differs:\n hand-written  %+v\n encoding/json %+v", name, i, a, b)
			}
		}
	}
}

// processCPU is the user+system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRegisterDecoders times both decoders side by side, per body;
// compare with benchstat -col /decoder.
func BenchmarkRegisterDecoders(b *testing.B) {
	decoders := []struct {
		name   string
		decode func([]byte) ([]*Instance, error)
	}{
		{"hand-written", func(body []byte) ([]*Instance, error) {
			ins, _, err := DecodeRegister(body)
			return ins, err
		}},
		{"encoding-json", decodeRegisterEncodingJSON},
	}
	bodies := registerBodies()
	for _, body := range []string{"batch500", "one"} {
		for _, d := range decoders {
			b.Run("body="+body+"/decoder="+d.name, func(b *testing.B) {
				raw := bodies[body]
				var n int
				b.SetBytes(int64(len(raw)))
				b.ReportAllocs()
				cpu0 := processCPU()
				for b.Loop() {
					ins, err := d.decode(raw)
					if err != nil {
						b.Fatal(err)
					}
					n = len(ins)
				}
				cpu := processCPU() - cpu0
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/instance")
				// CPU time, GC included, does not grow when other
				// processes take the cores: the figure to compare on a
				// shared machine (with -benchtime 1s or more; getrusage
				// is too coarse for a few microseconds).
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*n), "cpu-ns/instance")
			})
		}
	}
}

// referenceInstance and referenceBody are the register body as
// encoding/json sees it: the reference decodeRegister must agree with.
type referenceInstance struct {
	ID         string            `json:"id"`
	Namespace  string            `json:"namespace"`
	Service    string            `json:"service"`
	Host       string            `json:"host"`
	Port       int               `json:"port"`
	Protocol   string            `json:"protocol"`
	Version    string            `json:"version"`
	Weight     *int              `json:"weight"`
	Isolated   bool              `json:"isolated"`
	Metadata   map[string]string `json:"metadata"`
	TTLSeconds int               `json:"ttl_seconds"`
	// DeregisterAfterSeconds is the removal delay.
	DeregisterAfterSeconds int32        `json:"deregister_after_seconds"`
	Healthy                *bool        `json:"healthy"`
	Revision               *int64       `json:"revision"`
	CreatedAt              *string      `json:"created_at"`
	UpdatedAt              *string      `json:"updated_at"`
	Checks                 []*checkJSON `json:"checks"`
}

type referenceBody struct {
	Instances []referenceInstance `json:"instances"`
	referenceInstance
}

func (r referenceInstance) same(in *Instance) bool {
	w := DefaultWeight
	if r.Weight != nil {
		w = *r.Weight
	}
	return r.ID == in.ID && r.Namespace == in.Namespace && r.Service == in.Service && r.Host == in.Host &&
		r.Port == in.Port && r.Protocol == in.Protocol && r.Version == in.Version && w == in.Weight &&
		r.Isolated == in.Isolated && r.TTLSeconds == in.TTLSeconds &&
		r.DeregisterAfterSeconds == in.DeregisterAfterSeconds && label.FromMap(r.Metadata).Equal(in.Metadata) &&
		r.sameChecks(in.Checks)
}

// sameChecks compares the checks encoding/json decoded with the decoder's.
func (r referenceInstance) sameChecks(checks []Check) bool {
	if len(r.Checks) != len(checks) {
		return false
	}
	for i, w := range r.Checks {
		var c Check
		if w != nil {
			if err := w.definition(&c); err != nil {
				return false
			}
		}
		if !c.SameDefinition(&checks[i]) || c.Status != checks[i].Status {
			return false
		}
	}
	return true
}

// FuzzDecodeRegisterMatchesEncodingJSON: whatever decodeRegister accepts,
// encoding/json (strict, and refusing a key given twice: jsonkeys) accepts too, with the same instances; whatever
// encoding/json rejects, decodeRegister rejects. decodeRegister may reject
// more: it matches field names case-sensitively.
func FuzzDecodeRegisterMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{
		`{"service":"s","host":"h","port":1}`,
		`{"instances":[{"service":"s","host":"10.0.0.1","port":80,"metadata":{"a":"b","a":"c"},"weight":0,"ttl_seconds":5},null]}`,
		`{"instances":null,"service":"s","weight":null}`,
		`{"service":"s","host":"h","port":1,"ttl_seconds":5,"deregister_after_seconds":60}`, `{"deregister_after_seconds":null}`,
		`{"id":"a\u0041\ud83d\ude00\ud800x","port":-0,"metadata":{"k":null,"\n":"\t"}}`,
		`{"port":1e2}`, `{"port":1.0}`, `{"port":99999999999999999999}`, `{"healthy":1}`, `{"revision":"x"}`,
		` {"service" : "s" } `, `{"service":"\xff\xfe"}`, `{}`, `null`, `{"metadata":[]}`, `{"instances":{}}`,
		// metadata in compact form (the fast path), and each way out of it
		`{"metadata":{"b":"2","a":"1","b":"3"}}`, `{"metadata":{}}`, `{"metadata":{"a":"1", "b":"2"}}`,
		`{"metadata":{"a":"1","b":"x\"y"}}`, `{"metadata":{"a":"1","b":"é"}}`, `{"metadata":{"a":"1","b":null}}`,
		`{"metadata":{"a":"1","b":2}}`, `{"metadata":{"a":"1","b"}}`, `{"service":"a","service":"b"}`,
		`{"instances":[{"port":1},{"port":1,"port":2}]}`, `{"instances":[],"instances":[]}`, `{"metadata":null,"metadata":{}}`,
		`{"metadata":{"a":"1", "a":"1"}}`, `{"checks":[{"type":"tcp","type":"ttl"}]}`, `{"checks":[{"header":{"A":["1"],"A":["2"]}}]}`, `{"metadata":{"a":"1"x}`, `{"metadata":{"a":"1",`,
		"{\"metadata\":{\"a\":\"x\x01}}", "{\"metadata\":{\"a\x7f\":\"1\"}}",
		// checks: decoded by encoding/json inside the hand-written decoder
		`{"checks":[{"type":"http","target":"http://h/x","interval":"10s","header":{"A":["1"]},"tls_skip_verify":true}]}`,
		`{"checks":[{"type":"ttl","ttl":"30s","status":"passing","output":"x","changed_at":"y"},null]}`,
		`{"checks":null}`, `{"checks":[]}`, `{"checks":{}}`, `{"checks":[{"interval":10}]}`, `{"checks":[{"Type":"tcp"}]}`,
		`{"checks":[{"type":"tcp","interval":"1x"}]}`, `{"checks":[{"nope":1}]}`, `{"checks":[{"type":"tcp"}] , "port":1}`,
		`{"checks":[{"type":"tcp"}]x}`, `{"checks":[{"type":"tcp"`, `{"checks":[{"header":{"a":null}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, batch, err := DecodeRegister(body)
		var ref referenceBody
		refErr := decodeStrict(body, &ref)
		if refErr == nil {
			// encoding/json keeps the last of a key given twice; Sextant
			// refuses the body.
			refErr = jsonkeys.Check(body)
		}
		if refErr != nil {
			if err == nil {
				t.Fatalf("decodeRegister accepted what encoding/json rejects (%v): %q", refErr, body)
			}
			return
		}
		if err != nil {
			if strings.Contains(err.Error(), "unknown field") || strings.Contains(err.Error(), "not both") || strings.Contains(err.Error(), "more than") ||
				strings.Contains(err.Error(), "is not a duration") {
				return // case-sensitive names; the batch-and-bare and size checks run here too; checks' durations are parsed here
			}
			t.Fatalf("decodeRegister rejected what encoding/json accepts: %v: %q", err, body)
		}
		want := []referenceInstance{ref.referenceInstance}
		if ref.Instances != nil {
			want = ref.Instances
		}
		if batch != (ref.Instances != nil) || len(got) != len(want) {
			t.Fatalf("batch %v with %d instances, want %v with %d: %q", batch, len(got), ref.Instances != nil, len(want), body)
		}
		for i := range want {
			if !want[i].same(got[i]) {
				t.Fatalf("instance %d: got %+v, want %+v: %q", i, got[i], want[i], body)
			}
		}
	})
}

func BenchmarkDecodeRegister(b *testing.B) {
	body := registerBodies()["batch500"]
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeRegister(body); err != nil {
			b.Fatal(err)
		}
	}
}

// decodeStrict is encoding/json's strict decoding, the reference: unknown
// fields and trailing data refused.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the JSON object")
	}
	return nil
}

// inst renders a register body for one instance.
func inst(service, host string, port int, meta map[string]string) string {
	b, _ := json.Marshal(map[string]any{"service": service, "host": host, "port": port, "metadata": meta})
	return string(b)
}

func batch(items ...string) string {
	return `{"instances":[` + strings.Join(items, ",") + `]}`
}
