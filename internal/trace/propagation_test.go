package trace

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func hdr(kv ...string) HTTPHeader {
	h := HTTPHeader{}
	for i := 0; i < len(kv); i += 2 {
		http.Header(h).Add(kv[i], kv[i+1])
	}
	return h
}

func TestExtract(t *testing.T) {
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, tc := range []struct {
		name    string
		h       HTTPHeader
		trace   string // "" : none
		span    string
		decided bool
		sampled bool
		debug   bool
		formats Format
		state   string
		bad     string // part of the error; "" : none
	}{
		{name: "none", h: hdr()},
		{name: "w3c sampled", h: hdr("traceparent", "00-"+tid+"-"+sid+"-01"), trace: tid, span: sid, decided: true, sampled: true, formats: W3C},
		{name: "w3c unsampled", h: hdr("traceparent", "00-"+tid+"-"+sid+"-00"), trace: tid, span: sid, decided: true, formats: W3C},
		{name: "w3c other flags", h: hdr("traceparent", "00-"+tid+"-"+sid+"-03"), trace: tid, span: sid, decided: true, sampled: true, formats: W3C},
		{name: "w3c future version, more fields", h: hdr("traceparent", "cc-"+tid+"-"+sid+"-01-what-the-future-holds"), trace: tid, span: sid, decided: true, sampled: true, formats: W3C},
		{name: "w3c tracestate", h: hdr("traceparent", "00-"+tid+"-"+sid+"-01", "tracestate", "rojo=00f067aa0ba902b7, congo@t61rcWkgMzE=x"), bad: "key \"congo@t61rcWkgMzE\"", trace: tid, span: sid, decided: true, sampled: true, formats: W3C},
		{name: "w3c tracestate ok", h: hdr("traceparent", "00-"+tid+"-"+sid+"-01", "tracestate", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE, ten@sys=v"), trace: tid, span: sid, decided: true, sampled: true, formats: W3C, state: "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE, ten@sys=v"},
		{name: "w3c tracestate duplicate key", h: hdr("traceparent", "00-"+tid+"-"+sid+"-01", "tracestate", "a=1,a=2"), trace: tid, span: sid, decided: true, sampled: true, formats: W3C, bad: "given twice"},
		{name: "w3c version ff", h: hdr("traceparent", "ff-"+tid+"-"+sid+"-01"), bad: "version"},
		{name: "w3c version 00 too long", h: hdr("traceparent", "00-"+tid+"-"+sid+"-01-x"), bad: "55 characters"},
		{name: "w3c uppercase", h: hdr("traceparent", "00-"+strings.ToUpper(tid)+"-"+sid+"-01"), bad: "trace id"},
		{name: "w3c zero trace", h: hdr("traceparent", "00-00000000000000000000000000000000-"+sid+"-01"), bad: "trace id"},
		{name: "w3c zero parent", h: hdr("traceparent", "00-"+tid+"-0000000000000000-01"), bad: "parent id"},
		{name: "w3c short", h: hdr("traceparent", "00-"+tid+"-"+sid), bad: "55 characters"},
		{name: "w3c bad flags", h: hdr("traceparent", "00-"+tid+"-"+sid+"-0x"), bad: "flags"},
		{name: "b3 single", h: hdr("b3", tid+"-"+sid+"-1-b7ad6b7169203331"), trace: tid, span: sid, decided: true, sampled: true, formats: B3Single},
		{name: "b3 single no state", h: hdr("b3", tid+"-"+sid), trace: tid, span: sid, formats: B3Single},
		{name: "b3 single 64-bit", h: hdr("b3", "a3ce929d0e0e4736-"+sid+"-0"), trace: "0000000000000000a3ce929d0e0e4736", span: sid, decided: true, formats: B3Single},
		{name: "b3 single debug", h: hdr("b3", tid+"-"+sid+"-d"), trace: tid, span: sid, decided: true, sampled: true, debug: true, formats: B3Single},
		{name: "b3 single deny", h: hdr("b3", "0"), decided: true, formats: B3Single},
		{name: "b3 single bad state", h: hdr("b3", tid+"-"+sid+"-x"), bad: "sampling state"},
		{name: "b3 single too many", h: hdr("b3", tid+"-"+sid+"-1-"+sid+"-1"), bad: "want traceid"},
		{name: "b3 multi", h: hdr("X-B3-TraceId", tid, "X-B3-SpanId", sid, "X-B3-ParentSpanId", "b7ad6b7169203331", "X-B3-Sampled", "1"), trace: tid, span: sid, decided: true, sampled: true, formats: B3Multi},
		{name: "b3 multi flags", h: hdr("X-B3-TraceId", tid, "X-B3-SpanId", sid, "X-B3-Flags", "1"), trace: tid, span: sid, decided: true, sampled: true, debug: true, formats: B3Multi},
		{name: "b3 multi decision only", h: hdr("X-B3-Sampled", "0"), decided: true, formats: B3Multi},
		{name: "b3 multi no span", h: hdr("X-B3-TraceId", tid), bad: "X-B3-SpanId"},
		{name: "b3 multi bad sampled", h: hdr("X-B3-TraceId", tid, "X-B3-SpanId", sid, "X-B3-Sampled", "yes"), bad: "X-B3-Sampled"},
		{name: "w3c wins, b3 noted", h: hdr("traceparent", "00-"+tid+"-"+sid+"-01", "b3", "a3ce929d0e0e4736-b7ad6b7169203331-0"), trace: tid, span: sid, decided: true, sampled: true, formats: W3C | B3Single},
		{name: "bad w3c, b3 used", h: hdr("traceparent", "00-xyz", "X-B3-TraceId", tid, "X-B3-SpanId", sid), trace: tid, span: sid, formats: B3Multi, bad: "traceparent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := Extract(tc.h)
			if tc.bad == "" && err != nil {
				t.Fatalf("error %v", err)
			}
			if tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad) || !errors.Is(err, ErrBadHeader)) {
				t.Fatalf("error %v, want one with %q wrapping ErrBadHeader", err, tc.bad)
			}
			if got := sc.TraceID; tc.trace == "" && got.IsValid() || tc.trace != "" && got.String() != tc.trace {
				t.Errorf("trace id %s, want %q", got, tc.trace)
			}
			if tc.span != "" && sc.SpanID.String() != tc.span {
				t.Errorf("span id %s, want %s", sc.SpanID, tc.span)
			}
			if sc.Decided != tc.decided || sc.Sampled != tc.sampled || sc.Debug != tc.debug || sc.Formats != tc.formats {
				t.Errorf("decided %v sampled %v debug %v formats %b, want %v %v %v %b", sc.Decided, sc.Sampled, sc.Debug, sc.Formats, tc.decided, tc.sampled, tc.debug, tc.formats)
			}
			if string(sc.TraceState) != tc.state {
				t.Errorf("tracestate %q, want %q", sc.TraceState, tc.state)
			}
		})
	}
}

