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
)

var reasonNames = [...]string{"", "no_route", "cluster_not_found", "no_healthy_endpoint", "no_subset", "shed",
	"upstream_timeout", "connect_failure", "upstream_reset", "response_too_large", "pool_overflow",
	"bad_subset_header", "other", "upgrade_failed", "request_too_large", "bad_request", "rbac_denied", "tls_failure"}

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

// The body (little endian), callstore.BodySize bytes. The service is the
// partition, so it is not in the body; strings are ids into the
// partition's dictionary. Layout v1 is the first 34 bytes (a v1 record, or
// any record of a store an earlier version created, reads zeros after
// them).
//
//	offset size field
//	0      1    layout version (1 or 2)
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
//	30     4    detail id (0: none; 0 in records written before it)
//	           v2:
//	34     4    principal id
//	38     4    method id
//	42     4    path id
//	46     4    host id      (ids: notKept when the dictionary was full)
//	50     2    listener port
//	52     16   peer IP (IPv4 as IPv4-mapped IPv6; all zeros: none)
//	68     1    connection flags (ConnFlags)
//	69     4    subject id   (notKept too)
//	73     7    zero
const layoutVersion = 2

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
	detail                    uint32
	// v2
	principal, method, path, host uint32
	subject                       uint32
	port                          uint16
	peer                          [16]byte
	conn                          ConnFlags
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
	binary.LittleEndian.PutUint32(out[34:], b.principal)
	binary.LittleEndian.PutUint32(out[38:], b.method)
	binary.LittleEndian.PutUint32(out[42:], b.path)
	binary.LittleEndian.PutUint32(out[46:], b.host)
	binary.LittleEndian.PutUint16(out[50:], b.port)
	copy(out[52:68], b.peer[:])
	out[68] = byte(b.conn)
	binary.LittleEndian.PutUint32(out[69:], b.subject)
	return out
}

func decodeBody(in *[callstore.BodySize]byte) body {
	b := body{
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
	}
	if b.version < 2 {
		return b // the v2 bytes are not the record's
	}
	b.principal = binary.LittleEndian.Uint32(in[34:])
	b.method = binary.LittleEndian.Uint32(in[38:])
	b.path = binary.LittleEndian.Uint32(in[42:])
	b.host = binary.LittleEndian.Uint32(in[46:])
	b.port = binary.LittleEndian.Uint16(in[50:])
	b.peer = [16]byte(in[52:68])
	b.conn = ConnFlags(in[68])
	b.subject = binary.LittleEndian.Uint32(in[69:])
	return b
}

// peerAddr is the stored peer IP (invalid for none).
func (b *body) peerAddr() netip.Addr {
	if b.peer == ([16]byte{}) {
		return netip.Addr{}
	}
	return netip.AddrFrom16(b.peer).Unmap()
}

// isError: the call failed from the caller's point of view (5xx or no
// answer at all).
func (b *body) isError() bool { return b.status >= 500 || b.status == 0 || b.reason != ReasonNone }
