package xds

import (
	"strconv"
	"sync"
	"time"

	"github.com/bits-and-blooms/bitset"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sextant-mesh/sextant/internal/config"
	topo "github.com/sextant-mesh/sextant/internal/locality"
)

// maxResponseBytes bounds one response of a type that may be split
// (endpoints, routes, and every delta response); grpc-go's default receive
// limit is 4 MiB.
const maxResponseBytes = 1 << 20

// defaultAckWait is how long a type's next response waits for the client to
// answer (ACK or NACK) the previous one. Waiting is what coalesces: changes made
// meanwhile go out together in one response when the answer comes, so a
// client that falls behind gets fewer, larger responses instead of a queue
// of small ones in gRPC's buffers. Envoy and grpc-go answer every response;
// a client that never answers still gets one response per wait.
const defaultAckWait = time.Second

// subscriber is one ADS stream. Its pending sets are its queue: bounded by
// the number of resources, each change coalesced to "send the current
// version of id", so a subscriber that stops reading costs one bit per
// changed resource and catches up with the latest versions when it reads
// again. The engine only sets bits (notify); the stream's send goroutine
// builds and sends responses.
//
// Lock order: subscriber.mu, then a typeCache's mu.
type subscriber struct {
	c     *Cache
	id    uint64
	node  string
	clust string
	ns    string
	addr  string
	since time.Time
	delta bool
	wake  chan struct{} // capacity 1: "something is pending"

	flavour Flavour // which variant of each resource the node gets
	// locality is where the node says it runs: its EDS priorities are
	// Istio's from there (localityeds.go).
	locality topo.Locality
	source   nodeSource // labels and namespace, for routes by source (sourcematch.go)
	// scope is what the node's Sidecar imports (nil: everything), from
	// sidecars; guarded by mu (sidecarscope.go).
	scope    *config.SidecarScope
	sidecars *config.Sidecars
	// proxyHash is the hash of the scoped proxy route configuration last
	// built: a change of it that leaves the scope's part alone is not sent.
	proxyHash uint64
	ackWait   time.Duration // ServerOptions.AckWait
	secrets   SecretAccess  // nil: every secret allowed (secretacl.go)

	mu    sync.Mutex
	nonce uint64
	now   time.Time // when the response being built was asked for
	// msg and hdr are reused by each response the send goroutine builds,
	// once the previous one's SendMsg has returned (see newMsg, header).
	msg wireMsg
	hdr []byte
	t   [numTypes]subType
	// epQueued: counted in the cache's epWaiting (an endpoint change to
	// send, which other subscribers' config responses give way to). A
	// subscriber whose send loop is in the middle of a send (sending) is
	// not counted: it may be blocked on a client that reads nothing, and
	// the others would wait for it.
	epQueued bool
	sending  bool
	// sentSecrets are the secrets of the response being built, reported
	// once it is sent; withheld, the secrets it wanted and was refused
	// (secretacl.go).
	sentSecrets []sentSecret
	withheld    bitset.BitSet
	// The node's workload certificate (workload.go): its service account,
	// and once it names "default", the cache key and id it stands for.
	wlSA  string
	wlKey string
	wlID  uint32

	// Guarded by the server's turns.mu: a turn granted while waiting in
	// line, in line, stream ended.
	granted      *turn
	inLine, gone bool
}

