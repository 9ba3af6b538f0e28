package kubepush

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"
)

// The subscriber is a state-of-the-world ADS client that follows the flow
// of an Envoy sidecar (CDS and LDS by wildcard, then EDS for the clusters
// CDS named and RDS for the route configurations the listeners named) and
// reads what it needs of each response with protowire: it cannot tell a
// change by the server's version (istiod's are not Sextant's revisions), so
// it looks at the content, the same way for both control planes.

const (
	typeCluster  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	typeEndpoint = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	typeListener = "type.googleapis.com/envoy.config.listener.v3.Listener"
	typeRoute    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	typeHCM      = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)

// rawMsg is a response received undecoded.
type rawMsg struct{ b []byte }

type rawCodec struct{ proto encoding.CodecV2 }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rawMsg); ok {
		r.b = data.Materialize()
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

func (rawCodec) Name() string { return "proto" }

func dial(addr string) (*grpc.ClientConn, error) {
	// A generous connect timeout: on a loaded machine the client's
	// goroutines may wait longer than gRPC's 20 s to run.
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: 3 * time.Minute}),
		grpc.WithInitialWindowSize(4<<20), grpc.WithInitialConnWindowSize(4<<20),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{proto: encoding.GetCodecV2("proto")}), grpc.MaxCallRecvMsgSize(256<<20)))
}

// node is subscriber i as an Istio sidecar in namespace ns: the ID and
// metadata istiod needs (type~IP~pod.namespace~domain, NAMESPACE,
// CLUSTER_ID, ISTIO_VERSION); Sextant takes any node.
func node(i int, ns string) *corev3.Node {
	md, _ := structpb.NewStruct(map[string]any{
		"NAMESPACE":         ns,
		"CLUSTER_ID":        "Kubernetes",
		"ISTIO_VERSION":     "1.31.0",
		"INTERCEPTION_MODE": "REDIRECT",
		"LABELS":            map[string]any{"app": "bench-subscriber"},
		"WORKLOAD_NAME":     "bench-subscriber",
		"SERVICE_ACCOUNT":   "default",
	})
	ip := fmt.Sprintf("10.250.%d.%d", i>>8&255, i&255)
	return &corev3.Node{
		Id:       fmt.Sprintf("sidecar~%s~sub-%d.%s~%s.svc.cluster.local", ip, i, ns, ns),
		Cluster:  "bench-subscriber." + ns,
		Metadata: md,
	}
}

// field calls f for each length-delimited field of b, and g (when not nil)
// for each varint.
func field(b []byte, f func(num protowire.Number, v []byte) error, g func(num protowire.Number, v uint64)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		switch typ {
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			if f != nil {
				if err := f(num, v); err != nil {
					return err
				}
			}
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			if g != nil {
				g(num, v)
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return nil
}

// sub reads the length-delimited fields at path (field numbers, outermost
// first) of b and calls f with each.
func sub(b []byte, f func(v []byte) error, path ...protowire.Number) error {
	if len(path) == 0 {
		return f(b)
	}
	return field(b, func(num protowire.Number, v []byte) error {
		if num == path[0] {
			return sub(v, f, path[1:]...)
		}
		return nil
	}, nil)
}

// response is what the subscriber reads of a DiscoveryResponse.
type response struct {
	version, typeURL, nonce string
	resources               [][]byte // the Any values
	raw                     []byte
}

func parseResponse(b []byte) (*response, error) {
	r := &response{raw: b}
	err := field(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			r.version = string(v)
		case 2:
			return sub(v, func(v []byte) error { r.resources = append(r.resources, v); return nil }, 2)
		case 4:
			r.typeURL = string(v)
		case 5:
			r.nonce = string(v)
		}
		return nil
	}, nil)
	return r, err
}

// cluster is what the subscriber reads of a Cluster.
type cluster struct {
	name, edsName string
	eds           bool
	consecutive5x uint32 // outlier_detection.consecutive_5xx; 0: none
}

