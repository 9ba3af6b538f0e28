// Package calllog owns Sextant's call log, the one record layout of a call
// for the gateway and the Go SDK's round tripper alike: one record per call,
// kept in internal/callstore with t = the call's start (unix ns) and a = its
// latency (µs), partitioned by service so that a query reads only its
// service's records, cut into time segments so that retention (by age and
// by disk size) deletes whole segments, and answered as calls or per-step
// statistics. It does not own the storage engine (internal/callstore) nor
// what a call is (the gateway or the SDK fills Record).
//
// Layout on disk (docs/gateway.md, "Call records"):
//
//	DIR/<escaped service>/names.log          id -> string dictionary of the body's ids
//	DIR/<escaped service>/seg-<start ns>/    one callstore per segment
//	DIR/<escaped service>/seg-<start ns>/bounds   t range of a sealed segment
package calllog

import (
	"encoding/binary"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/sextant-mesh/sextant/internal/callstore"
)

// Record is one call as the gateway saw it.
type Record struct {
	Start    int64         // unix nanoseconds when the gateway received the call
	Latency  time.Duration // until the answer was ready, retries included
	Service  string        // the partition: the cluster's service
	Cluster  string
	Route    string
	Subset   string // the subset asked for, "k=v,k=v" sorted, or the subset cluster's name; "" for none
	Endpoint string // host:port of the last attempt; "" if none was picked
	Status   uint16 // HTTP status sent downstream
	Retries  uint8
	Reason   Reason // why the gateway answered itself; 0 for an upstream answer
	BytesIn  uint32 // request body bytes
	BytesOut uint32 // response body bytes
	// GRPCStatus is the call's grpc-status plus one (the answer's trailers,
	// or its headers in a trailers-only answer); 0: not a gRPC answer.
	GRPCStatus uint8
	// Detail names what decided a local reply when the reason needs it:
	// the RBAC policy that denied a call (rbac_denied). "" otherwise.
	Detail string

	// What the call was, for replaying it against another RBAC policy
	// (layout v2; empty in v1 records). Method, Path, Host and Principal
	// are kept only while the partition's dictionary has room
	// (Options.DictLimit); beyond it a new value is recorded as not kept.
	Principal string // the peer certificate's first URI SAN (a SPIFFE ID); "" for none
	Subject   string // the peer certificate's subject (RFC 2253), which RBAC principals match too
	Method    string
	Path      string // without the query
	Host      string // :authority (Host)
	Port      uint16 // the local port the call came in on (the listener's)
	PeerIP    netip.Addr
	Conn      ConnFlags
	// Upstream is the endpoint's certificate's first URI SAN (a SPIFFE ID)
	// when the call went over TLS to it (a sidecar's outbound call: the
	// server's identity); "" for none. Kept as Principal is.
	Upstream string

	// TraceID is the call's trace when the gateway exported its span
	// (docs/tracing.md); zero: none.
	TraceID [16]byte
}

// ConnFlags say what the call's connection was (layout v2).
type ConnFlags uint8

const (
	ConnTLS      ConnFlags = 1 << iota // the call came over TLS
	ConnPeerCert                       // the client presented a certificate
	// ConnOtherNames: the certificate has names the record does not keep
	// (URI SANs after the first, DNS SANs), which an RBAC principal match
	// reads too.
	ConnOtherNames
)

// Reason says why a call got no upstream answer.
type Reason uint8

// Reasons, in their stored encoding (never renumber).
const (
	ReasonNone Reason = iota
	ReasonNoRoute
	ReasonNoCluster
	ReasonNoHealthy
	ReasonNoSubset
	ReasonShed
	ReasonTimeout
	ReasonConnect
	ReasonReset
	ReasonTooLarge
	ReasonOverflow
	ReasonBadRequest
	ReasonOther
	ReasonUpgradeFailed
	ReasonRequestTooLarge // the client's body was over the limit
	ReasonBadRequestBody  // the client's body could not be read (truncated, malformed chunks)
	ReasonRBACDenied      // an RBAC filter denied the call (Record.Detail: the policy)
	ReasonTLS             // the TLS handshake with the endpoint failed
	ReasonFaultAbort      // a route's fault injection answered the call
	ReasonIdleTimeout     // a TCP connection carried no byte for its idle timeout and was closed
)