type subType struct {
	requested bool
	wildcard  bool
	subs      bitset.BitSet // ids named explicitly
	pending   bitset.BitSet // ids to (re)send
	dirty     bool          // pending may hold bits; false: it is empty (spares scanning it)
	missing   bitset.BitSet // delta: named ids to report as absent once
	after     bitset.BitSet // endpoints: to resend once their clusters are sent
	releasing bitset.BitSet // endpoints: to resend when the cluster response in flight is sent
	full      bool          // state of the world, clusters and listeners: resend everything
	sent      []uint64      // delta: seq of the version the client holds, by id (0: none)
	origin    time.Time     // commit time of the oldest change not yet sent
	awaiting  string        // nonce of the last response until the client answers it
	awaitAt   time.Time     // when that response was built
	// unsentFrom (clusters only) is the seq of the oldest cluster
	// addition not yet sent to the client, 1 when the whole list is due (a
	// new subscription), 0 when none is: routes and listeners published
	// after it may name those clusters and wait until they have gone (make
	// before break).
	unsentFrom uint64

	inflight     [8]inflight // last responses, by nonce, awaiting ACK
	next         int
	versionSent  string
	versionAcked string
	sentAt       time.Time
	ackedAt      time.Time
	responses    uint64
	nacks        []NACK
	// turn is held by the last large response until the client answers
	// it (turns); nil: none.
	turn *turn
}

type inflight struct {
	nonce    string
	version  string
	origin   time.Time
	answered bool // a later request carrying the nonce again is no new answer
}

// NACK is a response a client rejected.
type NACK struct {
	At      time.Time `json:"at"`
	Version string    `json:"version"`
	Nonce   string    `json:"nonce"`
	Message string    `json:"message"`
}

const maxNACKs = 8

func (st *subType) wants(id uint32, hidden bool) bool {
	return (st.wildcard && !hidden) || st.subs.Test(uint(id))
}

// notify marks changed resources pending. Called by Cache.Apply from the
// engine's goroutines; it never blocks.
func (s *subscriber) notify(t Type, changed []change, origin time.Time) {
	s.mu.Lock()
	any := false
	st := &s.t[t]
	se := &s.t[TypeEndpoint]
	if st.requested {
		for _, ch := range changed {
			if !st.wants(ch.id, ch.hidden) || !s.admits(t, ch.name) || s.sameScoped(t, ch) {
				continue
			}
			st.pending.Set(uint(ch.id))
			st.dirty = true
			any = true
			// Only a cluster the client may not have yet holds routes and
			// listeners back: one it has at an older version is named
			// safely. Holding them behind every cluster change tied each
			// VirtualService change to the next state-of-the-world cluster
			// list, which waits for its turn (issue 49: under a
			// DestinationRule change every 200 ms, as slow as those).
			if t == TypeCluster && ch.added && (st.unsentFrom == 0 || ch.seq < st.unsentFrom) {
				st.unsentFrom = ch.seq
			}
			// The cluster's endpoints go again once the cluster is sent.
			if ch.eds != noEDS && se.requested && se.wants(ch.eds, false) {
				se.after.Set(uint(ch.eds))
				if int(ch.eds) < len(se.sent) {
					se.sent[ch.eds] = 0
				}
			}
		}
		if any && st.origin.IsZero() {
			st.origin = origin
		}
		if any && t == TypeEndpoint && !s.epQueued && !s.sending {
			s.epQueued = true
			s.c.endpointQueued()
		}
	}
	s.mu.Unlock()
	if any {
		s.poke()
	}
}

// endpointsServed uncounts s from the subscribers with an endpoint change
// to send: its send loop has sent them, or they wait for the client's
// answer.
func (s *subscriber) endpointsServed() {
	s.mu.Lock()
	if s.epQueued {
		s.epQueued = false
		s.c.endpointServed()
	}
	s.mu.Unlock()
}

// endpointQueued reports whether s has an endpoint change to send.
func (s *subscriber) endpointQueued() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epQueued
}

// ready reports whether type t has a response to build now (it may still
// turn out empty), and the commit time of its oldest change not yet sent
// (zero: unknown, or a new subscription).
func (s *subscriber) ready(t Type, now time.Time) (bool, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.t[t]
	return st.requested && !st.gated(now, s.ackWait) && (st.full || st.dirty), st.origin
}

