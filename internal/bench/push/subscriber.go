package push

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bits-and-blooms/bitset"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sextant-mesh/sextant/internal/xds"
)

// rawMsg receives a discovery response undecoded, or sends a request
// already encoded: the subscriber reads only what it needs (type, version,
// nonce, names) with protowire and writes its ACKs the same way, so that the
// bench's side of each stream stays small next to the server's.
type rawMsg struct {
	b []byte
	// skim (set before receiving): a state-of-the-world cluster or
	// listener list of skimBytes or more is skimmed (rawMsg.skim): b then
	// holds its other fields and skipped counts its resources.
	skim    bool
	skipped int
	size    int // the encoded response's bytes
}

// skimBytes: a list this large is skimmed rather than joined into one slice.
const skimBytes = 64 << 10

type rawCodec struct{ proto encoding.CodecV2 }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*rawMsg); ok {
		return mem.BufferSlice{mem.SliceBuffer(r.b)}, nil
	}
	return c.proto.Marshal(v)
}

func (c rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rawMsg); ok {
		r.size, r.skipped = data.Len(), 0
		if r.skim && r.size >= skimBytes {
			if err := r.skimFrom(data); err != nil {
				return err
			}
			if t, _ := sotwTypeURL(r.b); fullState(t) {
				return nil
			}
			r.skipped = 0 // names are read from these: joined after all
		}
		r.b = data.Materialize()
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

// skimFrom reads a response from gRPC's buffers without joining them: its
// resources (field 2) are counted and skipped, every other top-level field
// is copied into m.b as encoded. Joining each 240 KB cluster list into a
// new slice, and the garbage collection that caused, were 45% of the
// subscribers' process when lists were most of its work (issue 49): the
// bench's own cost, not the server's.
func (m *rawMsg) skimFrom(data mem.BufferSlice) error {
	rd := data.Reader()
	defer rd.Close()
	m.b = nil
	for rd.Remaining() > 0 {
		tag, err := binary.ReadUvarint(rd)
		if err != nil {
			return fmt.Errorf("bench: response: %w", err)
		}
		num, typ := protowire.Number(tag>>3), protowire.Type(tag&7)
		v, err := binary.ReadUvarint(rd)
		if err != nil {
			return fmt.Errorf("bench: response field %d: %w", num, err)
		}
		m.b = protowire.AppendTag(m.b, num, typ)
		switch typ {
		case protowire.VarintType:
			m.b = protowire.AppendVarint(m.b, v)
		case protowire.BytesType:
			if v > uint64(rd.Remaining()) {
				return fmt.Errorf("bench: response field %d: %d bytes, %d left", num, v, rd.Remaining())
			}
			if num == 2 {
				m.b = m.b[:len(m.b)-protowire.SizeTag(num)]
				m.skipped++
				if _, err := rd.Discard(int(v)); err != nil {
					return fmt.Errorf("bench: response field %d: %w", num, err)
				}
				continue
			}
			m.b = protowire.AppendVarint(m.b, v)
			at := len(m.b)
			m.b = append(m.b, make([]byte, v)...)
			if _, err := io.ReadFull(rd, m.b[at:]); err != nil {
				return fmt.Errorf("bench: response field %d: %w", num, err)
			}
		default:
			return fmt.Errorf("bench: response field %d of wire type %d", num, typ)
		}
	}
	return nil
}

// sotwTypeURL reads a DiscoveryResponse's type URL (field 4).
func sotwTypeURL(b []byte) ([]byte, error) {
	var url []byte
	err := field(b, func(num protowire.Number, v []byte) error {
		if num == 4 {
			url = v
		}
		return nil
	})
	return url, err
}

func (rawCodec) Name() string { return "proto" }

// response is what a subscriber reads of one response: views into the
// received bytes, so that reading allocates nothing per resource.
type response struct {
	typeURL, version, nonce []byte
	count                   int
	names                   [][]byte // resources (SotW: only when asked); delta removals are not kept
	versions                [][]byte // delta: per resource
}

// reset empties r, dropping its views so that the previous message's bytes
// (up to a megabyte during the initial sync) are not kept alive: entries
// past len are always zero.
func (r *response) reset() {
	clear(r.names)
	clear(r.versions)
	names, versions := r.names[:0], r.versions[:0]
	if cap(names) > 256 {
		// Grown by a sync chunk of thousands of resources: let it go
		// rather than keep ~200 KB per subscriber for changes of a few.
		names, versions = nil, nil
	}
	*r = response{names: names, versions: versions}
}

// Field numbers of the requests the subscriber sends, encoded by hand: an
// ACK is a type URL, a nonce and (state of the world) the version and "*".
const (
	reqVersionInfo   = 1 // DiscoveryRequest
	reqResourceNames = 3
	reqTypeURL       = 4
	reqNonce         = 5

	deltaReqTypeURL = 2 // DeltaDiscoveryRequest
	deltaReqNonce   = 6
)

// appendACK appends the ACK of r.
func appendACK(b []byte, delta bool, r *response) []byte {
	if delta {
		b = protowire.AppendTag(b, deltaReqTypeURL, protowire.BytesType)
		b = protowire.AppendBytes(b, r.typeURL)
		b = protowire.AppendTag(b, deltaReqNonce, protowire.BytesType)
		return protowire.AppendBytes(b, r.nonce)
	}
	b = protowire.AppendTag(b, reqVersionInfo, protowire.BytesType)
	b = protowire.AppendBytes(b, r.version)
	b = protowire.AppendTag(b, reqResourceNames, protowire.BytesType)
	b = protowire.AppendString(b, "*")
	b = protowire.AppendTag(b, reqTypeURL, protowire.BytesType)
	b = protowire.AppendBytes(b, r.typeURL)
	b = protowire.AppendTag(b, reqNonce, protowire.BytesType)
	return protowire.AppendBytes(b, r.nonce)
}

func field(b []byte, f func(num protowire.Number, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, v); err != nil {
			return err
		}
	}
	return nil
}

