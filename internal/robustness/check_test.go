package robustness

import (
	"strings"
	"testing"
	"time"
)

// The checker on small histories written by hand: each case either passes
// or fails with a violation naming what it says.

const ms = time.Millisecond

func reg(c, s int, id, v string, call, ret time.Duration, st Status, rev int64) Op {
	return Op{Client: c, Server: s, Kind: Register, ID: id, Service: "svc", Value: v, Fresh: true, Call: call, Return: ret, Status: st, Rev: rev}
}

func dereg(c, s int, id string, call, ret time.Duration, st Status, rev int64) Op {
	return Op{Client: c, Server: s, Kind: Deregister, ID: id, Service: "svc", Call: call, Return: ret, Status: st, Rev: rev}
}

func get(c, s int, id string, call, ret time.Duration, seen ...Seen) Op {
	o := Op{Client: c, Server: s, Kind: Get, ID: id, Service: "svc", Call: call, Return: ret, Seen: seen}
	if len(seen) == 0 {
		o.Status = NotFound
	}
	return o
}

func list(c, s int, call, ret time.Duration, seen ...Seen) Op {
	return Op{Client: c, Server: s, Kind: List, Service: "svc", Call: call, Return: ret, Seen: seen}
}

func TestCheck(t *testing.T) {
	identical := reg(1, 0, "a", "v2", 3*ms, 6*ms, OK, 2)
	identical.Fresh = false
	identicalNew := identical
	identicalNew.Rev = 3
	bounded := reg(0, 0, "a", "v1", 0, 2*ms, Unknown, 0)
	bounded.Bounded = true

	for _, tc := range []struct {
		name    string
		lag     bool
		ops     []Op
		pages   []FeedPage
		final   []map[string]Seen
		outside string
		want    string // "" passes
	}{
		{name: "sequential", ops: []Op{
			reg(0, 0, "a", "v1", 0, 1*ms, OK, 1),
			get(0, 0, "a", 2*ms, 3*ms, Seen{"a", "v1", 1}),
			list(0, 0, 4*ms, 5*ms, Seen{"a", "v1", 1}),
			dereg(0, 0, "a", 6*ms, 7*ms, OK, 2),
			get(0, 0, "a", 8*ms, 9*ms),
			dereg(0, 0, "a", 10*ms, 11*ms, NotFound, 0),
		}},
		{name: "concurrent deletes, one 404 after the other", ops: []Op{
			reg(0, 0, "a", "v1", 0, 1*ms, OK, 1),
			dereg(1, 0, "a", 2*ms, 10*ms, OK, 2),
			dereg(2, 0, "a", 3*ms, 4*ms, NotFound, 0),
			get(2, 0, "a", 5*ms, 6*ms),
		}},
		{name: "early 404", ops: []Op{
			reg(0, 0, "a", "v1", 0, 1*ms, OK, 1),
			dereg(1, 0, "a", 2*ms, 10*ms, OK, 2),
			dereg(2, 0, "a", 3*ms, 4*ms, NotFound, 0),
			get(2, 0, "a", 5*ms, 6*ms, Seen{"a", "v1", 1}),
		}, want: "not linearizable: instance a"},
		{name: "identical re-register answers the same revision", ops: []Op{
			reg(0, 0, "a", "v1", 0, 1*ms, OK, 1),
			reg(0, 0, "a", "v2", 2*ms, 5*ms, OK, 2),
			identical,
		}},
		{name: "identical re-register takes a new revision", ops: []Op{
			reg(0, 0, "a", "v1", 0, 1*ms, OK, 1),
			reg(0, 0, "a", "v2", 2*ms, 5*ms, OK, 2),
			identicalNew,
		}, want: "not linearizable: instance a"},
		{name: "lagging: an identical re-register through a trailing server may be written again", lag: true, ops: []Op{
			reg(0, 0, "a", "v1", 0, 1*ms, OK, 1),
			reg(0, 0, "a", "v2", 2*ms, 5*ms, OK, 2),
			func() Op { o := identicalNew; o.Server = 1; return o }(),
		}},
		{name: "lagging: but never at an older revision", lag: true, ops: []Op{
			reg(0, 0, "a", "v1", 0, 1*ms, OK, 1),
			reg(0, 0, "a", "v2", 2*ms, 5*ms, OK, 3),
			func() Op { o := identicalNew; o.Server, o.Rev, o.Call, o.Return = 1, 2, 6*ms, 7*ms; return o }(),
		}, want: "not linearizable"},
		{name: "strict: a read on another server must see the write", ops: []Op{
			reg(0, 0, "a", "v1", 0, 1*ms, OK, 1),
			get(1, 1, "a", 2*ms, 3*ms),
		}, want: "not linearizable"},
		{name: "lagging: another server may not have it yet", lag: true, ops: []Op{
			reg(0, 0, "a", "v1", 0, 1*ms, OK, 1),
			get(1, 1, "a", 2*ms, 3*ms),
			get(1, 1, "a", 4*ms, 5*ms, Seen{"a", "v1", 1}),
		}},
		{name: "lagging: the writer's server may not have its write before it answers", lag: true, ops: []Op{
			reg(0, 2, "a", "v1", 0, 1*ms, OK, 1),
			reg(2, 2, "a", "v2", 2*ms, 10*ms, OK, 2),
			get(5, 1, "a", 3*ms, 4*ms, Seen{"a", "v2", 2}),
			get(5, 2, "a", 5*ms, 6*ms, Seen{"a", "v1", 1}),
		}},
		{name: "a lost write seen by a read happened before it", ops: []Op{
			reg(0, 0, "a", "v1", 0, 0, Unknown, 0),
			get(1, 0, "a", 2*ms, 3*ms, Seen{"a", "v1", 7}),
			get(1, 0, "a", 4*ms, 5*ms),
		}, want: "not linearizable"},
		{name: "lagging: a server's reads never go back", lag: true, ops: []Op{
			reg(0, 0, "a", "v1", 0, 1*ms, OK, 1),
			get(1, 1, "a", 4*ms, 5*ms, Seen{"a", "v1", 1}),
			get(1, 1, "a", 6*ms, 7*ms),
		}, want: "not linearizable"},
		{name: "lagging: read-your-writes on the writer's server", lag: true, ops: []Op{
			reg(0, 0, "a", "v1", 0, 1*ms, OK, 1),
			get(0, 0, "a", 2*ms, 3*ms),
		}, want: "not linearizable"},
		{name: "lagging: a delete of what is gone everywhere is 404", lag: true, ops: []Op{
			reg(0, 0, "a", "v1", 0, 1*ms, OK, 1),
			dereg(0, 0, "a", 2*ms, 3*ms, OK, 2),
			dereg(1, 1, "a", 4*ms, 5*ms, OK, 3),
		}, want: "not linearizable"},
		{name: "a lost register may never happen", ops: []Op{
			reg(0, 0, "a", "v1", 0, 0, Unknown, 0),
			get(1, 0, "a", 2*ms, 3*ms),
		}},
		{name: "a lost register may happen late", ops: []Op{
			reg(0, 0, "a", "v1", 0, 0, Unknown, 0),
			get(1, 0, "a", 2*ms, 3*ms),
			get(1, 0, "a", 4*ms, 5*ms, Seen{"a", "v1", 7}),
		}},
		{name: "a write lost with its server cannot happen after", ops: []Op{
			bounded,
			get(1, 0, "a", 3*ms, 4*ms),
			get(1, 0, "a", 5*ms, 6*ms, Seen{"a", "v1", 7}),
		}, want: "not linearizable"},
		{name: "a lost write the feed shows happened before the feed was read", ops: []Op{
			reg(0, 0, "a", "v1", 0, 0, Unknown, 0),
			get(1, 0, "a", 3*ms, 4*ms),
		}, pages: []FeedPage{{Client: 9, Follower: true, Since: 0, Rev: 1, Call: 1 * ms, Return: 2 * ms, Changes: []Change{{Rev: 1, ID: "a", Value: "v1"}}}},
			want: "not linearizable"},
		{name: "a lost write a whole feed never shows never happened", ops: []Op{
			reg(0, 0, "a", "v1", 0, 0, Unknown, 0),
			dereg(1, 0, "a", 3*ms, 4*ms, OK, 2),
		}, pages: []FeedPage{{Client: 9, Follower: true, Since: 0, Rev: 2, Call: 5 * ms, Return: 6 * ms, Changes: []Change{{Rev: 2, Delete: true, ID: "a"}}}},
			want: "not linearizable"},
		{name: "revisions go up with real time", ops: []Op{
			reg(0, 0, "a", "v1", 0, 1*ms, OK, 5),
			reg(0, 0, "b", "v1", 2*ms, 3*ms, OK, 4),
		}, want: "revision 4 acknowledged after revision 5"},
		{name: "the feed after an acknowledged write holds it", ops: []Op{
			reg(0, 0, "a", "v1", 0, 1*ms, OK, 1),
		}, pages: []FeedPage{{Client: 0, Since: 0, Rev: 0, Call: 2 * ms, Return: 3 * ms}},
			want: "missed an acknowledged write"},
		{name: "the feed replayed is the final state", ops: []Op{
			reg(0, 0, "a", "v1", 0, 1*ms, OK, 1),
			dereg(0, 0, "a", 2*ms, 3*ms, OK, 2),
		}, pages: []FeedPage{{Client: 9, Follower: true, Since: 0, Rev: 2, Call: 4 * ms, Return: 5 * ms, Changes: []Change{{Rev: 1, ID: "a", Value: "v1"}}}},
			final: []map[string]Seen{{}},
			want:  "lacks an acknowledged write"},
		{name: "the feed replayed gives what the server lists", ops: []Op{
			reg(0, 0, "a", "v1", 0, 1*ms, OK, 1),
		}, pages: []FeedPage{{Client: 9, Follower: true, Since: 0, Rev: 1, Call: 4 * ms, Return: 5 * ms, Changes: []Change{{Rev: 1, ID: "a", Value: "v1"}}}},
			final: []map[string]Seen{{"a": {"a", "v1", 1}, "b": {"b", "v1", 1}}},
			want:  "the server lists"},
		{name: "servers agree once caught up", final: []map[string]Seen{{"a": {"a", "v1", 1}}, {}},
			want: "servers disagree"},
		{name: "an answer outside the contract", outside: "register a answered 409",
			want: "an answer outside the contract: register a answered 409"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHistory()
			if tc.outside != "" {
				h.Outside(tc.outside)
			}
			for _, o := range tc.ops {
				h.Add(o)
			}
			for _, p := range tc.pages {
				h.AddPage(p)
			}
			bad := Check(h, CheckOptions{Lag: tc.lag, Final: tc.final, Timeout: 10 * time.Second})
			switch {
			case tc.want == "" && len(bad) > 0:
				t.Fatalf("want no violation, got:\n%s", strings.Join(bad, "\n"))
			case tc.want != "" && (len(bad) == 0 || !strings.Contains(strings.Join(bad, "\n"), tc.want)):
				t.Fatalf("want a violation saying %q, got %d:\n%s", tc.want, len(bad), strings.Join(bad, "\n"))
			}
		})
	}
}