// bigFull reports whether type t's next response is a state-of-the-world
// list of turnBytes or more: it waits for its turn (turns) before it is
// built.
func (s *subscriber) bigFull(t Type, now time.Time) bool {
	if s.delta || (t != TypeCluster && t != TypeListener) {
		return false
	}
	s.mu.Lock()
	st := &s.t[t]
	ready := st.wildcard && st.requested && !st.gated(now, s.ackWait) && (st.full || st.dirty)
	s.mu.Unlock()
	if !ready {
		return false
	}
	tc := s.c.types[t]
	tc.mu.RLock()
	n := len(tc.full(s.flavour).body)
	tc.mu.RUnlock()
	return n >= turnBytes
}

// clustersSent releases the endpoints held back until their clusters were
// sent.
func (s *subscriber) clustersSent() {
	s.mu.Lock()
	se := &s.t[TypeEndpoint]
	if se.releasing.Any() {
		se.pending.InPlaceUnion(&se.releasing)
		se.releasing.ClearAll()
		se.dirty = true
	}
	s.mu.Unlock()
}

func (s *subscriber) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// response is one built response and what to remember about it.
type response struct {
	t       Type
	msg     *wireMsg
	nonce   string
	version string
	origin  time.Time
	count   int
}

func (s *subscriber) nextNonce() string {
	s.nonce++
	return strconv.FormatUint(s.nonce, 36)
}

// build returns the next response to send for type t, if any. Called by
// the stream's send goroutine with s.mu held.
func (s *subscriber) build(t Type, now time.Time) (response, bool) {
	st := &s.t[t]
	if !st.requested || st.gated(now, s.ackWait) || (!st.full && !st.dirty) {
		return response{}, false
	}
	if t == TypeCluster {
		// Endpoints held back for the clusters about to be built go once
		// this response is sent (clustersSent); later ones wait for the next.
		defer func() {
			se := &s.t[TypeEndpoint]
			se.releasing.InPlaceUnion(&se.after)
			se.after.ClearAll()
		}()
	}
	s.now = now
	var r response
	var ok bool
	switch {
	case s.delta:
		r, ok = s.buildDelta(t, st)
	case t == TypeCluster || t == TypeListener:
		r, ok = s.buildFull(t, st)
	default:
		r, ok = s.buildPartial(t, st)
	}
	if t == TypeCluster && !st.full && !st.pending.Any() {
		st.unsentFrom = 0 // every cluster change is in this response
	}
	return r, ok
}

// heldFrom returns the seq from which resources of type t wait for the
// clusters not yet sent (0: none wait). Routes and listeners name
// clusters: one published after a cluster change may name that cluster,
// and a client must have the cluster first (grpc-go fails calls routed to
// a cluster it does not know; Envoy drops them). Called with s.mu held.
func (s *subscriber) heldFrom(t Type) uint64 {
	if t != TypeRoute && t != TypeListener {
		return 0
	}
	return s.t[TypeCluster].unsentFrom
}

// buildFull: clusters and listeners in state of the world go whole, as the
// protocol requires; a wildcard subscriber gets the shared encoding.
func (s *subscriber) buildFull(t Type, st *subType) (response, bool) {
	if !st.full && !st.pending.Any() {
		st.dirty = false
		return response{}, false
	}
	tc := s.c.types[t]
	if h := s.heldFrom(t); h != 0 {
		tc.mu.RLock()
		last := tc.lastSeq
		tc.mu.RUnlock()
		if last >= h {
			return response{}, false // the whole list waits for the clusters
		}
	}
	st.full = false
	st.pending.ClearAll()
	st.dirty = false
	r := response{t: t, msg: s.newMsg(), nonce: s.nextNonce(), origin: st.origin}
	st.origin = time.Time{}
	tc.mu.RLock()
	r.version = tc.version
	if st.wildcard {
		m := s.fullBody(tc)
		r.msg.add(m.body)
		r.count = m.count
	}
	for id, ok := st.subs.NextSet(0); ok; id, ok = st.subs.NextSet(id + 1) {
		if int(id) < len(tc.entries) {
			if e := s.view(t, tc.entries[id]); e != nil && !(st.wildcard && !e.hidden) {
				r.msg.add(e.anyField)
				r.count++
			}
		}
	}
	tc.mu.RUnlock()
	s.header(&r, respVersionInfo, respTypeURL, respNonce)
	return r, true
}

