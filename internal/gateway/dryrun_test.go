package gateway

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/valyala/fasthttp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sextant-mesh/sextant/internal/calllog"
	"github.com/sextant-mesh/sextant/internal/callstore"
)

const (
	spiffeA = "spiffe://td/ns/shop/sa/a"
	spiffeB = "spiffe://td/ns/shop/sa/b"
)

// filterJSON is an RBAC HttpFilter as the dry run request carries it.
func filterJSON(t *testing.T, name string, r *rbacpb.RBAC) json.RawMessage {
	t.Helper()
	a, err := anypb.New(&rbachttp.RBAC{Rules: r})
	if err != nil {
		t.Fatal(err)
	}
	b, err := protojson.Marshal(&hcm.HttpFilter{Name: name, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: a}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func allowRBAC(policies map[string]*rbacpb.Policy) *rbacpb.RBAC {
	return &rbacpb.RBAC{Action: rbacpb.RBAC_ALLOW, Policies: policies}
}

// writeV1Segment makes, in a call log's directory, a segment the
// previous version wrote: header SXCALLS1, one 34-byte layout v1 body.
func writeV1Segment(t *testing.T, dir, service string, start time.Time) {
	t.Helper()
	seg := filepath.Join(dir, url.PathEscape(service), "seg-1")
	if err := os.MkdirAll(seg, 0o755); err != nil {
		t.Fatal(err)
	}
	var h [16]byte
	copy(h[:], "SXCALLS1")
	binary.LittleEndian.PutUint32(h[8:], 96)
	binary.LittleEndian.PutUint32(h[12:], crc32.Checksum(h[:12], crc32.MakeTable(crc32.Castagnoli)))
	if err := os.WriteFile(filepath.Join(seg, "index.dat"), h[:], 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := callstore.Open(seg, callstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := st.Writer()
	var b [callstore.BodySize]byte
	b[0] = 1                                  // layout v1
	binary.LittleEndian.PutUint16(b[2:], 200) // status
	if err := w.Put(start.UnixNano(), 10, b); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDryRunEvaluation: recorded calls replayed through the current and
// candidate filters with the RBAC engine: a call the candidate stops
// allowing is newly denied (grouped, sampled), one for which a rule reads
// what the record does not keep is undetermined (by attribute), the rest
// unchanged or newly allowed; route overrides apply to both sides; v1
// records and ports the candidate does not cover are counted apart.
func TestDryRunEvaluation(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	writeV1Segment(t, dir, "shop/orders", now.Add(-2*time.Minute))
	l, err := calllog.Open(calllog.Options{Dir: dir, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n := 0
	put := func(principal, method string, conn calllog.ConnFlags) {
		n++
		l.Record(calllog.Record{Start: now.Add(-time.Minute + time.Duration(n)*time.Millisecond).UnixNano(), Service: "shop/orders",
			Cluster: "orders", Route: "orders-route", Status: 200, Principal: principal, Subject: "O=td", Method: method,
			Path: "/orders", Host: "orders.example", Port: 8443, PeerIP: netip.MustParseAddr("10.0.0.9"), Conn: conn})
	}
	cert := calllog.ConnTLS | calllog.ConnPeerCert
	for range 3 {
		put(spiffeA, "GET", cert)
	}
	for range 2 {
		put(spiffeB, "POST", cert)
	}
	put(spiffeB, "GET", cert|calllog.ConnOtherNames) // names beyond the first URI SAN: not kept
	put("", "GET", calllog.ConnTLS)                  // no certificate
	// A call older than the range.
	l.Record(calllog.Record{Start: now.Add(-2 * time.Hour).UnixNano(), Service: "shop/orders", Route: "orders-route", Port: 8443, Method: "GET"})

	onlyA := allowRBAC(map[string]*rbacpb.Policy{"allow-a": {Permissions: []*rbacpb.Permission{permAny}, Principals: []*rbacpb.Principal{principal(exact(spiffeA))}}})
	byHeader := allowRBAC(map[string]*rbacpb.Policy{"team": {Permissions: []*rbacpb.Permission{permHeader("x-team", exact("a"))}, Principals: []*rbacpb.Principal{anyone}}})
	everyone := allowRBAC(map[string]*rbacpb.Policy{"all": {Permissions: []*rbacpb.Permission{permAny}, Principals: []*rbacpb.Principal{anyone}}})
	compiled := func(r *rbacpb.RBAC) []*rbacFilter {
		f, err := compileRBACFilter("sextant.rbac.allow", &rbachttp.RBAC{Rules: r}, "test")
		if err != nil {
			t.Fatal(err)
		}
		return []*rbacFilter{f}
	}
	g := New(Options{})
	setCurrent := func(filters []*rbacFilter, ov map[string]rbacOverride) {
		rt := &routeRT{name: "orders-route", spec: &routeSpec{name: "orders-route", rbac: ov}}
		g.table.Store(&table{port: 8443, rbac: filters, exact: map[string]*vhostRT{"orders.example": {name: "v", routes: []*routeRT{rt}}}})
	}
	run := func(body string) DryRunResult {
		t.Helper()
		d, err := decodeDryRun([]byte(body), now)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
		return g.dryRun(l, d)
	}
	req := func(port int, r *rbacpb.RBAC, extra string) string {
		return fmt.Sprintf(`{"listeners":[{"port":%d,"http_filters":[%s]%s}]}`, port, filterJSON(t, "sextant.rbac.allow", r), extra)
	}
	const v1 = "record layout v1 (no port, principal, method, path or host)"
	const otherNames = "principal (certificate names after the first URI SAN are not kept)"
	check := func(name string, got DryRunResult, scanned, unchanged, denied, allowed int, undetermined map[string]int) {
		t.Helper()
		und := 0
		for _, v := range undetermined {
			und += v
		}
		if got.Scanned != scanned || got.Unchanged != unchanged || got.NewlyDenied != denied || got.NewlyAllowed != allowed ||
			got.Undetermined != und || len(got.UndeterminedBy) != len(undetermined) || got.Truncated || got.Note != DryRunNote {
			t.Fatalf("%s: %+v", name, got)
		}
		for k, v := range undetermined {
			if got.UndeterminedBy[k] != v {
				t.Fatalf("%s: undetermined %v, want %v", name, got.UndeterminedBy, undetermined)
			}
		}
	}

	// Nothing enforced now; the candidate allows only A.
	setCurrent(nil, nil)
	res := run(req(8443, onlyA, ""))
	check("allow A", res, 8, 3, 3, 0, map[string]int{v1: 1, otherNames: 1})
	noPolicy := "sextant.rbac.allow: no policy allowed the call"
	wantGroups := []DryRunGroup{
		{Port: 8443, Service: "shop/orders", Route: "orders-route", Principal: spiffeB, Method: "POST", Path: "/orders", Policy: noPolicy, Count: 2},
		{Port: 8443, Service: "shop/orders", Route: "orders-route", Principal: "", Method: "GET", Path: "/orders", Policy: noPolicy, Count: 1},
	}
	if !slices.Equal(res.Denied, wantGroups) {
		t.Fatalf("groups %+v", res.Denied)
	}
	if len(res.Samples) != 3 || res.Samples[0].Principal != spiffeB || res.Samples[0].Host != "orders.example" || res.Samples[0].PeerIP != "10.0.0.9" {
		t.Fatalf("samples %+v", res.Samples)
	}
	if r := run(req(8443, onlyA, "") + ""); r.Evaluated != 7 || r.OtherPorts != 0 {
		t.Fatalf("evaluated %d, other ports %d", r.Evaluated, r.OtherPorts)
	}
	// Samples bounded.
	if r := run(`{"samples":1,` + req(8443, onlyA, "")[1:]); len(r.Samples) != 1 || r.NewlyDenied != 3 {
		t.Fatalf("samples 1: %+v", r)
	}

	// A rule on a header the record does not keep: never guessed.
	res = run(req(8443, byHeader, ""))
	check("header", res, 8, 0, 0, 0, map[string]int{v1: 1, "header x-team": 7})

	// Only A allowed now; the candidate allows everyone.
	setCurrent(compiled(onlyA), nil)
	res = run(req(8443, everyone, ""))
	check("allow all", res, 8, 3, 0, 3, map[string]int{v1: 1, otherNames: 1})

	// The route disables the filter now: the candidate's filter of that
	// name is disabled on it too, unless the request overrides the route.
	setCurrent(nil, map[string]rbacOverride{"sextant.rbac.allow": {disabled: true}})
	res = run(req(8443, onlyA, ""))
	check("route disables", res, 8, 7, 0, 0, map[string]int{v1: 1})
	perRoute, err := anypb.New(&rbachttp.RBACPerRoute{Rbac: &rbachttp.RBAC{Rules: onlyA}})
	if err != nil {
		t.Fatal(err)
	}
	pr, _ := protojson.Marshal(perRoute)
	res = run(req(8443, onlyA, fmt.Sprintf(`,"route_overrides":{"orders-route":{"sextant.rbac.allow":%s}}`, pr)))
	check("route override", res, 8, 3, 3, 0, map[string]int{v1: 1, otherNames: 1})

	// Two routes of the recorded name, one with overrides: the call's
	// host and path tell which it took, as the data path routes...
	disabled := map[string]rbacOverride{"sextant.rbac.allow": {disabled: true}}
	twoRoutes := func(first matchSpec) {
		g.table.Store(&table{port: 8443, exact: map[string]*vhostRT{"orders.example": {name: "a", routes: []*routeRT{
			{name: "orders-route", spec: &routeSpec{match: first, rbac: disabled}},
			{name: "orders-route", spec: &routeSpec{match: matchSpec{kind: matchPrefix, value: "/"}}}}}}})
	}
	twoRoutes(matchSpec{kind: matchPrefix, value: "/admin"})
	res = run(req(8443, onlyA, ""))
	check("same-named routes, told apart by path", res, 8, 3, 3, 0, map[string]int{v1: 1, otherNames: 1})
	twoRoutes(matchSpec{kind: matchPrefix, value: "/orders"})
	res = run(req(8443, onlyA, ""))
	check("same-named routes, the overriding one taken", res, 8, 7, 0, 0, map[string]int{v1: 1})
	// ... unless a route matches on what the record does not keep.
	twoRoutes(matchSpec{kind: matchPrefix, value: "/", headers: []headerMatch{{name: "x-canary", kind: strPresent}}})
	res = run(req(8443, onlyA, ""))
	check("same-named routes, a header matcher", res, 8, 0, 0, 0, map[string]int{v1: 1, "route (a route matches on headers or the query)": 7})

	// A port the candidate does not cover.
	setCurrent(nil, nil)
	res = run(req(7000, onlyA, ""))
	if res.Evaluated != 0 || res.OtherPorts != 7 || res.NewlyDenied != 0 {
		t.Fatalf("other port: %+v", res)
	}

	// Bounded: max_calls cuts the scan and says so.
	res = run(`{"max_calls":4,` + req(8443, onlyA, "")[1:])
	if !res.Truncated || res.TruncatedBy != "max_calls" || res.Scanned != 4 {
		t.Fatalf("max_calls: %+v", res)
	}
}

// TestDryRunBadRequest: each bad request is refused naming its field.
func TestDryRunBadRequest(t *testing.T) {
	good := string(filterJSON(t, "sextant.rbac.allow", allowRBAC(nil)))
	for _, tc := range []struct{ body, field string }{
		{`{}`, "listeners"},
		{`{"listeners":[{"port":0}]}`, "listeners[0].port"},
		{`{"listeners":[{"port":80},{"port":80}]}`, "listeners[1].port"},
		{`{"listeners":[{"port":80,"http_filters":[{"name":"x","typed_config":{"@type":"nope"}}]}]}`, "listeners[0].http_filters[0]"},
		{`{"listeners":[{"port":80,"http_filters":[{"name":"r","typed_config":{"@type":"type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC","rules":{"action":"ALLOW","policies":{"p":{"permissions":[],"principals":[{"any":true}]}}}}}]}]}`, `listeners[0].http_filters[0].typed_config.rules.policies["p"].permissions`},
		{`{"listeners":[{"port":80,"route_overrides":{"r":{"f":{"@type":"type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute","rbac":{"rules":{"action":"CUSTOM"}}}}}}]}`, `listeners[0].route_overrides["r"]`},
		{`{"listeners":[{"port":80,"http_filters":[` + good + `]}],"bogus":1}`, "bogus"},
		{`{"listeners":[{"port":80}],"from":"yesterday"}`, "from"},
		{`{"listeners":[{"port":80}],"from":"2026-01-02T00:00:00Z","to":"2026-01-01T00:00:00Z"}`, "to"},
		{`{"listeners":[{"port":80}],"max_calls":100001}`, "max_calls"},
		{`{"listeners":[{"port":80}],"timeout":"2m"}`, "timeout"},
		{`{"listeners":[{"port":80}],"samples":-1}`, "samples"},
		{`{"listeners":[{"port":80}]} {}`, "body"},
	} {
		_, err := decodeDryRun([]byte(tc.body), time.Now())
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want an error naming %s", tc.body, err, tc.field)
		}
	}
}

// TestSourceOfAllocatesOnce: what a call record keeps of the request costs
// the data path at most one allocation (method, path and host share one
// string), and none for a source seen before (interned).
func TestSourceOfAllocatesOnce(t *testing.T) {
	var req fasthttp.Request
	req.Header.SetMethod("POST")
	req.SetRequestURI("/orders/7?x=1")
	req.Header.SetHost("orders.example")
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 9), Port: 5555}, nil)
	var src callSource
	if n := testing.AllocsPerRun(100, func() { src = sourceOf(&ctx) }); n != 0 {
		t.Errorf("%v allocations for a source seen before", n)
	}
	req.SetRequestURI("/" + strings.Repeat("x", sourceNameMax)) // too long to keep
	if n := testing.AllocsPerRun(100, func() { src = sourceOf(&ctx) }); n > 1 {
		t.Errorf("%v allocations for a long source", n)
	}
	req.SetRequestURI("/orders/7?x=1")
	src = sourceOf(&ctx)
	if src.method != "POST" || src.path != "/orders/7" || src.host != "orders.example" || src.peer != netip.MustParseAddr("10.0.0.9") || src.conn != 0 {
		t.Errorf("source %+v", src)
	}
}

// TestDryRunPathNotKept: a call whose path the call log's dictionary had
// no room for is undetermined for a rule on the path, determined for one
// that does not read it, and shown as not kept.
func TestDryRunPathNotKept(t *testing.T) {
	l, err := calllog.Open(calllog.Options{Dir: t.TempDir(), FlushInterval: time.Hour, DictLimit: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	now := time.Now()
	for i := range 20 {
		l.Record(calllog.Record{Start: now.Add(-time.Minute + time.Duration(i)*time.Millisecond).UnixNano(), Service: "s", Cluster: "s",
			Route: "r", Status: 200, Method: "GET", Path: fmt.Sprintf("/items/%d", i), Host: "h", Port: 8080, Conn: 0})
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	calls, _, _ := l.Calls(calllog.Query{Service: "s"})
	notKept := 0
	for _, c := range calls {
		if slices.Contains(c.NotKept, "path") {
			notKept++
		}
	}
	if notKept == 0 || notKept == len(calls) {
		t.Fatalf("%d of %d paths not kept: the test needs some of each", notKept, len(calls))
	}
	g := New(Options{})
	g.table.Store(&table{port: 8080})
	run := func(r *rbacpb.RBAC) DryRunResult {
		t.Helper()
		d, err := decodeDryRun([]byte(fmt.Sprintf(`{"listeners":[{"port":8080,"http_filters":[%s]}]}`, filterJSON(t, "f", r))), now)
		if err != nil {
			t.Fatal(err)
		}
		return g.dryRun(l, d)
	}
	byPath := allowRBAC(map[string]*rbacpb.Policy{"items-1": {Permissions: []*rbacpb.Permission{permPath(prefix("/items/1"))}, Principals: []*rbacpb.Principal{anyone}}})
	res := run(byPath)
	if res.Undetermined != notKept || res.UndeterminedBy["path (not kept)"] != notKept || res.NewlyDenied+res.Unchanged != len(calls)-notKept {
		t.Fatalf("a path rule: %+v", res)
	}
	byMethod := allowRBAC(map[string]*rbacpb.Policy{"posts": {Permissions: []*rbacpb.Permission{permHeader(":method", exact("POST"))}, Principals: []*rbacpb.Principal{anyone}}})
	res = run(byMethod)
	if res.Undetermined != 0 || res.NewlyDenied != len(calls) {
		t.Fatalf("a method rule: %+v", res)
	}
	paths := 0
	for _, grp := range res.Denied {
		if grp.Path == notKeptValue {
			paths += grp.Count
		}
	}
	if paths != notKept {
		t.Fatalf("groups show %d calls' path as not kept, want %d: %+v", paths, notKept, res.Denied)
	}
}