// resourceName reads field 1 (the name of a Cluster, Listener,
// RouteConfiguration; cluster_name of a ClusterLoadAssignment) of an Any's
// value.
func resourceName(anyMsg []byte) ([]byte, error) {
	var name []byte
	err := field(anyMsg, func(num protowire.Number, v []byte) error {
		if num == 2 {
			return field(v, func(num protowire.Number, v []byte) error {
				if num == 1 && name == nil {
					name = v
				}
				return nil
			})
		}
		return nil
	})
	return name, err
}

func parseSotW(r *response, b []byte, withNames bool) error {
	r.reset()
	return field(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			r.version = v
		case 2:
			r.count++
			if withNames {
				n, err := resourceName(v)
				if err != nil {
					return err
				}
				r.names = append(r.names, n)
			}
		case 4:
			r.typeURL = v
		case 5:
			r.nonce = v
		}
		return nil
	})
}

func parseDelta(r *response, b []byte) error {
	r.reset()
	return field(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			r.version = v
		case 2:
			r.count++
			var name, ver []byte
			if err := field(v, func(num protowire.Number, v []byte) error {
				switch num {
				case 1:
					ver = v
				case 3:
					name = v
				}
				return nil
			}); err != nil {
				return err
			}
			r.names = append(r.names, name)
			r.versions = append(r.versions, ver)
		case 4:
			r.typeURL = v
		case 5:
			r.nonce = v
		}
		return nil
	})
}

// revision reads the revision a version stands for: the engine's versions
// are a revision, possibly followed by "+" marks.
func revision(v []byte) int64 {
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

// typeOf is xds.TypeOf of a type URL's bytes.
func typeOf(url []byte) (xds.Type, bool) {
	for _, t := range types {
		if string(url) == t.URL() {
			return t, true
		}
	}
	return 0, false
}

var types = []xds.Type{xds.TypeCluster, xds.TypeEndpoint, xds.TypeListener, xds.TypeRoute}

// subscriber is one simulated data plane: its own connection, one ADS
// stream subscribing to everything, ACKing every response.
type subscriber struct {
	id     int
	delta  bool
	conn   *grpc.ClientConn
	t      *tracker
	counts [4]int // resources received per type until synced
	synced chan struct{}
	once   sync.Once
	rx     atomic.Int64 // bytes of the responses received
}

func dialSubscriber(addr string) (*grpc.ClientConn, error) {
	// Fixed windows, as Envoy's: no BDP pings after every response read
	// (grpc-go's default), and a bound on what a lagging subscriber buffers.
	// The clients share the process, and its CPU, with the server: on a
	// loaded machine a connection's goroutines may wait more than gRPC's
	// 20 s connect timeout to run, and the client then gave up dialling
	// ("i/o timeout", "error reading server preface") though the server
	// had answered; a generous timeout keeps those failures the bench's own
	// out of the figures (docs/perf/push.md).
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: 3 * time.Minute}),
		grpc.WithInitialWindowSize(4<<20), grpc.WithInitialConnWindowSize(4<<20),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{proto: encoding.GetCodecV2("proto")}), grpc.MaxCallRecvMsgSize(256<<20)))
}

