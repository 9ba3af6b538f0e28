package accesslog

import (
	"net/netip"
	"strconv"
	"time"
	"unicode/utf8"
)

// TextFormat is the format string of Istio's default text access log
// (pilot's EnvoyTextLogFormat, Envoy's command operators): AppendText
// writes it.
const TextFormat = "[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% " +
	"%PROTOCOL%\" %RESPONSE_CODE% %RESPONSE_FLAGS% " +
	"%RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS% " +
	"\"%UPSTREAM_TRANSPORT_FAILURE_REASON%\" %BYTES_RECEIVED% %BYTES_SENT% " +
	"%DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% \"%REQ(X-FORWARDED-FOR)%\" " +
	"\"%REQ(USER-AGENT)%\" \"%REQ(X-REQUEST-ID)%\" \"%REQ(:AUTHORITY)%\" \"%UPSTREAM_HOST%\" " +
	"%UPSTREAM_CLUSTER_RAW% %UPSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS% " +
	"%DOWNSTREAM_REMOTE_ADDRESS% %REQUESTED_SERVER_NAME% %ROUTE_NAME%\n"

// JSONFormat is Istio's default JSON access log (EnvoyJSONLogFormatIstio):
// key -> command operator. AppendJSON writes these keys, sorted.
var JSONFormat = map[string]string{
	"start_time":                        "%START_TIME%",
	"route_name":                        "%ROUTE_NAME%",
	"method":                            "%REQ(:METHOD)%",
	"path":                              "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%",
	"protocol":                          "%PROTOCOL%",
	"response_code":                     "%RESPONSE_CODE%",
	"response_flags":                    "%RESPONSE_FLAGS%",
	"response_code_details":             "%RESPONSE_CODE_DETAILS%",
	"connection_termination_details":    "%CONNECTION_TERMINATION_DETAILS%",
	"bytes_received":                    "%BYTES_RECEIVED%",
	"bytes_sent":                        "%BYTES_SENT%",
	"duration":                          "%DURATION%",
	"upstream_service_time":             "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%",
	"x_forwarded_for":                   "%REQ(X-FORWARDED-FOR)%",
	"user_agent":                        "%REQ(USER-AGENT)%",
	"request_id":                        "%REQ(X-REQUEST-ID)%",
	"authority":                         "%REQ(:AUTHORITY)%",
	"upstream_host":                     "%UPSTREAM_HOST%",
	"upstream_cluster":                  "%UPSTREAM_CLUSTER_RAW%",
	"upstream_local_address":            "%UPSTREAM_LOCAL_ADDRESS%",
	"downstream_local_address":          "%DOWNSTREAM_LOCAL_ADDRESS%",
	"downstream_remote_address":         "%DOWNSTREAM_REMOTE_ADDRESS%",
	"requested_server_name":             "%REQUESTED_SERVER_NAME%",
	"upstream_transport_failure_reason": "%UPSTREAM_TRANSPORT_FAILURE_REASON%",
}

// Encoding is a line's format.
type Encoding uint8

const (
	Text Encoding = iota // TextFormat
	JSON                 // JSONFormat
	OTel                 // TextFormat as an OTLP log record's body (Exporter)
)

func (e Encoding) String() string {
	switch e {
	case JSON:
		return "json"
	case OTel:
		return "otel"
	}
	return "text"
}

// Entry is one call as the formats read it. The byte slices may point
// into the request; they are read only during Append.
type Entry struct {
	Start    time.Time
	Method   []byte
	Path     []byte // the request's path before any rewrite, query included
	Protocol string // HTTP/1.1, HTTP/2
	Code     int    // 0: no answer
	Flags    string // Envoy's response flags; "" for none ("-")
	Details  string // Envoy's response code details
	BytesIn  int64
	BytesOut int64
	Duration time.Duration
	// UpstreamTime is how long the upstream took (Envoy's
	// x-envoy-upstream-service-time); negative: no upstream answer.
	UpstreamTime     time.Duration
	XForwardedFor    []byte
	UserAgent        []byte
	RequestID        []byte
	Authority        []byte
	UpstreamHost     string
	UpstreamCluster  string
	DownstreamLocal  netip.AddrPort
	DownstreamRemote netip.AddrPort
	ServerName       []byte // the TLS SNI
	Route            string
}

// AppendText appends e in TextFormat; an empty value is "-", as Envoy
// writes it.
func AppendText(b []byte, e *Entry) []byte {
	b = append(b, '[')
	b = appendTime(b, e.Start)
	b = append(b, "] \""...)
	b = textBytes(b, e.Method)
	b = append(b, ' ')
	b = textBytes(b, e.Path)
	b = append(b, ' ')
	b = textString(b, e.Protocol)
	b = append(b, "\" "...)
	b = strconv.AppendInt(b, int64(e.Code), 10)
	b = append(b, ' ')
	b = textString(b, e.Flags)
	b = append(b, ' ')
	b = textString(b, e.Details)
	b = append(b, " - \"-\" "...) // connection termination details, upstream transport failure reason
	b = strconv.AppendInt(b, e.BytesIn, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.BytesOut, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.Duration.Milliseconds(), 10)
	b = append(b, ' ')
	if e.UpstreamTime >= 0 {
		b = strconv.AppendInt(b, e.UpstreamTime.Milliseconds(), 10)
	} else {
		b = append(b, '-')
	}
	b = append(b, " \""...)
	b = textBytes(b, e.XForwardedFor)
	b = append(b, "\" \""...)
	b = textBytes(b, e.UserAgent)
	b = append(b, "\" \""...)
	b = textBytes(b, e.RequestID)
	b = append(b, "\" \""...)
	b = textBytes(b, e.Authority)
	b = append(b, "\" \""...)
	b = textString(b, e.UpstreamHost)
	b = append(b, "\" "...)
	b = textString(b, e.UpstreamCluster)
	b = append(b, " - "...) // upstream local address
	b = addrPort(b, e.DownstreamLocal)
	b = append(b, ' ')
	b = addrPort(b, e.DownstreamRemote)
	b = append(b, ' ')
	b = textBytes(b, e.ServerName)
	b = append(b, ' ')
	b = textString(b, e.Route)
	return append(b, '\n')
}

