package xds

import (
	"slices"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	maglevv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/maglev/v3"
	ringhashv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/config"
)

// HashFor answers, while building routes, what a destination's
// consistent-hash policy hashes (its DestinationRule's
// loadBalancer.consistentHash; the zero key for none). A nil HashFor is no
// hashing anywhere.
type HashFor func(d config.Destination) config.HashKey

// ringHash is the ring_hash load-balancing policy with a minimum ring size
// (0: the client's default). grpc-go (gRFC A42) and Envoy read it; grpc-go
// refuses the DEFAULT_HASH function, so xxHash is named.
func ringHash(size uint64) *ringhashv3.RingHash {
	rh := &ringhashv3.RingHash{HashFunction: ringhashv3.RingHash_XX_HASH}
	if size > 0 {
		rh.MinimumRingSize = wrapperspb.UInt64(size)
	}
	return rh
}

// maglev is the maglev policy with a table size (0: Envoy's default).
func maglev(size uint64) *maglevv3.Maglev {
	m := &maglevv3.Maglev{}
	if size > 0 {
		m.TableSize = wrapperspb.UInt64(size)
	}
	return m
}

// hashPolicy is Envoy's route hash_policy for k, as Istio writes it
// (ConsistentHashToHashPolicy); nil for the zero key.
func hashPolicy(k config.HashKey) *routev3.RouteAction_HashPolicy {
	switch {
	case k.Header != "":
		return &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{
			Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: k.Header}}}
	case k.Cookie != "":
		c := &routev3.RouteAction_HashPolicy_Cookie{Name: k.Cookie, Path: k.CookiePath}
		if k.CookieTTL > 0 {
			c.Ttl = durationpb.New(k.CookieTTL)
		}
		return &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Cookie_{Cookie: c}}
	case k.SourceIP:
		return &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_ConnectionProperties_{
			ConnectionProperties: &routev3.RouteAction_HashPolicy_ConnectionProperties{SourceIp: true}}}
	case k.Query != "":
		return &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_QueryParameter_{
			QueryParameter: &routev3.RouteAction_HashPolicy_QueryParameter{Name: k.Query}}}
	}
	return nil
}

// setHash puts the hash policies of a route's destinations on its action a:
// one per distinct key, in the destinations' order (Istio writes one per
// destination). A route to one hashed destination retries without Envoy's
// previous_hosts predicate, as Istio's: a hash that avoided the host it maps
// to would not be consistent.
func setHash(a *routev3.RouteAction, keys []config.HashKey, single bool) {
	var seen []config.HashKey
	for _, k := range keys {
		if k.IsZero() || slices.Contains(seen, k) {
			continue
		}
		seen = append(seen, k)
		a.HashPolicy = append(a.HashPolicy, hashPolicy(k))
	}
	if single && len(seen) > 0 && a.RetryPolicy != nil {
		rp := proto.Clone(a.RetryPolicy).(*routev3.RetryPolicy) // defaultRetryPolicy is shared
		rp.RetryHostPredicate = nil
		rp.HostSelectionRetryMaxAttempts = 0
		a.RetryPolicy = rp
	}
}