func TestInjectRoundTrip(t *testing.T) {
	tid := NewTraceID()
	for _, tc := range []struct {
		name string
		o    Outgoing
		want map[string]string
	}{
		{"w3c by default", Outgoing{TraceID: tid, Span: SpanID{1, 2, 3, 4, 5, 6, 7, 8}, Sampled: true},
			map[string]string{"Traceparent": "00-" + tid.String() + "-0102030405060708-01"}},
		{"w3c unsampled", Outgoing{TraceID: tid, Span: SpanID{1, 2, 3, 4, 5, 6, 7, 8}},
			map[string]string{"Traceparent": "00-" + tid.String() + "-0102030405060708-00"}},
		{"b3 single with parent", Outgoing{TraceID: tid, Span: SpanID{1, 2, 3, 4, 5, 6, 7, 8}, Parent: SpanID{9, 9, 9, 9, 9, 9, 9, 9}, Sampled: true, Formats: B3Single},
			map[string]string{"B3": tid.String() + "-0102030405060708-1-0909090909090909"}},
		{"b3 multi debug", Outgoing{TraceID: tid, Span: SpanID{1, 2, 3, 4, 5, 6, 7, 8}, Parent: SpanID{9, 9, 9, 9, 9, 9, 9, 9}, Debug: true, Formats: B3Multi},
			map[string]string{"X-B3-Traceid": tid.String(), "X-B3-Spanid": "0102030405060708", "X-B3-Parentspanid": "0909090909090909", "X-B3-Flags": "1"}},
		{"b3 multi 64-bit", Outgoing{TraceID: TraceID{8: 1, 15: 2}, Span: SpanID{1, 2, 3, 4, 5, 6, 7, 8}, Short: true, Formats: B3Multi},
			map[string]string{"X-B3-Traceid": "0100000000000002", "X-B3-Spanid": "0102030405060708", "X-B3-Sampled": "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := hdr("X-B3-Sampled", "1", "X-B3-Flags", "1") // stale values Inject must replace
			if tc.o.Formats&B3Multi == 0 {
				h = hdr()
			}
			Inject(h, &tc.o)
			got := map[string]string{}
			for k := range h {
				got[k] = http.Header(h).Get(k)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("headers %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
			sc, err := Extract(h)
			if err != nil {
				t.Fatal(err)
			}
			if sc.TraceID != tc.o.TraceID || sc.SpanID != tc.o.Span || sc.Sampled != (tc.o.Sampled || tc.o.Debug) {
				t.Errorf("read back %+v from %+v", sc, tc.o)
			}
		})
	}
}

func TestSampler(t *testing.T) {
	if _, err := NewSampler(1.5, false); err == nil || !strings.Contains(err.Error(), "want 0 to 1") {
		t.Fatalf("rate 1.5: %v", err)
	}
	half, _ := NewSampler(0.5, false)
	all, _ := NewSampler(1, false)
	none, _ := NewSampler(0, false)
	n := 0
	const tries = 10000
	for range tries {
		id := NewTraceID()
		var sc SpanContext
		if !all.Sample(&sc, id) {
			t.Fatal("rate 1 did not sample")
		}
		if none.Sample(&sc, id) {
			t.Fatal("rate 0 sampled")
		}
		if half.Sample(&sc, id) {
			n++
		}
		if half.Sample(&sc, id) != half.Sample(&sc, id) {
			t.Fatal("decision not stable for a trace id")
		}
		// The caller's decision stands whatever the rate.
		if none.Sample(&SpanContext{Decided: true, Sampled: true}, id) != true || all.Sample(&SpanContext{Decided: true}, id) {
			t.Fatal("caller's decision not honoured")
		}
	}
	if n < tries*4/10 || n > tries*6/10 {
		t.Errorf("rate 0.5 sampled %d of %d", n, tries)
	}
}

func TestParseTraceID(t *testing.T) {
	id := NewTraceID()
	if got, err := ParseTraceID(id.String()); err != nil || got != id {
		t.Fatalf("%v %v", got, err)
	}
	for _, s := range []string{"", "xyz", strings.Repeat("0", 32), strings.ToUpper(id.String())} {
		if _, err := ParseTraceID(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}