// appendTime writes t in UTC as Envoy's default %START_TIME%
// (2006-01-02T15:04:05.000Z), by hand: time.AppendFormat costs more than
// the rest of the line.
func appendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	ms := t.Nanosecond() / 1e6
	b = append(b, byte('0'+y/1000%10), byte('0'+y/100%10), byte('0'+y/10%10), byte('0'+y%10), '-')
	b = append(b, byte('0'+mo/10), byte('0'+mo%10), '-', byte('0'+d/10), byte('0'+d%10), 'T')
	b = append(b, byte('0'+h/10), byte('0'+h%10), ':', byte('0'+mi/10), byte('0'+mi%10), ':', byte('0'+s/10), byte('0'+s%10), '.')
	return append(b, byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10), 'Z')
}

// textBytes writes v, or "-" when empty; control bytes (a header cannot
// hold them, a path could) become '?' so that a line stays one line.
func textBytes(b, v []byte) []byte {
	if len(v) == 0 {
		return append(b, '-')
	}
	for _, c := range v {
		if c < 0x20 || c == 0x7f {
			c = '?'
		}
		b = append(b, c)
	}
	return b
}

func textString(b []byte, v string) []byte {
	if v == "" {
		return append(b, '-')
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x20 || c == 0x7f {
			c = '?'
		}
		b = append(b, c)
	}
	return b
}

func addrPort(b []byte, a netip.AddrPort) []byte {
	if !a.IsValid() {
		return append(b, '-')
	}
	return a.AppendTo(b)
}

// AppendJSON appends e as one JSON object of JSONFormat's keys, sorted,
// and a newline: numbers for the numeric operators, null for an empty
// value, as Envoy's JSON formatter writes them.
func AppendJSON(b []byte, e *Entry) []byte {
	b = append(b, `{"authority":`...)
	b = jsonBytes(b, e.Authority)
	b = append(b, `,"bytes_received":`...)
	b = strconv.AppendInt(b, e.BytesIn, 10)
	b = append(b, `,"bytes_sent":`...)
	b = strconv.AppendInt(b, e.BytesOut, 10)
	b = append(b, `,"connection_termination_details":null,"downstream_local_address":`...)
	b = jsonAddr(b, e.DownstreamLocal)
	b = append(b, `,"downstream_remote_address":`...)
	b = jsonAddr(b, e.DownstreamRemote)
	b = append(b, `,"duration":`...)
	b = strconv.AppendInt(b, e.Duration.Milliseconds(), 10)
	b = append(b, `,"method":`...)
	b = jsonBytes(b, e.Method)
	b = append(b, `,"path":`...)
	b = jsonBytes(b, e.Path)
	b = append(b, `,"protocol":`...)
	b = jsonString(b, e.Protocol)
	b = append(b, `,"request_id":`...)
	b = jsonBytes(b, e.RequestID)
	b = append(b, `,"requested_server_name":`...)
	b = jsonBytes(b, e.ServerName)
	b = append(b, `,"response_code":`...)
	b = strconv.AppendInt(b, int64(e.Code), 10)
	b = append(b, `,"response_code_details":`...)
	b = jsonString(b, e.Details)
	b = append(b, `,"response_flags":`...)
	if e.Flags == "" {
		b = append(b, `"-"`...) // Envoy writes "-" for no flags, in JSON too
	} else {
		b = jsonString(b, e.Flags)
	}
	b = append(b, `,"route_name":`...)
	b = jsonString(b, e.Route)
	b = append(b, `,"start_time":"`...)
	b = appendTime(b, e.Start)
	b = append(b, `","upstream_cluster":`...)
	b = jsonString(b, e.UpstreamCluster)
	b = append(b, `,"upstream_host":`...)
	b = jsonString(b, e.UpstreamHost)
	b = append(b, `,"upstream_local_address":null,"upstream_service_time":`...)
	if e.UpstreamTime >= 0 {
		b = append(b, '"')
		b = strconv.AppendInt(b, e.UpstreamTime.Milliseconds(), 10)
		b = append(b, '"')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"upstream_transport_failure_reason":null,"user_agent":`...)
	b = jsonBytes(b, e.UserAgent)
	b = append(b, `,"x_forwarded_for":`...)
	b = jsonBytes(b, e.XForwardedFor)
	return append(b, "}\n"...)
}

func jsonAddr(b []byte, a netip.AddrPort) []byte {
	if !a.IsValid() {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = a.AppendTo(b)
	return append(b, '"')
}

func jsonBytes(b, v []byte) []byte {
	if len(v) == 0 {
		return append(b, "null"...)
	}
	return jsonQuote(b, v)
}

func jsonString(b []byte, v string) []byte {
	if v == "" {
		return append(b, "null"...)
	}
	return jsonQuote(b, v)
}

const hexDigits = "0123456789abcdef"

// jsonQuote writes v as a JSON string; invalid UTF-8 becomes U+FFFD.
func jsonQuote[S ~string | ~[]byte](b []byte, v S) []byte {
	b = append(b, '"')
	for i := 0; i < len(v); {
		c := v[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(string(v[i:min(i+utf8.UTFMax, len(v))]))
		if r == utf8.RuneError && n == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, string(v[i:i+n])...)
		}
		i += n
	}
	return append(b, '"')
}