var reasonNames = [...]string{"", "no_route", "cluster_not_found", "no_healthy_endpoint", "no_subset", "shed",
	"upstream_timeout", "connect_failure", "upstream_reset", "response_too_large", "pool_overflow",
	"bad_subset_header", "other", "upgrade_failed", "request_too_large", "bad_request", "rbac_denied", "tls_failure", "fault_abort", "idle_timeout"}

// ReasonCode maps the gateway's reason names to their codes.
func ReasonCode(s string) Reason {
	if s == "" {
		return ReasonNone
	}
	for i, n := range reasonNames {
		if n == s {
			return Reason(i)
		}
	}
	return ReasonOther
}

// String is the reason's name ("" for none).
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "other"
}

// The body (little endian), callstore.BodySize (50) bytes: the race's
// record size (34, seed 003; bench callstore measures it) and, from layout
// v3, the trace id. The service is the
// partition, so it is not in the body; strings are ids into the
// partition's dictionary.
//
//	offset size field
//	0      1    layout version (1, 2 or 3)
//	1      1    reason
//	2      2    status
//	4      1    retries
//	5      1    grpc-status + 1 (0: none; 0 in records written before it)
//	6      4    endpoint id
//	10     4    subset id
//	14     4    cluster id
//	18     4    route id
//	22     4    request body bytes
//	26     4    response body bytes
//	30     4    v1: detail id (0: none); v2: request id, one dictionary
//	            string of the detail and the request (request.encode)
//	34     16   v3: the trace id (zeros: none; and in a store made before
//	            v3, whose 34-byte bodies cut it off)
const layoutVersion = 3

// notKept is the id of a string the dictionary had no room for (distinct
// from 0, "").
const notKept = math.MaxUint32

type body struct {
	version                   uint8
	reason                    Reason
	status                    uint16
	retries                   uint8
	grpc                      uint8 // grpc-status + 1; 0: none
	endpoint, subset, cluster uint32
	route, bytesIn, bytesOut  uint32
	detail                    uint32 // v2: the request id
	trace                     [16]byte
}

func (b *body) encode() (out [callstore.BodySize]byte) {
	out[0] = layoutVersion
	out[1] = byte(b.reason)
	binary.LittleEndian.PutUint16(out[2:], b.status)
	out[4] = b.retries
	out[5] = b.grpc
	binary.LittleEndian.PutUint32(out[6:], b.endpoint)
	binary.LittleEndian.PutUint32(out[10:], b.subset)
	binary.LittleEndian.PutUint32(out[14:], b.cluster)
	binary.LittleEndian.PutUint32(out[18:], b.route)
	binary.LittleEndian.PutUint32(out[22:], b.bytesIn)
	binary.LittleEndian.PutUint32(out[26:], b.bytesOut)
	binary.LittleEndian.PutUint32(out[30:], b.detail)
	copy(out[34:], b.trace[:])
	return out
}

func decodeBody(in *[callstore.BodySize]byte) body {
	return body{
		version:  in[0],
		reason:   Reason(in[1]),
		status:   binary.LittleEndian.Uint16(in[2:]),
		retries:  in[4],
		grpc:     in[5],
		endpoint: binary.LittleEndian.Uint32(in[6:]),
		subset:   binary.LittleEndian.Uint32(in[10:]),
		cluster:  binary.LittleEndian.Uint32(in[14:]),
		route:    binary.LittleEndian.Uint32(in[18:]),
		bytesIn:  binary.LittleEndian.Uint32(in[22:]),
		bytesOut: binary.LittleEndian.Uint32(in[26:]),
		detail:   binary.LittleEndian.Uint32(in[30:]),
		trace:    [16]byte(in[34:50]),
	}
}

