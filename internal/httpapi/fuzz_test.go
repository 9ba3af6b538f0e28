package httpapi

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/registry"
)

// FuzzParseRegister feeds arbitrary bodies to the register decoder: it must
// never panic, reject with a 400 that has a message, and accept only
// instances that are valid.
func FuzzParseRegister(f *testing.F) {
	for _, s := range []string{
		`{"service":"s","host":"h","port":1}`,
		`{"instances":[{"service":"s","host":"10.0.0.1","port":80,"metadata":{"a":"b"},"weight":0,"ttl_seconds":5}]}`,
		`{"instances":[{"service":"s","host":"h","port":1},{"service":"s","host":"h","port":"x"}]}`,
		`{"instances":[],"service":"s"}`,
		`{"id":"a:b.c-d_e","namespace":"n","service":"s","host":"::1","port":65535,"isolated":true,"healthy":false,"revision":3}`,
		`{"service":"s","host":"h","port":1,"metadata":{"k":"\u2028\ud800"}}`,
		`{"service":"s","host":"h","port":1}{}`, `[]`, `null`, ``, `{"instances":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ins, err := parseRegister(body)
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.status != http.StatusBadRequest || ae.msg == "" || ae.code != "invalid_argument" {
				t.Fatalf("error %#v is not a 400 invalid_argument with a message", err)
			}
			return
		}
		if len(ins) == 0 || len(ins) > registry.MaxBatch {
			t.Fatalf("accepted %d instances", len(ins))
		}
		for i, in := range ins {
			if err := registry.Prepare(i, in); err != nil {
				t.Fatalf("accepted an invalid instance %+v: %v", in, err)
			}
			if in.ID == "" || in.Namespace == "" {
				t.Fatalf("defaults not filled: %+v", in)
			}
		}
	})
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
	DeregisterAfterSeconds int32   `json:"deregister_after_seconds"`
	Healthy                *bool   `json:"healthy"`
	Revision               *int64  `json:"revision"`
	CreatedAt              *string `json:"created_at"`
	UpdatedAt              *string `json:"updated_at"`
}

type referenceBody struct {
	Instances []referenceInstance `json:"instances"`
	referenceInstance
}

func (r referenceInstance) same(in *catalog.Instance) bool {
	w := registry.DefaultWeight
	if r.Weight != nil {
		w = *r.Weight
	}
	return r.ID == in.ID && r.Namespace == in.Namespace && r.Service == in.Service && r.Host == in.Host &&
		r.Port == in.Port && r.Protocol == in.Protocol && r.Version == in.Version && w == in.Weight &&
		r.Isolated == in.Isolated && r.TTLSeconds == in.TTLSeconds &&
		r.DeregisterAfterSeconds == in.DeregisterAfterSeconds && label.FromMap(r.Metadata).Equal(in.Metadata)
}

// FuzzDecodeRegisterMatchesEncodingJSON: whatever decodeRegister accepts,
// encoding/json (strict) accepts too, with the same instances; whatever
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
		`{"metadata":{"a":"1","b":2}}`, `{"metadata":{"a":"1","b"}}`, `{"metadata":{"a":"1"x}`, `{"metadata":{"a":"1",`,
		"{\"metadata\":{\"a\":\"x\x01}}", "{\"metadata\":{\"a\x7f\":\"1\"}}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, batch, err := decodeRegister(body)
		var ref referenceBody
		refErr := decodeStrict(body, &ref)
		if refErr != nil {
			if err == nil {
				t.Fatalf("decodeRegister accepted what encoding/json rejects (%v): %q", refErr, body)
			}
			return
		}
		if err != nil {
			if strings.Contains(err.Error(), "unknown field") || strings.Contains(err.Error(), "not both") || strings.Contains(err.Error(), "more than") {
				return // case-sensitive names; the batch-and-bare and size checks run here too
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
		if _, _, err := decodeRegister(body); err != nil {
			b.Fatal(err)
		}
	}
}
