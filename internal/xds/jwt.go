package xds

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacconfigv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/sextant-mesh/sextant/internal/config"
)

// JWTFilterName is the name of Envoy's JWT authentication filter, which
// RequestAuthentications become (before the RBAC filters).
const JWTFilterName = "envoy.filters.http.jwt_authn"

// JWTPayloadKey is where a verified token's payload is put in the
// filter's dynamic metadata (payload_in_metadata), under JWTFilterName:
// RBAC's request principal and request.auth.* matchers read it there.
const JWTPayloadKey = "payload"

// jwksCacheDuration is how long fetched keys are used before they are
// fetched again (Istio's remote JWKS default).
const jwksCacheDuration = 5 * time.Minute

// defaultJWKSTimeout is a JWKS fetch's timeout when the rule sets none.
const defaultJWKSTimeout = 5 * time.Second

// JWTFilter translates the RequestAuthentications among objs (others are
// skipped) into Envoy's jwt_authn HTTP filter, as Istio does: a provider
// per issuer ("origins-N"), the token's payload in metadata, and one
// requirement for every request, "this provider's token, or no token":
// a request without a token passes, one whose token fails is refused
// (401), and AuthorizationPolicies decide the rest. nil when objs hold no
// JWT rule. The filter is optional: grpc-go, which does not implement it,
// skips it (docs/security.md says what that leaves unenforced).
func JWTFilter(objs []*config.Object) *hcmv3.HttpFilter {
	var ras []*config.Object
	for _, o := range objs {
		if o.RequestAuthentication != nil {
			ras = append(ras, o)
		}
	}
	rules := config.JWTRules(ras)
	if len(rules) == 0 {
		return nil
	}
	providers := map[string]*jwtv3.JwtProvider{}
	var each, names []*jwtv3.JwtRequirement
	for i, r := range rules {
		name := fmt.Sprintf("origins-%d", i)
		p := &jwtv3.JwtProvider{
			Issuer:               r.Issuer,
			Audiences:            r.Audiences,
			Forward:              r.ForwardOriginalToken,
			ForwardPayloadHeader: r.OutputPayloadToHeader,
			PayloadInMetadata:    JWTPayloadKey,
			FromParams:           r.FromParams,
			FromCookies:          r.FromCookies,
		}
		for _, h := range r.FromHeaders {
			p.FromHeaders = append(p.FromHeaders, &jwtv3.JwtHeader{Name: h.Name, ValuePrefix: h.Prefix})
		}
		for _, c := range r.OutputClaimToHeaders {
			p.ClaimToHeaders = append(p.ClaimToHeaders, &jwtv3.JwtClaimToHeader{HeaderName: c.Header, ClaimName: c.Claim})
		}
		if r.Jwks != "" {
			p.JwksSourceSpecifier = &jwtv3.JwtProvider_LocalJwks{LocalJwks: &corev3.DataSource{
				Specifier: &corev3.DataSource_InlineString{InlineString: r.Jwks}}}
		} else {
			timeout := defaultJWKSTimeout
			if r.Timeout != nil {
				timeout = r.Timeout.AsDuration()
			}
			p.JwksSourceSpecifier = &jwtv3.JwtProvider_RemoteJwks{RemoteJwks: &jwtv3.RemoteJwks{
				HttpUri: &corev3.HttpUri{Uri: r.JwksUri, HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: JWKSCluster(r.JwksUri)},
					Timeout: durationpb.New(timeout)},
				CacheDuration: durationpb.New(jwksCacheDuration),
				// Fetched when the config arrives, not by a request: until
				// the keys are there, tokens fail (never pass).
				AsyncFetch: &jwtv3.JwksAsyncFetch{},
			}}
		}
		providers[name] = p
		provider := &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_ProviderName{ProviderName: name}}
		names = append(names, provider)
		each = append(each, &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_RequiresAny{RequiresAny: &jwtv3.JwtRequirementOrList{
			Requirements: []*jwtv3.JwtRequirement{provider, {RequiresType: &jwtv3.JwtRequirement_AllowMissing{AllowMissing: &emptypb.Empty{}}}}}}})
	}
	req := each[0]
	if len(each) > 1 {
		// Every token present must verify (each provider's or none), or
		// one provider's does (providers sharing a location), Istio's form.
		all := &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_RequiresAll{RequiresAll: &jwtv3.JwtRequirementAndList{Requirements: each}}}
		req = &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_RequiresAny{RequiresAny: &jwtv3.JwtRequirementOrList{
			Requirements: append([]*jwtv3.JwtRequirement{all}, names...)}}}
	}
	cfg := &jwtv3.JwtAuthentication{
		Providers: providers,
		Rules: []*jwtv3.RequirementRule{{
			Match:           &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			RequirementType: &jwtv3.RequirementRule_Requires{Requires: req},
		}},
		BypassCorsPreflight: true,
	}
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, cfg, deterministic); err != nil {
		return nil // not expected: built from valid messages
	}
	return &hcmv3.HttpFilter{Name: JWTFilterName, IsOptional: true, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}}
}

