package robustness

import (
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The model is a key-value register per instance id, what docs/api.md,
// docs/registry.md and docs/cluster.md promise of one id:
//
//   - a register sets the value; if the id already holds the same value it
//     changes nothing and answers the id's current revision ("registering
//     the same fields again changes nothing: no revision"), else it answers
//     a revision above every earlier one of the id. In a cluster a server
//     whose catalog trails may write the same value again, at a new
//     revision (cluster.md: a register is not conditional, on purpose);
//   - a deregister answers 200 with a new revision if the id is present,
//     404 if it is absent;
//   - writes are decided against everything committed before them, by
//     every server (cluster.md: a delete's condition at commit, re-planning
//     against the database's head), so they are linearizable across the
//     cluster;
//   - a read (get, or a list's view of the id) on the server that made a
//     write, once the write is answered, sees it (read-your-writes).
//     Strict (one server): a read sees the latest version. Lagging (a
//     cluster): a read on a server may see an older version of the id, but
//     never one older than what that server already answered for it: its
//     last read, or its last answered write's version (cluster.md: "a
//     server that has applied revision N has applied every change below
//     N"; reads elsewhere "may miss a write acknowledged elsewhere for a
//     moment").
//
// The state keeps every version the id went through, so that a lagging read
// can be matched to the one it saw.

// applied is the model's own operation, not the servers': an answered
// write's server has applied it. It is placed just after the write's
// return (the write's commit, its linearization point, may come before
// its server applied it: only the answer says it has).
const applied Kind = 255

// maxServers bounds the servers of a scenario (the floors are an array, so
// that states compare cheaply).
const maxServers = 4

type version struct {
	present bool
	value   string
	rev     int64 // 0: unknown (written by an operation whose answer was lost)
}

// state is what one id went through that a later operation may still
// observe: in strict mode only its latest version; lagging, every version
// from the oldest a server may still read. Versions are never modified in
// place: a step copies.
type state struct {
	versions []version
	floor    [maxServers]int32 // per server, the oldest version it may read (an index in versions)
	maxRev   int64             // the highest revision the id was seen at
}

type input struct {
	kind   Kind
	server int
	value  string
}

type output struct {
	status  Status
	rev     int64 // a write's answer, or the revision a read saw
	present bool  // reads
	value   string
}

// model is the porcupine model of one id's history over servers servers;
// lag says whether reads may lag (servers of a cluster) or must see the
// latest version (one server). A write whose answer was lost may or may not
// have taken effect: the model is nondeterministic there.
func model(lag bool, servers int) porcupine.Model {
	seed := maphash.MakeSeed()
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{state{versions: []version{{}}}} },
		Step: func(st, in, out any) []any {
			return step(st.(state), in.(input), out.(output), lag, servers)
		},
		Equal: func(a, b any) bool {
			x, y := a.(state), b.(state)
			return x.floor == y.floor && x.maxRev == y.maxRev && slices.Equal(x.versions, y.versions)
		},
		Hash: func(a any) uint64 {
			x := a.(state)
			return maphash.Comparable(seed, struct {
				n      int
				last   version
				floor  [maxServers]int32
				maxRev int64
			}{len(x.versions), x.versions[len(x.versions)-1], x.floor, x.maxRev})
		},
		DescribeOperation: func(in, out any) string {
			return describe(in.(input), out.(output))
		},
		DescribeState: func(st any) string { return describeState(st.(state)) },
	}
	return nm.ToModel()
}

func describeState(x state) string {
	var b strings.Builder
	for i, v := range x.versions {
		if i > 0 {
			b.WriteString(" ")
		}
		if v.present {
			fmt.Fprintf(&b, "%s@%d", v.value, v.rev)
		} else {
			fmt.Fprintf(&b, "absent@%d", v.rev)
		}
	}
	fmt.Fprintf(&b, " (floors %v)", x.floor)
	return b.String()
}

func describe(in input, out output) string {
	var s string
	switch in.kind {
	case applied:
		return fmt.Sprintf("s%d has applied rev %d", in.server, out.rev)
	case Register:
		s = fmt.Sprintf("s%d register %s", in.server, in.value)
	default:
		s = fmt.Sprintf("s%d %s", in.server, in.kind)
	}
	switch {
	case out.status == Unknown:
		return s + " -> ?"
	case in.kind == Register || in.kind == Deregister:
		if out.status == NotFound {
			return s + " -> 404"
		}
		return fmt.Sprintf("%s -> rev %d", s, out.rev)
	case out.present:
		return fmt.Sprintf("%s -> %s@%d", s, out.value, out.rev)
	default:
		return s + " -> absent"
	}
}

