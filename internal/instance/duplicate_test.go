package instance

import (
	"errors"
	"strings"
	"testing"
)

// TestDecodeRegisterRefusesDuplicateKeys: a key given twice in one object
// of a register body (a member, a metadata key, a check's member, the
// batch) is refused with its field and line, never kept last.
func TestDecodeRegisterRefusesDuplicateKeys(t *testing.T) {
	for _, tc := range []struct{ body, field, msg string }{
		{`{"service":"a","host":"h","port":1,"service":"b"}`, "service", `key "service" given twice (line 1)`},
		{"{\"service\":\"a\",\"host\":\"h\",\"port\":1,\n\"metadata\":{\"env\":\"prod\",\n\"env\":\"dev\"}}", "metadata.env", `key "env" given twice (line 3)`},
		{`{"service":"a","host":"h","port":1,"metadata":{"b":"1","a":"2","b":"3"}}`, "metadata.b", `key "b" given twice (line 1)`},
		{`{"instances":[{"service":"a","host":"h","port":1},` + "\n" + `{"service":"a","host":"h","port":1,"port":2}]}`, "instances[1].port", `key "port" given twice (line 2)`},
		{`{"instances":[],"instances":[]}`, "instances", `key "instances" given twice`},
		{`{"service":"a","host":"h","port":1,"checks":[{"type":"ttl","ttl":"10s","ttl":"20s"}]}`, "checks[0].ttl", `key "ttl" given twice`},
	} {
		_, _, err := DecodeRegister([]byte(tc.body))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Msg, tc.msg) {
			t.Errorf("%s: %v, want field %q and %q", tc.body, err, tc.field, tc.msg)
		}
	}
	// The same key in two instances of a batch is no duplicate.
	if _, _, err := DecodeRegister([]byte(`{"instances":[{"service":"a","host":"h","port":1},{"service":"a","host":"h","port":2}]}`)); err != nil {
		t.Errorf("batch: %v", err)
	}
}