// buildPartial: routes and endpoints in state of the world go as the
// changed ones only, split at maxResponseBytes.
func (s *subscriber) buildPartial(t Type, st *subType) (response, bool) {
	if !st.pending.Any() {
		st.dirty = false
		return response{}, false
	}
	tc := s.c.types[t]
	r := response{t: t, msg: s.newMsg()}
	var maxSeq uint64
	hold := s.heldFrom(t)
	var held []uint
	tc.mu.RLock()
	id, ok := st.pending.NextSet(0)
	for ; ok && r.msg.size < maxResponseBytes; id, ok = st.pending.NextSet(id + 1) {
		st.pending.Clear(id)
		if int(id) >= len(tc.entries) {
			continue
		}
		if e := s.view(t, tc.entries[id]); e != nil && st.wants(uint32(id), e.hidden) && s.secretAllowed(tc, uint32(id)) {
			if hold != 0 && e.seq >= hold {
				held = append(held, id)
				continue
			}
			r.msg.add(e.anyField)
			s.noteSecret(tc, e)
			r.count++
			if e.seq > maxSeq {
				maxSeq, r.version = e.seq, e.version
			}
		}
	}
	tc.mu.RUnlock()
	for _, id := range held {
		st.pending.Set(id)
	}
	r.origin = st.origin
	if st.dirty = st.pending.Any(); !st.dirty {
		st.origin = time.Time{}
	}
	if r.count == 0 {
		return response{}, false
	}
	r.nonce = s.nextNonce()
	s.header(&r, respVersionInfo, respTypeURL, respNonce)
	return r, true
}

// buildDelta sends what changed since what the client holds: new versions,
// and removals of resources it holds that are gone.
func (s *subscriber) buildDelta(t Type, st *subType) (response, bool) {
	if !st.pending.Any() {
		st.dirty = false
		return response{}, false
	}
	tc := s.c.types[t]
	r := response{t: t, msg: s.newMsg()}
	var removed []byte
	hold := s.heldFrom(t)
	var held []uint
	tc.mu.RLock()
	if len(st.sent) < len(tc.entries) {
		st.sent = append(st.sent, make([]uint64, len(tc.entries)-len(st.sent))...)
	}
	id, ok := st.pending.NextSet(0)
	for ; ok && r.msg.size+len(removed) < maxResponseBytes; id, ok = st.pending.NextSet(id + 1) {
		st.pending.Clear(id)
		if int(id) >= len(tc.entries) {
			continue
		}
		e := s.view(t, tc.entries[id])
		switch {
		case e != nil && hold != 0 && e.seq >= hold && st.wants(uint32(id), e.hidden) && st.sent[id] != e.seq:
			held = append(held, id) // waits for the clusters
			continue
		case e != nil && st.wants(uint32(id), e.hidden) && s.secretAllowed(tc, uint32(id)):
			if st.sent[id] != e.seq {
				r.msg.add(e.resField)
				s.noteSecret(tc, e)
				st.sent[id] = e.seq
				r.count++
			}
		case st.sent[id] != 0:
			removed = appendString(removed, deltaRemoved, tc.names[id])
			st.sent[id] = 0
			r.count++
		case st.missing.Test(id):
			// Named but absent: say so once, so the client need not wait.
			removed = appendString(removed, deltaRemoved, tc.names[id])
			r.count++
		}
		st.missing.Clear(id)
	}
	r.version = tc.version
	tc.mu.RUnlock()
	for _, id := range held {
		st.pending.Set(id)
	}
	r.origin = st.origin
	if st.dirty = st.pending.Any(); !st.dirty {
		st.origin = time.Time{}
	}
	if r.count == 0 {
		return response{}, false
	}
	r.msg.add(removed)
	r.nonce = s.nextNonce()
	s.header(&r, deltaSystemVersion, deltaTypeURL, deltaNonce)
	return r, true
}