func parseCluster(b []byte) (c cluster, err error) {
	err = field(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			c.name = string(v)
		case 3: // eds_cluster_config
			return field(v, func(num protowire.Number, v []byte) error {
				if num == 2 {
					c.edsName = string(v)
				}
				return nil
			}, nil)
		case 19: // outlier_detection
			return sub(v, func(v []byte) error {
				return field(v, nil, func(num protowire.Number, x uint64) {
					if num == 1 {
						c.consecutive5x = uint32(x)
					}
				})
			}, 1)
		}
		return nil
	}, func(num protowire.Number, x uint64) {
		if num == 2 && x == 3 { // type: EDS
			c.eds = true
		}
	})
	if c.edsName == "" {
		c.edsName = c.name
	}
	return c, err
}

// routeNames are the RDS route configuration names a Listener's HTTP
// connection managers name (filter chains, the default one, an API
// listener).
func routeNames(b []byte, into map[string]bool) error {
	hcm := func(anyMsg []byte) error {
		var typ string
		var val []byte
		_ = field(anyMsg, func(num protowire.Number, v []byte) error {
			switch num {
			case 1:
				typ = string(v)
			case 2:
				val = v
			}
			return nil
		}, nil)
		if typ != typeHCM {
			return nil
		}
		return sub(val, func(v []byte) error { into[string(v)] = true; return nil }, 3, 2)
	}
	for _, path := range [][]protowire.Number{{3, 3, 4}, {25, 3, 4}, {19, 1}} {
		if err := sub(b, hcm, path...); err != nil {
			return err
		}
	}
	return nil
}

// claAddresses calls f with each endpoint address of a
// ClusterLoadAssignment: endpoints, lb_endpoints, endpoint, address,
// socket_address, address.
func claAddresses(b []byte, f func(addr []byte)) error {
	return sub(b, func(v []byte) error { f(v); return nil }, 2, 2, 1, 1, 1, 2)
}

func claName(b []byte) string {
	var name string
	_ = field(b, func(num protowire.Number, v []byte) error {
		if num == 1 && name == "" {
			name = string(v)
		}
		return nil
	}, nil)
	return name
}

// subscriber is one ADS stream.
type subscriber struct {
	id     int
	ns     string
	conn   *grpc.ClientConn
	t      *tracker
	synced chan struct{}
	// Until synced: the expected endpoint count, and what has come.
	wantAddrs int
	responses atomic.Uint64 // responses read
}

// run subscribes and reads until ctx ends. Until synced, a stream refused
// or broken (istiod limits new streams to PILOT_MAX_REQUESTS_PER_SECOND, 25
// by default, and refuses those that wait too long) starts again after a
// pause, as Envoy does; after, an error ends the subscriber.
func (s *subscriber) run(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		err := s.stream(ctx)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		select {
		case <-s.synced:
			return err
		default:
		}
		if c := status.Code(err); (c != codes.ResourceExhausted && c != codes.Unavailable) || attempt >= 100 {
			return err
		}
		if err := sleep(ctx, time.Duration(200+rand.IntN(800))*time.Millisecond); err != nil {
			return nil
		}
	}
}

