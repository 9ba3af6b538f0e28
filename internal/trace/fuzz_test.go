package trace

import (
	"net/http"
	"testing"
)

// FuzzExtract: any header values, any formats: Extract never panics, and a
// context it accepts writes back to headers that read back the same.
func FuzzExtract(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "rojo=00f067aa0ba902b7", "", "", "", "")
	f.Add("", "", "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1-05e3ac9a4f6e3b90", "", "", "")
	f.Add("", "", "", "463ac35c9f6413ad", "a2fb4a1d1a96d312", "1")
	f.Fuzz(func(t *testing.T, tp, ts, b3, tid, sid, sampled string) {
		h := HTTPHeader{}
		for k, v := range map[string]string{HeaderTraceparent: tp, HeaderTracestate: ts, HeaderB3: b3,
			HeaderB3TraceID: tid, HeaderB3SpanID: sid, HeaderB3Sampled: sampled} {
			if v != "" {
				http.Header(h).Set(k, v)
			}
		}
		sc, _ := Extract(h)
		if !sc.TraceID.IsValid() {
			return
		}
		if !sc.SpanID.IsValid() {
			t.Fatalf("trace id without a span id: %+v", sc)
		}
		o := Outgoing{TraceID: sc.TraceID, Span: NewSpanID(), Parent: sc.SpanID, Sampled: sc.Sampled, Debug: sc.Debug, Formats: sc.Formats, Short: sc.Short}
		out := HTTPHeader{}
		Inject(out, &o)
		back, err := Extract(out)
		if err != nil {
			t.Fatalf("Inject wrote headers Extract refuses: %v (%v)", err, out)
		}
		if back.TraceID != o.TraceID || back.SpanID != o.Span || back.Formats != sc.Formats&^0 || back.Sampled != (o.Sampled || o.Debug) {
			t.Fatalf("wrote %+v, read back %+v", o, back)
		}
	})
}
