package acl

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/sextant-mesh/sextant/internal/jsonstring"
)

// NewAuditHandler returns a slog handler that writes each record as one
// line of JSON to w, for the audit log: the same lines slog.JSONHandler
// writes for the audit's records ({"time","level","msg", then the
// attributes}), for less, because an audit record is written on the path
// of every write request. Strings, numbers, bools and
// string lists are appended directly; other values go through
// encoding/json. Records below Info are dropped. w is written under the
// handler's lock, one Write per record.
func NewAuditHandler(w io.Writer) slog.Handler {
	return &auditHandler{out: &auditOut{w: w}}
}

type auditOut struct {
	mu sync.Mutex
	w  io.Writer
}

type auditHandler struct {
	out  *auditOut
	pre  []byte // attributes of WithAttrs and groups opened by WithGroup, encoded
	open int    // groups opened in pre
}

var auditBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func (h *auditHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *auditHandler) Handle(_ context.Context, r slog.Record) error {
	bp := auditBufs.Get().(*[]byte)
	b := (*bp)[:0]
	b = append(b, `{"time":"`...)
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	b = t.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":`...)
	b = jsonstring.AppendHTML(b, r.Level.String())
	b = append(b, `,"msg":`...)
	b = jsonstring.AppendHTML(b, r.Message)
	b = append(b, h.pre...)
	r.Attrs(func(a slog.Attr) bool {
		b = appendAttr(b, "", a)
		return true
	})
	for range h.open {
		b = append(b, '}')
	}
	b = append(b, "}\n"...)
	h.out.mu.Lock()
	_, err := h.out.w.Write(b)
	h.out.mu.Unlock()
	if cap(b) <= 64<<10 {
		*bp = b
		auditBufs.Put(bp)
	}
	return err
}

func (h *auditHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	n := *h
	n.pre = append([]byte(nil), h.pre...)
	for _, a := range attrs {
		n.pre = appendAttr(n.pre, "", a)
	}
	return &n
}

func (h *auditHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	n := *h
	n.pre = append(appendKey(append([]byte(nil), h.pre...), name), '{')
	n.open++
	return &n
}

func appendAttr(b []byte, _ string, a slog.Attr) []byte {
	v := a.Value.Resolve()
	if a.Key == "" && v.Kind() != slog.KindGroup {
		return b
	}
	if v.Kind() == slog.KindGroup {
		g := v.Group()
		if len(g) == 0 {
			return b
		}
		if a.Key == "" { // inlined
			for _, ga := range g {
				b = appendAttr(b, "", ga)
			}
			return b
		}
		b = appendKey(b, a.Key)
		b = append(b, '{')
		for _, ga := range g {
			b = appendAttr(b, "", ga)
		}
		return append(b, '}')
	}
	b = appendKey(b, a.Key)
	switch v.Kind() {
	case slog.KindString:
		return jsonstring.AppendHTML(b, v.String())
	case slog.KindInt64:
		return strconv.AppendInt(b, v.Int64(), 10)
	case slog.KindUint64:
		return strconv.AppendUint(b, v.Uint64(), 10)
	case slog.KindBool:
		return strconv.AppendBool(b, v.Bool())
	case slog.KindDuration:
		return strconv.AppendInt(b, int64(v.Duration()), 10)
	case slog.KindTime:
		b = append(b, '"')
		b = v.Time().AppendFormat(b, time.RFC3339Nano)
		return append(b, '"')
	}
	if ss, ok := v.Any().([]string); ok {
		b = append(b, '[')
		for i, s := range ss {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonstring.AppendHTML(b, s)
		}
		return append(b, ']')
	}
	if v.Kind() == slog.KindFloat64 {
		if j, err := json.Marshal(v.Float64()); err == nil {
			return append(b, j...)
		}
		return jsonstring.AppendHTML(b, strconv.FormatFloat(v.Float64(), 'g', -1, 64))
	}
	if err, ok := v.Any().(error); ok {
		return jsonstring.AppendHTML(b, err.Error())
	}
	j, err := json.Marshal(v.Any())
	if err != nil {
		return jsonstring.AppendHTML(b, "!ERROR:"+err.Error())
	}
	return append(b, j...)
}

// appendKey appends `,"key":`, without the comma right after a `{`.
func appendKey(b []byte, key string) []byte {
	if len(b) == 0 || b[len(b)-1] != '{' {
		b = append(b, ',')
	}
	b = jsonstring.AppendHTML(b, key)
	return append(b, ':')
}