// stream runs one ADS stream.
func (s *subscriber) stream(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	desc := &grpc.StreamDesc{StreamName: "StreamAggregatedResources", ServerStreams: true, ClientStreams: true}
	stream, err := s.conn.NewStream(ctx, desc, "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources")
	if err != nil {
		return err
	}
	nd := node(s.id, s.ns)
	send := func(typ, version, nonce string, names []string) error {
		req := &discoveryv3.DiscoveryRequest{VersionInfo: version, TypeUrl: typ, ResponseNonce: nonce, ResourceNames: names}
		if nd != nil {
			req.Node, nd = nd, nil // the first request carries the node
		}
		return stream.SendMsg(req)
	}
	if err := send(typeCluster, "", "", nil); err != nil {
		return err
	}
	if err := send(typeListener, "", "", nil); err != nil {
		return err
	}
	var (
		edsNames, rdsNames []string
		version            = map[string]string{}
		nonce              = map[string]string{}
		got                = map[string]map[string]bool{typeEndpoint: {}, typeRoute: {}}
		addrs              = map[string][]string{} // until synced: cluster -> addresses
		synced             bool
		haveCDS, haveLDS   bool
	)
	// request re-sends a non-wildcard type's names when they changed.
	request := func(typ string, old *[]string, names []string) error {
		slices.Sort(names)
		if slices.Equal(*old, names) {
			return nil
		}
		*old = names
		return send(typ, version[typ], nonce[typ], names)
	}
	for {
		var m rawMsg
		if err := stream.RecvMsg(&m); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		at := time.Now()
		r, err := parseResponse(m.b)
		if err != nil {
			return fmt.Errorf("kubepush: a response: %w", err)
		}
		s.responses.Add(1)
		version[r.typeURL], nonce[r.typeURL] = r.version, r.nonce
		var names []string
		switch r.typeURL {
		case typeCluster:
			haveCDS = true
			var eds []string
			cs := make([]cluster, 0, len(r.resources))
			for _, b := range r.resources {
				c, err := parseCluster(b)
				if err != nil {
					return fmt.Errorf("kubepush: a cluster: %w", err)
				}
				cs = append(cs, c)
				if c.eds {
					eds = append(eds, c.edsName)
				}
			}
			s.t.clusters(s.id, at, cs)
			if err := send(r.typeURL, r.version, r.nonce, nil); err != nil {
				return err
			}
			if err := request(typeEndpoint, &edsNames, eds); err != nil {
				return err
			}
			continue
		case typeListener:
			haveLDS = true
			rds := map[string]bool{}
			for _, b := range r.resources {
				if err := routeNames(b, rds); err != nil {
					return fmt.Errorf("kubepush: a listener: %w", err)
				}
			}
			if err := send(r.typeURL, r.version, r.nonce, nil); err != nil {
				return err
			}
			for n := range rds {
				names = append(names, n)
			}
			if err := request(typeRoute, &rdsNames, names); err != nil {
				return err
			}
			continue
		case typeEndpoint:
			for _, b := range r.resources {
				name := claName(b)
				got[typeEndpoint][name] = true
				if !synced {
					var a []string
					_ = claAddresses(b, func(v []byte) { a = append(a, string(v)) })
					addrs[name] = a
				}
			}
			s.t.endpoints(s.id, at, r.resources)
			names = edsNames
		case typeRoute:
			for _, b := range r.resources {
				got[typeRoute][claName(b)] = true
			}
			s.t.routes(s.id, at, r.raw)
			names = rdsNames
		}
		if err := send(r.typeURL, r.version, r.nonce, names); err != nil {
			return err
		}
		// Synced: every route configuration and every endpoint address
		// had. Not every EDS name: Sextant answers none for a whole-service
		// cluster (bench/svc-0000) beside its subsets' (docs/perf/push.md).
		if !synced && haveCDS && haveLDS && all(got[typeRoute], rdsNames) {
			distinct := map[string]bool{}
			for _, a := range addrs {
				for _, x := range a {
					distinct[x] = true
				}
			}
			if len(distinct) >= s.wantAddrs {
				synced, addrs = true, nil
				close(s.synced)
			}
		}
	}
}

func all(got map[string]bool, names []string) bool {
	for _, n := range names {
		if !got[n] {
			return false
		}
	}
	return true
}

// Kinds of change.
const (
	kindEndpoint = iota
	kindVirtualService
	kindDestinationRule
)

// change is one write whose arrival the subscribers look for.
type change struct {
	kind  int
	svc   string // service name, as in cluster names (svc-0001)
	color string // endpoint: the subset
	addr  []byte // endpoint: the address
	up    bool   // endpoint: present (true) or gone
	// VirtualService: a header value only this generation has;
	// DestinationRule: the outlier detection's consecutive_5xx.
	marker  []byte
	outlier uint32
	start   time.Time
	during  bool // an endpoint change written while a config change was out

	got     []bool // per subscriber (under tracker.mu)
	left    int
	done    chan struct{} // closed when every subscriber has it
	dropped chan struct{} // closed when given up on
}

// tracker follows the changes out and their arrival at each subscriber.
type tracker struct {
	n  int
	mu sync.Mutex
	// open changes, per kind
	open [3][]*change
	// Per kind: each change's time until the last subscriber had it
	// ("all"), and each subscriber's arrival ("each"); endpoint changes
	// during config changes apart.
	all, each             [3][]time.Duration
	duringAll, duringEach []time.Duration
}

