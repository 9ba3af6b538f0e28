package consulapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/acl"
)

// Consul's /v1/agent/monitor streams the agent's log. A LogStream is the
// server's log fanned out to those streams: Handler wraps the server's
// root log handler, and each stream subscribes with its level and format.
// With no stream open, a record costs one atomic load more.

// LogStream fans out log records to the open monitor streams.
type LogStream struct {
	mu   sync.Mutex
	subs map[*logSub]struct{}
	// min is the lowest level a stream asks for (math.MaxInt32: none).
	min atomic.Int64
}

// logBuffer bounds the lines a slow stream may hold; beyond it lines are
// dropped and counted, as Consul's monitor drops them.
const logBuffer = 512

type logSub struct {
	level   slog.Level
	json    bool
	lines   chan []byte
	dropped atomic.Int64
}

// NewLogStream returns a LogStream with no streams.
func NewLogStream() *LogStream {
	s := &LogStream{subs: map[*logSub]struct{}{}}
	s.min.Store(noStream)
	return s
}

const noStream = int64(1 << 31)

func (s *LogStream) subscribe(level slog.Level, asJSON bool) *logSub {
	sub := &logSub{level: level, json: asJSON, lines: make(chan []byte, logBuffer)}
	s.mu.Lock()
	s.subs[sub] = struct{}{}
	s.resetMin()
	s.mu.Unlock()
	return sub
}

func (s *LogStream) unsubscribe(sub *logSub) {
	s.mu.Lock()
	delete(s.subs, sub)
	s.resetMin()
	s.mu.Unlock()
}

func (s *LogStream) resetMin() {
	m := noStream
	for sub := range s.subs {
		m = min(m, int64(sub.level))
	}
	s.min.Store(m)
}

func (s *LogStream) publish(r slog.Record, attrs []slog.Attr) {
	if int64(r.Level) < s.min.Load() {
		return
	}
	var text, js []byte
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.subs {
		if r.Level < sub.level {
			continue
		}
		var line []byte
		if sub.json {
			if js == nil {
				js = formatJSON(r, attrs)
			}
			line = js
		} else {
			if text == nil {
				text = formatText(r, attrs)
			}
			line = text
		}
		select {
		case sub.lines <- line:
		default:
			sub.dropped.Add(1)
		}
	}
}

// Handler is h with every record also sent to the open streams.
func (s *LogStream) Handler(h slog.Handler) slog.Handler { return &teeHandler{h: h, s: s} }

type teeHandler struct {
	h      slog.Handler
	s      *LogStream
	attrs  []slog.Attr
	prefix string // the groups, "a.b."
}

func (t *teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return t.h.Enabled(ctx, l) || int64(l) >= t.s.min.Load()
}

func (t *teeHandler) Handle(ctx context.Context, r slog.Record) error {
	t.s.publish(r, t.attrs)
	if !t.h.Enabled(ctx, r.Level) {
		return nil
	}
	return t.h.Handle(ctx, r)
}

func (t *teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := &teeHandler{h: t.h.WithAttrs(as), s: t.s, prefix: t.prefix, attrs: append([]slog.Attr(nil), t.attrs...)}
	for _, a := range as {
		a.Key = t.prefix + a.Key
		n.attrs = append(n.attrs, a)
	}
	return n
}

func (t *teeHandler) WithGroup(name string) slog.Handler {
	return &teeHandler{h: t.h.WithGroup(name), s: t.s, attrs: t.attrs, prefix: t.prefix + name + "."}
}

// levelName is Consul's (hclog's) level word.
func levelName(l slog.Level) string {
	switch {
	case l < slog.LevelInfo:
		return "DEBUG"
	case l < slog.LevelWarn:
		return "INFO"
	case l < slog.LevelError:
		return "WARN"
	}
	return "ERROR"
}

// module is a record's component ("consulapi", "registry"), as hclog
// names a logger; the other attributes follow the message.
func splitModule(r slog.Record, attrs []slog.Attr) (string, []slog.Attr) {
	var module string
	var rest []slog.Attr
	add := func(a slog.Attr) bool {
		if a.Key == "component" && module == "" {
			module = a.Value.String()
		} else {
			rest = append(rest, a)
		}
		return true
	}
	for _, a := range attrs {
		add(a)
	}
	r.Attrs(add)
	if module == "" {
		module = "sextant"
	}
	return module, rest
}

// formatText is hclog's text line: "2026-11-29T07:48:00.123Z [INFO]
// module: message: key=value".
func formatText(r slog.Record, attrs []slog.Attr) []byte {
	module, rest := splitModule(r, attrs)
	var b strings.Builder
	lv := levelName(r.Level)
	fmt.Fprintf(&b, "%s [%s] %s%s: %s", r.Time.UTC().Format("2006-01-02T15:04:05.000Z"), lv, strings.Repeat(" ", 5-len(lv)), module, r.Message)
	for i, a := range rest {
		if i == 0 {
			b.WriteString(":")
		}
		fmt.Fprintf(&b, " %s=%s", a.Key, quoteIfSpaced(a.Value.String()))
	}
	b.WriteByte('\n')
	return []byte(b.String())
}

func quoteIfSpaced(v string) string {
	if strings.ContainsAny(v, " \t\n\"") {
		return fmt.Sprintf("%q", v)
	}
	return v
}

// formatJSON is hclog's JSON line.
func formatJSON(r slog.Record, attrs []slog.Attr) []byte {
	module, rest := splitModule(r, attrs)
	m := map[string]any{"@level": strings.ToLower(levelName(r.Level)), "@message": r.Message, "@module": module,
		"@timestamp": r.Time.Format("2006-01-02T15:04:05.000000Z07:00")}
	for _, a := range rest {
		if _, ok := m[a.Key]; !ok {
			m[a.Key] = a.Value.Resolve().Any()
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"@level": "error", "@message": "unencodable log record: " + err.Error()})
	}
	return append(b, '\n')
}

// GET /v1/agent/monitor?loglevel=&logjson: the server's log from now on,
// one line per record, until the client leaves or the server stops. The
// log is the whole server's: it needs the ACL permission (admin).
func (a *API) agentMonitor(w http.ResponseWriter, r *http.Request) error {
	if err := acl.Require(r, acl.Admin); err != nil {
		return err
	}
	q := r.URL.Query()
	var level slog.Level
	switch strings.ToLower(q.Get("loglevel")) {
	case "", "info":
		level = slog.LevelInfo
	case "trace", "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "err", "error":
		level = slog.LevelError
	default:
		return badRequest(fmt.Sprintf("Unknown log level: %s", q.Get("loglevel")))
	}
	_, asJSON := q["logjson"]
	sub := a.opts.Logs.subscribe(level, asJSON)
	defer a.opts.Logs.unsubscribe(sub)
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return nil
	}
	for {
		select {
		case line := <-sub.lines:
			if n := sub.dropped.Swap(0); n > 0 {
				fmt.Fprintf(w, "%s [WARN]  agent: Monitor dropped %d logs during monitor request\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), n)
			}
			if _, err := w.Write(line); err != nil {
				return nil
			}
			if err := rc.Flush(); err != nil {
				return nil
			}
		case <-r.Context().Done():
			return nil
		case <-a.stopping.Done():
			return nil
		}
	}
}
