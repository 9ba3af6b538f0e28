package xds

import (
	"bytes"
	"slices"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// EncodeVirtualHost returns the encoding of VirtualHost(name, nil, svc, vs,
// clusterFor, hashFor), written directly rather than built as messages and
// marshalled: in a full recomputation that was a third of the CPU. It
// writes what protobuf-go's deterministic encoding writes (regular fields
// by number, then oneof fields), which TestEncodeVirtualHost checks against
// the marshalled message for every kind of route. The rare parts (a route
// left out, a VirtualService's own retries, timeouts) are encoded from
// their messages. One call in vhostCheckEvery is also marshalled and
// compared; a difference turns the writer off for good.
func EncodeVirtualHost(name string, svc naming.ServiceKey, vs *config.Object, clusterFor ClusterFor, hashFor HashFor) ([]byte, error) {
	if vhostDrift.Load() {
		return Encode(VirtualHost(name, nil, svc, vs, clusterFor, hashFor))
	}
	b, err := encodeVirtualHost(name, svc, vs, clusterFor, hashFor)
	if err != nil || vhostChecks.Add(1)%vhostCheckEvery != 1 {
		return b, err
	}
	// A sample is checked against the marshalled message: should
	// VirtualHost change without this writer, the messages are used from
	// then on.
	want, werr := Encode(VirtualHost(name, nil, svc, vs, clusterFor, hashFor))
	if werr == nil && !bytes.Equal(b, want) {
		vhostDrift.Store(true)
		return want, nil
	}
	return b, nil
}

var (
	vhostDrift  atomic.Bool   // the writer disagreed with the marshalled message once
	vhostChecks atomic.Uint64 // calls, for sampling
)

// vhostCheckEvery: one virtual host in this many (the first included) is
// also marshalled and compared.
const vhostCheckEvery = 256

func encodeVirtualHost(name string, svc naming.ServiceKey, vs *config.Object, clusterFor ClusterFor, hashFor HashFor) ([]byte, error) {
	e := vhEncoders.Get().(*vhEncoder)
	defer vhEncoders.Put(e)
	if vs == nil {
		d := config.Destination{Service: svc}
		if hashFor != nil && !hashFor(d).IsZero() {
			return Encode(VirtualHost(name, nil, svc, vs, clusterFor, hashFor)) // hash policies: from the messages
		}
		c, _ := clusterFor(d)
		out := appendString(make([]byte, 0, 128+len(name)+len(c)), vhName, name)
		return e.route(out, nil, "", c, nil, nil, nil)
	}
	type action struct {
		dests []weightedDest
		hr    *networking.HTTPRoute
	}
	actions := make([]action, 0, len(vs.VirtualService.Http))
	for _, hr := range vs.VirtualService.Http {
		dests, hashed := routeDests(vs.Namespace, hr, clusterFor, hashFor)
		if len(dests) == 0 || hashed || routeExtras(hr) {
			// A route left out (its reason goes in the metadata, as
			// VirtualHost writes it), or one with fault, direct response,
			// header changes or hash policies: written from the messages.
			return Encode(VirtualHost(name, nil, svc, vs, clusterFor, hashFor))
		}
		actions = append(actions, action{dests, hr})
	}
	out := appendString(make([]byte, 0, 256*len(actions)), vhName, name)
	for _, a := range actions {
		matches := a.hr.Match
		if len(matches) == 0 {
			matches = []*networking.HTTPMatchRequest{nil}
		}
		var err error
		for _, m := range matches {
			if out, err = e.route(out, m, a.hr.Name, "", a.dests, a.hr, a.hr.Retries); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

type weightedDest struct {
	name   string
	weight uint32
}

// routeDests are the destinations of hr that routeAction keeps, and
// whether one of them has a consistent hash.
func routeDests(ns string, hr *networking.HTTPRoute, clusterFor ClusterFor, hashFor HashFor) (dests []weightedDest, hashed bool) {
	for _, d := range hr.Route {
		k, err := config.ResolveHost(d.Destination.Host, ns)
		if err != nil {
			continue
		}
		cd := config.Destination{Service: k, Subset: d.Destination.Subset, Port: d.Destination.GetPort().GetNumber()}
		name, ok := clusterFor(cd)
		if !ok && d.Destination.Subset != "" {
			continue
		}
		hashed = hashed || hashFor != nil && !hashFor(cd).IsZero()
		dests = append(dests, weightedDest{name, uint32(d.Weight)})
	}
	return dests, hashed
}

// Field numbers of the route messages written by hand.
const (
	vhName   = 1 // VirtualHost
	vhRoutes = 3

	routeMatchF  = 1 // Route
	routeRouteF  = 2 // oneof action
	routeNameF   = 14
	rmPrefix     = 1 // RouteMatch: oneof path_specifier
	rmPath       = 2
	rmSafeRegex  = 10
	rmHeaders    = 6
	hmName       = 1  // HeaderMatcher
	hmString     = 13 // oneof header_match_specifier
	smExact      = 1  // StringMatcher: oneof match_pattern
	smPrefix     = 2
	smSafeRegex  = 5
	regexRegex   = 2 // RegexMatcher
	raCluster    = 1 // RouteAction: oneof cluster_specifier
	raWeighted   = 3
	raTimeout    = 8
	raRetry      = 9
	raMaxStream  = 36
	msdDuration  = 1 // RouteAction.MaxStreamDuration
	wcClusters   = 1 // WeightedCluster
	cwName       = 1 // WeightedCluster.ClusterWeight
	cwWeight     = 2
	wrapperValue = 1 // UInt32Value
)

// defaultRetryBytes is defaultRetryPolicy encoded.
var defaultRetryBytes = sync.OnceValue(func() []byte {
	b, err := Encode(defaultRetryPolicy)
	if err != nil {
		panic(err)
	}
	return b
})

// vhEncoders keeps vhEncoders, whose buffers have grown, for the next
// virtual host.
var vhEncoders = sync.Pool{New: func() any { return new(vhEncoder) }}

// vhEncoder holds the scratch buffers of the nested messages, reused from
// route to route.
type vhEncoder struct {
	route_, match, action, header, tmp []byte
}

// route appends one Route: its match (m; nil: prefix "/"), its name, and
// the action to cluster (when dests is nil) or to dests with hr's timeout
// and retries r (the default policy for a route without a VirtualService
// or with no retries of its own).
func (e *vhEncoder) route(out []byte, m *networking.HTTPMatchRequest, name, cluster string, dests []weightedDest, hr *networking.HTTPRoute, r *networking.HTTPRetry) ([]byte, error) {
	// RouteMatch: headers (regular), then the path specifier (oneof).
	rm := e.match[:0]
	var path []byte
	pathField := protowire.Number(rmPrefix)
	pathStr := "/"
	if m != nil {
		switch u := m.GetUri().GetMatchType().(type) {
		case *networking.StringMatch_Exact:
			pathField, pathStr = rmPath, u.Exact
		case *networking.StringMatch_Prefix:
			pathStr = u.Prefix
		case *networking.StringMatch_Regex:
			pathField, pathStr = rmSafeRegex, ""
			path = appendString(nil, regexRegex, u.Regex)
		}
		names := make([]string, 0, len(m.Headers))
		for n := range m.Headers {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			rm = e.appendHeader(rm, n, m.Headers[n])
		}
		if m.Method != nil {
			rm = e.appendHeader(rm, ":method", m.Method)
		}
	}
	if pathField == rmSafeRegex {
		rm = appendBytes(rm, rmSafeRegex, path)
	} else {
		rm = appendString(rm, pathField, pathStr)
	}
	e.match = rm

	// RouteAction: timeout, retries, max stream duration (regular), then
	// the cluster specifier (oneof).
	ra := e.action[:0]
	if hr != nil && hr.Timeout != nil {
		d, err := Encode(hr.Timeout)
		if err != nil {
			return nil, err
		}
		ra = appendBytes(ra, raTimeout, d)
	}
	switch {
	case r == nil:
		ra = appendBytes(ra, raRetry, defaultRetryBytes())
	case r.Attempts > 0:
		b, err := Encode(newRetryPolicy(r))
		if err != nil {
			return nil, err
		}
		ra = appendBytes(ra, raRetry, b)
	}
	if hr != nil && hr.Timeout != nil {
		d, err := Encode(hr.Timeout)
		if err != nil {
			return nil, err
		}
		ra = protowire.AppendTag(ra, raMaxStream, protowire.BytesType)
		ra = protowire.AppendVarint(ra, uint64(protowire.SizeTag(msdDuration)+protowire.SizeBytes(len(d))))
		ra = appendBytes(ra, msdDuration, d)
	}
	ra = appendClusterSpecifier(ra, cluster, dests)
	e.action = ra

	rt := e.route_[:0]
	rt = appendBytes(rt, routeMatchF, rm)
	if name != "" {
		rt = appendString(rt, routeNameF, name)
	}
	rt = appendBytes(rt, routeRouteF, ra)
	e.route_ = rt
	return appendBytes(out, vhRoutes, rt), nil
}

// appendClusterSpecifier appends RouteAction's cluster (one destination)
// or weighted_clusters, as routeAction chooses.
func appendClusterSpecifier(ra []byte, cluster string, dests []weightedDest) []byte {
	if dests == nil {
		return appendString(ra, raCluster, cluster)
	}
	if len(dests) == 1 {
		return appendString(ra, raCluster, dests[0].name)
	}
	total := uint32(0)
	for _, d := range dests {
		total += d.weight
	}
	kept := 0
	last := ""
	size := 0
	for _, d := range dests {
		if total == 0 {
			d.weight = 1
		}
		if d.weight > 0 {
			kept++
			last = d.name
			size += protowire.SizeTag(wcClusters) + protowire.SizeBytes(clusterWeightSize(d.name, d.weight))
		}
	}
	if kept == 1 {
		return appendString(ra, raCluster, last)
	}
	ra = protowire.AppendTag(ra, raWeighted, protowire.BytesType)
	ra = protowire.AppendVarint(ra, uint64(size))
	for _, d := range dests {
		if total == 0 {
			d.weight = 1
		}
		if d.weight == 0 {
			continue
		}
		ra = protowire.AppendTag(ra, wcClusters, protowire.BytesType)
		ra = protowire.AppendVarint(ra, uint64(clusterWeightSize(d.name, d.weight)))
		ra = appendString(ra, cwName, d.name)
		ra = protowire.AppendTag(ra, cwWeight, protowire.BytesType)
		ra = protowire.AppendVarint(ra, uint64(protowire.SizeTag(wrapperValue)+protowire.SizeVarint(uint64(d.weight))))
		ra = protowire.AppendTag(ra, wrapperValue, protowire.VarintType)
		ra = protowire.AppendVarint(ra, uint64(d.weight))
	}
	return ra
}

func clusterWeightSize(name string, w uint32) int {
	return protowire.SizeTag(cwName) + protowire.SizeBytes(len(name)) +
		protowire.SizeTag(cwWeight) + protowire.SizeBytes(protowire.SizeTag(wrapperValue)+protowire.SizeVarint(uint64(w)))
}

// appendHeader appends one RouteMatch.headers element, as headerMatch
// builds it: the name (regular), then the string match (oneof).
func (e *vhEncoder) appendHeader(rm []byte, name string, sm *networking.StringMatch) []byte {
	s := e.tmp[:0]
	switch x := sm.GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		s = appendString(s, smExact, x.Exact)
	case *networking.StringMatch_Prefix:
		s = appendString(s, smPrefix, x.Prefix)
	case *networking.StringMatch_Regex:
		s = protowire.AppendTag(s, smSafeRegex, protowire.BytesType)
		s = protowire.AppendVarint(s, uint64(protowire.SizeTag(regexRegex)+protowire.SizeBytes(len(x.Regex))))
		s = appendString(s, regexRegex, x.Regex)
	}
	e.tmp = s
	h := e.header[:0]
	h = appendString(h, hmName, name)
	h = appendBytes(h, hmString, s)
	e.header = h
	return appendBytes(rm, rmHeaders, h)
}