// run subscribes and reads until ctx ends.
func (s *subscriber) run(ctx context.Context, want [4]int) error {
	desc := &grpc.StreamDesc{StreamName: "StreamAggregatedResources", ServerStreams: true, ClientStreams: true}
	method := "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
	if s.delta {
		desc.StreamName = "DeltaAggregatedResources"
		method = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
	}
	stream, err := s.conn.NewStream(ctx, desc, method)
	if err != nil {
		return err
	}
	node := &corev3.Node{Id: fmt.Sprintf("bench-%d", s.id), Cluster: "bench"}
	for i, t := range types {
		var req any
		if s.delta {
			req = &discoveryv3.DeltaDiscoveryRequest{TypeUrl: t.URL(), ResourceNamesSubscribe: []string{"*"}}
			if i == 0 {
				req.(*discoveryv3.DeltaDiscoveryRequest).Node = node
			}
		} else {
			req = &discoveryv3.DiscoveryRequest{TypeUrl: t.URL(), ResourceNames: []string{"*"}}
			if i == 0 {
				req.(*discoveryv3.DiscoveryRequest).Node = node
			}
		}
		if err := stream.SendMsg(req); err != nil {
			return err
		}
	}
	var r response
	for {
		r.reset() // before blocking: keep nothing of the last message
		m := rawMsg{skim: !s.delta}
		if err := stream.RecvMsg(&m); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		now := time.Now()
		s.rx.Add(int64(m.size))
		syncing := false
		select {
		case <-s.synced:
		default:
			syncing = true
		}
		if s.delta {
			err = parseDelta(&r, m.b)
		} else if err = parseSotW(&r, m.b, false); err == nil && !syncing && !fullState(r.typeURL) {
			err = parseSotW(&r, m.b, true)
		}
		r.count += m.skipped
		if err != nil {
			return fmt.Errorf("bench: subscriber %d: %w", s.id, err)
		}
		// A fresh buffer each time: gRPC may still read it after SendMsg
		// returns.
		ack := &rawMsg{b: appendACK(make([]byte, 0, 32+len(r.typeURL)+len(r.nonce)+len(r.version)), s.delta, &r)}
		if err := stream.SendMsg(ack); err != nil {
			return err
		}
		t, _ := typeOf(r.typeURL)
		if syncing {
			if fullState(r.typeURL) && !s.delta {
				s.counts[t] = r.count
			} else {
				s.counts[t] += r.count
			}
			if s.counts == want {
				s.once.Do(func() { close(s.synced) })
			}
			continue
		}
		s.t.received(s, t, &r, !s.delta && fullState(r.typeURL), now)
	}
}

func fullState(typeURL []byte) bool {
	return string(typeURL) == xds.TypeCluster.URL() || string(typeURL) == xds.TypeListener.URL()
}

// event is one change whose arrival at every subscriber is awaited.
type event struct {
	kind      int  // 0 endpoint, 1 config
	route     bool // config: a VirtualService's (routes); false: a DestinationRule's (clusters)
	during    bool // an endpoint change committed while a config change was on its way
	rev       int64
	at        time.Time
	remaining int
	got       bitset.BitSet // subscribers that have it
	// groupLeft counts, per group (the server a subscriber streams from),
	// the subscribers that do not have it yet; nil without groups.
	groupLeft []int
	// early: what subscribers received before the revision was known
	// (expectLater): the write's answer may come after its push.
	early []sighting
}

// unknownRev is an event's revision until resolve: no version reaches it.
const unknownRev = int64(1<<63 - 1)

type sighting struct {
	sub int
	rev int64
	at  time.Time
}

// tracker matches what subscribers receive with the changes committed.
type tracker struct {
	mu     sync.Mutex
	subs   int
	active [4]map[string][]*event
	perSub [2][]time.Duration // endpoint, config: every (event, subscriber) latency
	all    [2][]time.Duration // endpoint, config: per event, the last subscriber's
	open   int
	// Endpoint changes committed while a config change had not reached
	// every subscriber yet (configOpen > 0): their latencies again.
	configOpen              int
	duringAll, duringPerSub []time.Duration
	// Config changes by kind, per event the last subscriber's latency:
	// DestinationRule (a cluster list) and VirtualService (routes).
	drAll, vsAll []time.Duration
	// groups maps a subscriber to its group (the server it streams from,
	// in bench push --servers); groupAll[g] is, per endpoint event, the
	// last subscriber of group g's latency, groupPerSub[g] every one.
	groups      []int
	groupAll    [][]time.Duration
	groupPerSub [][]time.Duration
}

func newTracker(subs int) *tracker {
	t := &tracker{subs: subs}
	for i := range t.active {
		t.active[i] = map[string][]*event{}
	}
	return t
}

