package gateway

import (
	"fmt"
	"strconv"
	"time"

	"github.com/cespare/xxhash/v2"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/valyala/fasthttp"
)

// A route's hash_policy: what a call is hashed by for its cluster's
// consistent-hash policy (ring_hash, maglev), as Envoy computes it.
type hashKind uint8

const (
	hashHeader hashKind = iota
	hashCookie
	hashSourceIP
	hashQuery
)

type hashSpec struct {
	kind     hashKind
	name     string        // header, cookie or query parameter name
	path     string        // a generated cookie's Path
	ttl      time.Duration // a cookie with a TTL is generated when the call has none
	terminal bool          // a hash from this entry ends the list
}

// decodeHashPolicies reads a route action's hash_policy. filter_state (a
// gRPC client's channel id, gRFC A42) names no part of an HTTP call: it is
// skipped, as Envoy skips a filter state key it does not find.
func decodeHashPolicies(hps []*route.RouteAction_HashPolicy, path string) ([]hashSpec, error) {
	var out []hashSpec
	for i, hp := range hps {
		p := fmt.Sprintf("%s.hash_policy[%d]", path, i)
		h := hashSpec{terminal: hp.GetTerminal()}
		switch ps := hp.GetPolicySpecifier().(type) {
		case *route.RouteAction_HashPolicy_Header_:
			if ps.Header.GetRegexRewrite() != nil {
				return nil, fieldErr(p+".header.regex_rewrite", "%v", errUnsupported)
			}
			h.kind, h.name = hashHeader, ps.Header.GetHeaderName()
		case *route.RouteAction_HashPolicy_Cookie_:
			c := ps.Cookie
			if len(c.GetAttributes()) > 0 {
				return nil, fieldErr(p+".cookie.attributes", "%v", errUnsupported)
			}
			h.kind, h.name, h.path = hashCookie, c.GetName(), c.GetPath()
			if c.GetTtl() != nil {
				ttl, err := duration(c.GetTtl(), p+".cookie.ttl")
				if err != nil {
					return nil, err
				}
				h.ttl = ttl
			}
		case *route.RouteAction_HashPolicy_ConnectionProperties_:
			if !ps.ConnectionProperties.GetSourceIp() {
				continue // hashes nothing
			}
			h.kind = hashSourceIP
		case *route.RouteAction_HashPolicy_QueryParameter_:
			h.kind, h.name = hashQuery, ps.QueryParameter.GetName()
		case *route.RouteAction_HashPolicy_FilterState_:
			continue
		default:
			return nil, fieldErr(p, "%T: %v (header, cookie, connection_properties, query_parameter)", ps, errUnsupported)
		}
		if h.kind != hashSourceIP && h.name == "" {
			return nil, fieldErr(p, "empty name")
		}
		out = append(out, h)
	}
	return out, nil
}

// callHash is the hash of a call by the route's hash policies, as Envoy
// combines them (each hash found rotates the previous one left by a bit and
// is xored in; a terminal entry that found one ends the list). ok is false
// when no entry found anything: the call is picked as any other. A cookie
// entry with a TTL whose cookie is missing hashes a new cookie, returned in
// setCookie for the answer: Envoy's, from the client's address, so that a
// client's connection keeps its endpoint.
func callHash(ctx *fasthttp.RequestCtx, specs []hashSpec) (hash uint64, ok bool, setCookie string) {
	for _, s := range specs {
		var v []byte
		switch s.kind {
		case hashHeader:
			v = ctx.Request.Header.Peek(s.name)
		case hashQuery:
			v = ctx.QueryArgs().Peek(s.name)
		case hashSourceIP:
			// The IP as Envoy hashes it (IPv4, IPv4-mapped IPv6 too, as a dotted
			// quad); nothing for a connection without one.
			if ip, _ := connAddrsOf(ctx); ip.IsValid() {
				var buf [48]byte
				v = ip.Unmap().AppendTo(buf[:0])
			}
		case hashCookie:
			v = ctx.Request.Header.Cookie(s.name)
			if len(v) == 0 && s.ttl > 0 {
				val := fmt.Sprintf("%016x", xxhash.Sum64String(ctx.RemoteAddr().String()))
				setCookie = cookieHeader(s, val)
				v = []byte(val)
			}
		}
		if len(v) == 0 {
			continue
		}
		h := xxhash.Sum64(v)
		if ok {
			hash = (hash<<1 | hash>>63) ^ h
		} else {
			hash, ok = h, true
		}
		if s.terminal {
			break
		}
	}
	return hash, ok, setCookie
}

// cookieHeader is the Set-Cookie value of a generated hash cookie.
func cookieHeader(s hashSpec, value string) string {
	c := s.name + "=" + value
	if s.path != "" {
		c += "; Path=" + s.path
	}
	return c + "; Max-Age=" + strconv.FormatInt(int64(s.ttl/time.Second), 10) + "; HttpOnly"
}