// request is what a layout v2 record keeps of the call besides the v1
// fields: one dictionary string, so that the record stays 34 bytes. Its
// cardinality is the service's callers x paths, so the dictionary takes
// new ones only below Options.DictLimit, dropping first the peer IP, then
// the path, then the names, then the method (dropped, in the string's
// mask); the detail, port and connection flags are always kept.
type request struct {
	detail, principal, subject string
	upstream                   string // an 11th field, after the mask: absent in older records
	method, path, host         string
	port                       uint16
	peer                       netip.Addr
	conn                       ConnFlags
	dropped                    dropMask
}

// dropMask names the fields a record has a value for but did not keep.
type dropMask uint8

const (
	dropPeer dropMask = 1 << iota
	dropPath
	dropPrincipal
	dropSubject
	dropHost
	dropMethod
)

var dropNames = [...]string{"peer_ip", "path", "principal", "subject", "host", "method"}

// names lists m's fields by name, in the order of dropNames.
func (m dropMask) names() []string {
	var out []string
	for i, n := range dropNames {
		if m&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

// encode appends q as its dictionary string: the fields joined by NUL (a
// NUL inside a value drops it), the mask last.
func (q *request) encode(b []byte) []byte {
	str := func(s string, bit dropMask) {
		if strings.IndexByte(s, 0) >= 0 {
			q.dropped |= bit
			s = ""
		}
		b = append(b, s...)
		b = append(b, 0)
	}
	str(q.detail, 0)
	str(q.principal, dropPrincipal)
	str(q.subject, dropSubject)
	str(q.method, dropMethod)
	str(q.path, dropPath)
	str(q.host, dropHost)
	b = strconv.AppendUint(b, uint64(q.port), 10)
	b = append(b, 0)
	if q.peer.IsValid() {
		b = q.peer.AppendTo(b)
	}
	b = append(b, 0)
	b = strconv.AppendUint(b, uint64(q.conn), 10)
	b = append(b, 0)
	// upstream is encoded (and so dropped) with principal, its mirror.
	up := q.upstream
	if strings.IndexByte(up, 0) >= 0 {
		up = ""
		q.dropped |= dropPrincipal
	}
	b = strconv.AppendUint(b, uint64(q.dropped), 10)
	if up != "" {
		b = append(append(b, 0), up...)
	}
	return b
}

// drop removes the fields of m that have a value, and says so in the mask.
func (q *request) drop(m dropMask) {
	for _, f := range []struct {
		bit dropMask
		s   *string
	}{{dropPath, &q.path}, {dropPrincipal, &q.principal}, {dropPrincipal, &q.upstream}, {dropSubject, &q.subject}, {dropHost, &q.host}, {dropMethod, &q.method}} {
		if m&f.bit != 0 && *f.s != "" {
			*f.s = ""
			q.dropped |= f.bit
		}
	}
	if m&dropPeer != 0 && q.peer.IsValid() {
		q.peer = netip.Addr{}
		q.dropped |= dropPeer
	}
}

// parseRequest reads a request's dictionary string; false if it is not one.
func parseRequest(s string) (request, bool) {
	f := strings.Split(s, "\x00")
	if len(f) != 10 && len(f) != 11 {
		return request{}, false
	}
	port, err1 := strconv.ParseUint(f[6], 10, 16)
	conn, err2 := strconv.ParseUint(f[8], 10, 8)
	dropped, err3 := strconv.ParseUint(f[9], 10, 8)
	if err1 != nil || err2 != nil || err3 != nil {
		return request{}, false
	}
	q := request{detail: f[0], principal: f[1], subject: f[2], method: f[3], path: f[4], host: f[5],
		port: uint16(port), conn: ConnFlags(conn), dropped: dropMask(dropped)}
	if f[7] != "" {
		q.peer, _ = netip.ParseAddr(f[7])
	}
	if len(f) == 11 {
		q.upstream = f[10]
	}
	return q, true
}

// isError: the call failed from the caller's point of view (5xx or no
// answer at all). A TCP connection closed idle ended as it should.
func (b *body) isError() bool {
	return b.status >= 500 || b.status == 0 || (b.reason != ReasonNone && b.reason != ReasonIdleTimeout)
}