// step is every state the id can be in after the operation, none if the
// operation cannot have answered what it did.
func step(st state, in input, out output, lag bool, servers int) []any {
	next := func(s state) []any { return []any{s.trim(lag, servers)} }
	last := len(st.versions) - 1
	cur := st.versions[last]
	switch in.kind {
	case applied:
		for i := last; i >= int(st.floor[in.server]); i-- {
			if st.versions[i].rev == out.rev {
				st.floor[in.server] = int32(i)
				break
			}
		}
		return next(st)
	case Register:
		same := cur.present && cur.value == in.value
		if out.status == Unknown {
			if same {
				return []any{st}
			}
			return []any{st, st.with(version{present: true, value: in.value}).trim(lag, servers)}
		}
		if same {
			var states []any
			// Unchanged: no new revision, the id's current one.
			if cur.rev == 0 || out.rev == cur.rev {
				states = append(states, st.pin(last, out.rev).trim(lag, servers))
			}
			// In a cluster a server whose catalog trails may write it again
			// (cluster.md: "a redundant upsert, never a wrong state").
			if lag && out.rev > st.maxRev && out.rev != cur.rev {
				states = append(states, st.with(version{present: true, value: in.value, rev: out.rev}).trim(lag, servers))
			}
			return states
		}
		if out.rev <= st.maxRev {
			return nil
		}
		return next(st.with(version{present: true, value: in.value, rev: out.rev}))
	case Deregister:
		switch out.status {
		case Unknown:
			if !cur.present {
				return []any{st}
			}
			return []any{st, st.with(version{}).trim(lag, servers)}
		case NotFound:
			// Absent everywhere (the server caught up with the others
			// first); which version its own reads then see is not said.
			if cur.present {
				return nil
			}
			return next(st)
		default:
			if !cur.present || out.rev <= st.maxRev {
				return nil
			}
			return next(st.with(version{rev: out.rev}))
		}
	default: // a read
		from := last
		if lag {
			from = int(st.floor[in.server])
		}
		// The earliest version the read may have seen keeps the floor as low
		// as the answer allows, so no later read is refused for it.
		for i := from; i <= last; i++ {
			v := st.versions[i]
			if v.present != out.present || v.present && (v.value != out.value || v.rev != 0 && v.rev != out.rev) {
				continue
			}
			if v.present {
				st = st.pin(i, out.rev)
			}
			st.floor[in.server] = int32(i)
			return next(st)
		}
		return nil
	}
}

// with appends a version.
func (st state) with(v version) state {
	vs := make([]version, len(st.versions), len(st.versions)+1)
	copy(vs, st.versions)
	st.versions = append(vs, v)
	st.maxRev = max(st.maxRev, v.rev)
	return st
}

// pin records the revision a version written without a known answer was
// seen at.
func (st state) pin(i int, rev int64) state {
	if st.versions[i].rev != 0 || rev == 0 {
		return st
	}
	vs := append([]version(nil), st.versions...)
	vs[i].rev = rev
	st.versions = vs
	st.maxRev = max(st.maxRev, rev)
	return st
}

// trim drops the versions no read can see any more, so that states that
// differ only there compare equal: below every server's floor (lagging), or
// all but the latest (strict).
func (st state) trim(lag bool, servers int) state {
	low := int32(len(st.versions) - 1)
	if lag {
		for s := range servers {
			low = min(low, st.floor[s])
		}
	}
	if low == 0 {
		return st
	}
	st.versions = st.versions[low:]
	for s := range st.floor {
		st.floor[s] = max(st.floor[s]-low, 0)
	}
	return st
}

// partitions turns a history into one porcupine history per instance id: a
// list becomes one read per id of its service, at the list's times.
func partitions(ops []Op) (ids []string, parts map[string][]porcupine.Operation, srcs map[string][]Op) {
	byService := map[string][]string{}
	seen := map[string]bool{}
	for _, o := range ops {
		if o.Kind != List && !seen[o.ID] {
			seen[o.ID] = true
			ids = append(ids, o.ID)
			byService[o.Service] = append(byService[o.Service], o.ID)
		}
	}
	parts = map[string][]porcupine.Operation{}
	srcs = map[string][]Op{}
	add := func(id string, o Op, in input, out output) {
		ret := int64(returned(o))
		if ret == math.MaxInt64 {
			ret -= int64(len(parts[id])) // distinct, after every answered one
		}
		parts[id] = append(parts[id], porcupine.Operation{ClientId: o.Client, Input: in, Output: out, Call: int64(o.Call), Return: ret})
		srcs[id] = append(srcs[id], o)
	}
	for _, o := range ops {
		in := input{kind: o.Kind, server: o.Server, value: o.Value}
		switch o.Kind {
		case Register, Deregister:
			add(o.ID, o, in, output{status: o.Status, rev: o.Rev})
			if o.Status == OK && !o.Inferred {
				mark := o
				mark.Kind, mark.Call, mark.Return = applied, o.Return+1, o.Return+1
				add(o.ID, mark, input{kind: applied, server: o.Server}, output{status: OK, rev: o.Rev})
			}
		case Get:
			out := output{status: o.Status}
			if len(o.Seen) == 1 {
				out.present, out.value, out.rev = true, o.Seen[0].Value, o.Seen[0].Rev
			}
			add(o.ID, o, in, out)
		case List:
			found := map[string]Seen{}
			for _, s := range o.Seen {
				found[s.ID] = s
			}
			for _, id := range byService[o.Service] {
				out := output{status: o.Status}
				if s, ok := found[id]; ok {
					out.present, out.value, out.rev = true, s.Value, s.Rev
				}
				add(id, o, in, out)
			}
		}
	}
	// By call time, as the prefix checks and the shrinking assume (an
	// "applied" step comes after its write's answer, after later calls).
	for id, ps := range parts {
		idx := make([]int, len(ps))
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(a, b int) bool { return ps[idx[a]].Call < ps[idx[b]].Call })
		sortedOps, sortedSrcs := make([]porcupine.Operation, len(ps)), make([]Op, len(ps))
		for i, j := range idx {
			sortedOps[i], sortedSrcs[i] = ps[j], srcs[id][j]
		}
		parts[id], srcs[id] = sortedOps, sortedSrcs
	}
	return ids, parts, srcs
}