// newMsg returns s.msg emptied, for the next response: the previous one's
// SendMsg has returned, and gRPC keeps no reference to the parts list (a
// small response was copied; a large one's parts are referenced one by
// one), and sendOne has cleared it. A list grown by a large response is
// let go rather than kept per subscriber.
func (s *subscriber) newMsg() *wireMsg {
	m := &s.msg
	if cap(m.bufs) > maxKeptParts {
		m.bufs = nil
	}
	if m.bufs == nil {
		m.bufs = make([][]byte, 0, 8)
	}
	m.bufs, m.size = append(m.bufs[:0], nil), 0 // bufs[0]: the header, written last
	return m
}

// maxKeptParts bounds the parts list kept between responses.
const maxKeptParts = 64

// header puts version, type URL and nonce in front of the resources, and
// records the response as in flight. A small response's header is built
// in s.hdr, which codec.Marshal copies before SendMsg returns; a large
// one's is referenced until gRPC has written it, so it gets its own.
func (s *subscriber) header(r *response, versionField, typeField, nonceField protowire.Number) {
	n := 32 + len(r.version) + len(r.t.URL())
	small := r.msg.size+n <= flatMax
	h := s.hdr[:0]
	if !small {
		h = make([]byte, 0, n)
	}
	h = appendString(h, versionField, r.version)
	h = appendString(h, typeField, r.t.URL())
	h = appendString(h, nonceField, r.nonce)
	if small {
		s.hdr = h
	}
	r.msg.bufs[0] = h // reserved by newMsg
	r.msg.size += len(h)
	st := &s.t[r.t]
	st.inflight[st.next%len(st.inflight)] = inflight{nonce: r.nonce, version: r.version, origin: r.origin}
	st.next++
	st.versionSent = r.version
	st.sentAt = s.now
	st.awaiting, st.awaitAt = r.nonce, s.now
	st.responses++
}

// gated reports whether the type's next response waits for the client's
// answer to the previous one.
func (st *subType) gated(now time.Time, wait time.Duration) bool {
	return st.awaiting != "" && now.Sub(st.awaitAt) < wait
}

// retryAt returns when a type with work waiting for an answer may send
// without it, after a send round that began at start. A type whose wait
// had ended by then was not held by it in that round (it waits for a turn,
// or for clusters, and is woken when that comes): a timer for it would fire
// at once, again and again, and spin the send goroutine while a client is
// slow to answer. Called by the send goroutine.
func (s *subscriber) retryAt(start time.Time) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var at time.Time
	for t := range s.t {
		st := &s.t[t]
		if st.requested && st.awaiting != "" && (st.full || st.dirty) {
			d := st.awaitAt.Add(s.ackWait)
			if !d.After(start) {
				continue
			}
			if at.IsZero() || d.Before(at) {
				at = d
			}
		}
	}
	return at, !at.IsZero()
}

// ack records the client's answer to the response with nonce. It returns
// the in-flight record and whether it was found.
func (st *subType) ack(nonce string, errMsg *string, now time.Time) (inflight, bool) {
	if nonce != "" && nonce == st.awaiting {
		st.awaiting = "" // answered: the next response may go
	}
	for i := range st.inflight {
		f := &st.inflight[i]
		if f.nonce != nonce || nonce == "" || f.answered {
			continue
		}
		f.answered = true
		if errMsg != nil {
			if len(st.nacks) == maxNACKs {
				st.nacks = st.nacks[1:]
			}
			st.nacks = append(st.nacks, NACK{At: now, Version: f.version, Nonce: nonce, Message: *errMsg})
		} else {
			st.versionAcked = f.version
			st.ackedAt = now
		}
		return *f, true
	}
	return inflight{}, false
}