// JWKSCluster names the cluster a JWKS URI is fetched through, Istio's
// outbound cluster name for its host and port. Sextant's gateway fetches
// the URI itself; an Envoy needs the cluster (a mesh service, or one its
// bootstrap defines).
func JWKSCluster(uri string) string {
	u, err := url.Parse(uri)
	if err != nil {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return "outbound|" + port + "||" + strings.Trim(u.Hostname(), "[]")
}

// jwtPayloadID matches a claim of the verified token's payload (path below
// it) with Istio's string match v: a string claim equal to it, or a list
// claim holding one.
func jwtPayloadID(path []string, v string, list bool) *rbacconfigv3.Principal {
	sm := stringMatcher(v)
	value := &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: sm}}
	if list {
		value = &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_OrMatch{OrMatch: &matcherv3.OrMatcher{ValueMatchers: []*matcherv3.ValueMatcher{
			{MatchPattern: &matcherv3.ValueMatcher_ListMatch{ListMatch: &matcherv3.ListMatcher{MatchPattern: &matcherv3.ListMatcher_OneOf{OneOf: value}}}},
			value,
		}}}}
	}
	return metadataID(path, value)
}

func metadataID(path []string, value *matcherv3.ValueMatcher) *rbacconfigv3.Principal {
	segs := make([]*matcherv3.MetadataMatcher_PathSegment, 0, len(path)+1)
	for _, k := range append([]string{JWTPayloadKey}, path...) {
		segs = append(segs, &matcherv3.MetadataMatcher_PathSegment{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: k}})
	}
	return &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_Metadata{Metadata: &matcherv3.MetadataMatcher{
		Filter: JWTFilterName, Path: segs, Value: value}}}
}

// requestPrincipalID matches Istio's request principal "ISS/SUB" on the
// token's iss and sub claims, exactly: "*" is any verified token; else the
// principal may split at any "/" of v (issuers are often URLs), so each
// split is one alternative, and a prefix ("X*") may also end within iss, a
// suffix ("*X") begin within sub.
func requestPrincipalID(v string) *rbacconfigv3.Principal {
	if v == "*" {
		return metadataID([]string{"iss"}, &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_PresentMatch{PresentMatch: true}})
	}
	pre, suf := strings.HasSuffix(v, "*"), strings.HasPrefix(v, "*")
	body := strings.TrimSuffix(strings.TrimPrefix(v, "*"), "*")
	var ors []*rbacconfigv3.Principal
	switch {
	case pre:
		ors = append(ors, jwtPayloadID([]string{"iss"}, body+"*", false))
	case suf:
		ors = append(ors, jwtPayloadID([]string{"sub"}, "*"+body, false))
	}
	for j := 0; j < len(body); j++ {
		if body[j] != '/' {
			continue
		}
		iss, sub := body[:j], body[j+1:]
		switch {
		case pre:
			sub += "*"
		case suf:
			iss = "*" + iss
		}
		var and []*rbacconfigv3.Principal
		if iss != "*" && iss != "" {
			and = append(and, jwtPayloadID([]string{"iss"}, iss, false))
		}
		if sub != "*" && sub != "" {
			and = append(and, jwtPayloadID([]string{"sub"}, sub, false))
		}
		if len(and) == 0 || (iss == "" && !suf) || (sub == "" && !pre) {
			continue // "/x" or "x/" exactly: an empty iss or sub, which no verified token has
		}
		ors = append(ors, andID(and))
	}
	if len(ors) == 0 {
		// No "/": no principal (iss/sub) equals v.
		return &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_NotId{NotId: &rbacconfigv3.Principal{
			Identifier: &rbacconfigv3.Principal_Any{Any: true}}}}
	}
	return orID(ors)
}

// jwtConditionID is a request.auth.* condition's matcher of value v.
func jwtConditionID(attr, claim string) func(string) *rbacconfigv3.Principal {
	switch attr {
	case config.CondRequestPrincipal:
		return requestPrincipalID
	case config.CondRequestAudiences:
		return func(v string) *rbacconfigv3.Principal { return jwtPayloadID([]string{"aud"}, v, true) }
	case config.CondRequestPresenter:
		return func(v string) *rbacconfigv3.Principal { return jwtPayloadID([]string{"azp"}, v, false) }
	}
	path := config.ClaimPath(claim)
	return func(v string) *rbacconfigv3.Principal { return jwtPayloadID(path, v, true) }
}