func newTracker(n int) *tracker { return &tracker{n: n} }

// add opens c before its write.
func (t *tracker) add(c *change) {
	c.got, c.left, c.done, c.dropped = make([]bool, t.n), t.n, make(chan struct{}), make(chan struct{})
	t.mu.Lock()
	t.open[c.kind] = append(t.open[c.kind], c)
	t.mu.Unlock()
}

// pending reports the open changes of a kind.
func (t *tracker) pending(kind int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.open[kind])
}

// openFor returns the changes of kind that subscriber i has not had.
func (t *tracker) openFor(i, kind int) []*change {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*change
	for _, c := range t.open[kind] {
		if !c.got[i] {
			out = append(out, c)
		}
	}
	return out
}

// arrived records that subscriber i had cs at at.
func (t *tracker) arrived(i int, at time.Time, cs []*change) {
	if len(cs) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range cs {
		if c.got[i] {
			continue
		}
		c.got[i] = true
		c.left--
		d := at.Sub(c.start)
		t.each[c.kind] = append(t.each[c.kind], d)
		if c.during {
			t.duringEach = append(t.duringEach, d)
		}
		if c.left > 0 {
			continue
		}
		t.all[c.kind] = append(t.all[c.kind], d)
		if c.during {
			t.duringAll = append(t.duringAll, d)
		}
		t.open[c.kind] = slices.DeleteFunc(t.open[c.kind], func(o *change) bool { return o == c })
		close(c.done)
	}
}

// drop gives up on the changes still out and returns how many.
func (t *tracker) drop() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for k, open := range t.open {
		for _, c := range open {
			close(c.dropped)
			n++
		}
		t.open[k] = nil
	}
	return n
}

// reset forgets the figures (a new phase); open changes stay open.
func (t *tracker) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.all, t.each, t.duringAll, t.duringEach = [3][]time.Duration{}, [3][]time.Duration{}, nil, nil
}

// clusters looks for the open DestinationRule changes in a CDS response: a
// cluster of the service with the new outlier detection.
func (t *tracker) clusters(i int, at time.Time, cs []cluster) {
	open := t.openFor(i, kindDestinationRule)
	var hit []*change
	for _, c := range open {
		for _, cl := range cs {
			if cl.consecutive5x == c.outlier && serviceIn(cl.name, c.svc) {
				hit = append(hit, c)
				break
			}
		}
	}
	t.arrived(i, at, hit)
}

// endpoints looks for the open endpoint changes in an EDS response: the
// subset's ClusterLoadAssignment with the address present (up) or not.
func (t *tracker) endpoints(i int, at time.Time, clas [][]byte) {
	open := t.openFor(i, kindEndpoint)
	if len(open) == 0 {
		return
	}
	var hit []*change
	for _, b := range clas {
		name := claName(b)
		for _, c := range open {
			if !serviceIn(name, c.svc) || !strings.Contains(name, c.color) {
				continue
			}
			present := false
			_ = claAddresses(b, func(v []byte) { present = present || bytes.Equal(v, c.addr) })
			if present == c.up {
				hit = append(hit, c)
			}
		}
	}
	t.arrived(i, at, hit)
}

// routes looks for the open VirtualService changes in an RDS response: the
// new header value anywhere in it.
func (t *tracker) routes(i int, at time.Time, raw []byte) {
	open := t.openFor(i, kindVirtualService)
	var hit []*change
	for _, c := range open {
		if bytes.Contains(raw, c.marker) {
			hit = append(hit, c)
		}
	}
	t.arrived(i, at, hit)
}

// serviceIn reports whether a cluster name is of service svc: Sextant's
// "ns/svc/subset", istiod's "outbound|port|subset|svc.ns.svc.cluster.local".
func serviceIn(name, svc string) bool {
	for _, sep := range []string{"/" + svc + "/", "/" + svc + ":", "|" + svc + "."} {
		if strings.Contains(name, sep) {
			return true
		}
	}
	return strings.HasSuffix(name, "/"+svc)
}