// group puts subscriber i in group groups[i], of n groups.
func (t *tracker) group(groups []int, n int) {
	t.groups = groups
	t.groupAll = make([][]time.Duration, n)
	t.groupPerSub = make([][]time.Duration, n)
}

func (t *tracker) newEvent(kind int, rev int64, at time.Time) *event {
	e := &event{kind: kind, rev: rev, at: at, remaining: t.subs, during: kind == 0 && t.configOpen > 0}
	if t.groups != nil {
		e.groupLeft = make([]int, len(t.groupAll))
		for _, g := range t.groups {
			e.groupLeft[g]++
		}
	}
	return e
}

// expectLater registers a change about to be written whose revision is
// known only from the write's answer (resolve): an HTTP write to a server.
func (t *tracker) expectLater(kind int, typ xds.Type, name string, at time.Time) *event {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.newEvent(kind, unknownRev, at)
	e.route = kind == 1 && typ == xds.TypeRoute
	t.active[typ][name] = append(t.active[typ][name], e)
	t.open++
	if kind == 1 {
		t.configOpen++
	}
	return e
}

// resolve gives e its revision, crediting the subscribers that received
// it before the write's answer came.
func (t *tracker) resolve(typ xds.Type, name string, e *event, rev int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e.rev = rev
	for _, s := range e.early {
		if s.rev >= rev && !e.got.Test(uint(s.sub)) {
			t.credit(e, s.sub, s.at)
		}
	}
	e.early = nil
	if e.remaining == 0 {
		evs := slices.DeleteFunc(t.active[typ][name], func(x *event) bool { return x == e })
		if len(evs) == 0 {
			delete(t.active[typ], name)
		} else {
			t.active[typ][name] = evs
		}
	}
}

// credit records that subscriber sub received e at now; it reports whether
// every subscriber has it. Called with t.mu held.
func (t *tracker) credit(e *event, sub int, now time.Time) bool {
	e.got.Set(uint(sub))
	lat := now.Sub(e.at)
	t.perSub[e.kind] = append(t.perSub[e.kind], lat)
	if e.during {
		t.duringPerSub = append(t.duringPerSub, lat)
	}
	if e.groupLeft != nil && e.kind == 0 { // per server: endpoint changes
		g := t.groups[sub]
		t.groupPerSub[g] = append(t.groupPerSub[g], lat)
		if e.groupLeft[g]--; e.groupLeft[g] == 0 {
			t.groupAll[g] = append(t.groupAll[g], lat)
		}
	}
	if e.remaining--; e.remaining > 0 {
		return false
	}
	t.all[e.kind] = append(t.all[e.kind], lat)
	if e.during {
		t.duringAll = append(t.duringAll, lat)
	}
	if e.kind == 1 {
		t.configOpen--
		if e.route {
			t.vsAll = append(t.vsAll, lat)
		} else {
			t.drAll = append(t.drAll, lat)
		}
	}
	t.open--
	return true
}

// expect registers a change before it is committed at rev.
func (t *tracker) expect(kind int, typ xds.Type, name string, rev int64, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.newEvent(kind, rev, at)
	e.route = kind == 1 && typ == xds.TypeRoute
	t.active[typ][name] = append(t.active[typ][name], e)
	t.open++
	if kind == 1 {
		t.configOpen++
	}
}

// configPending reports whether a config change has not reached every
// subscriber yet.
func (t *tracker) configPending() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.configOpen > 0
}

func (t *tracker) received(s *subscriber, typ xds.Type, r *response, full bool, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	active := t.active[typ]
	if len(active) == 0 {
		return
	}
	see := func(name []byte, v int64) {
		evs := active[string(name)]
		if len(evs) == 0 {
			return
		}
		kept := evs[:0]
		for _, e := range evs {
			if e.rev == unknownRev {
				e.early = append(e.early, sighting{sub: s.id, rev: v, at: now})
			} else if e.rev <= v && !e.got.Test(uint(s.id)) && t.credit(e, s.id, now) {
				continue
			}
			kept = append(kept, e)
		}
		if len(kept) == 0 {
			delete(active, string(name))
		} else {
			active[string(name)] = kept
		}
	}
	switch {
	case full:
		v := revision(r.version)
		for name := range active {
			see([]byte(name), v)
		}
	case r.versions != nil:
		for i, name := range r.names {
			see(name, revision(r.versions[i]))
		}
	default:
		v := revision(r.version)
		for _, name := range r.names {
			see(name, v)
		}
	}
}

func (t *tracker) pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.open
}

var errNotSynced = errors.New("bench: subscribers did not receive every resource in time")
