package httpapi

import (
	"errors"
	"net/http"
	"testing"

	"github.com/sextant-mesh/sextant/internal/instance"
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
		if len(ins) == 0 || len(ins) > instance.MaxBatch {
			t.Fatalf("accepted %d instances", len(ins))
		}
		for i, in := range ins {
			if err := instance.Prepare(i, in); err != nil {
				t.Fatalf("accepted an invalid instance %+v: %v", in, err)
			}
			if in.ID == "" || in.Namespace == "" {
				t.Fatalf("defaults not filled: %+v", in)
			}
		}
	})
}
