package robustness

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// CheckOptions says what a history is checked against.
type CheckOptions struct {
	// Lag: the servers are a cluster, and a read may lag behind writes made
	// through other servers (see model). Without it every read is strict.
	Lag bool
	// Final is, per server, every instance of the run it lists once the run
	// is over and it has caught up (id -> what it holds): the state its
	// change feed, replayed, must reproduce.
	Final []map[string]Seen
	// Timeout bounds the linearizability check of one id.
	Timeout time.Duration
	// Dir receives the HTML visualisation of a history that fails.
	Dir string
	// MaxFailing is how many failing ids are shrunk and shown before the
	// rest are left unchecked (proving a history wrong costs far more than
	// finding it right); 0 means 3.
	MaxFailing int
}

// Check checks a history and returns every violation found, each a text
// naming what was promised and the few operations that break it.
func Check(h *History, opt CheckOptions) []string {
	ops, pages := h.Ops(), h.Pages()
	var bad []string
	h.mu.Lock()
	for i, what := range h.outside {
		if i == 10 {
			bad = append(bad, fmt.Sprintf("an answer outside the contract: %d more", len(h.outside)-i))
			break
		}
		bad = append(bad, "an answer outside the contract: "+what)
	}
	h.mu.Unlock()
	ops = settle(ops, pages)
	bad = append(bad, checkLinearizable(ops, opt)...)
	bad = append(bad, checkRevisionOrder(ops)...)
	bad = append(bad, checkFeedAfterAck(ops, pages)...)
	bad = append(bad, checkFeedReplay(ops, pages, opt.Final)...)
	bad = append(bad, checkServersAgree(opt.Final)...)
	return bad
}

// checkServersAgree: once caught up with the same head, the servers of a
// cluster hold the same instances at the same revisions.
func checkServersAgree(final []map[string]Seen) []string {
	var bad []string
	for i := 1; i < len(final); i++ {
		for id, s := range final[0] {
			if got, ok := final[i][id]; !ok || got != s {
				bad = append(bad, fmt.Sprintf("servers disagree once caught up: s0 holds %+v, s%d holds %+v (present: %v)", s, i, got, ok))
			}
		}
		for id, got := range final[i] {
			if _, ok := final[0][id]; !ok {
				bad = append(bad, fmt.Sprintf("servers disagree once caught up: s%d holds %+v, s0 does not", i, got))
			}
		}
	}
	return bad
}

// settle decides what it can of the writes of unknown outcome, as etcd's
// robustness tests patch their histories: each is a fork in the search, and
// a few dozen of them (a database cut answers every write 503) make the
// check of an id's history take forever.
//
//   - A register of a new value that a read or the change feed shows took
//     effect (and that no other register wrote again): it happened before
//     it was first seen; the feed also says at which revision, and the
//     write becomes an answered one.
//   - A write called at t commits, if ever, at a revision above every one
//     acknowledged before t. When the change feeds read hold every
//     revision from there to the end, a register of a new value they never
//     show, that no read saw, never happened (the feed holds every commit:
//     checkFeedReplay checks that of the answered writes), nor did a
//     deregister of an id whose every delete the feed shows from there is
//     an answered deregister's.
func settle(ops []Op, pages []FeedPage) []Op {
	type sighting struct {
		at  time.Duration
		rev int64 // 0: seen by a read, whose revision is the instance's, not always the write's
	}
	first := map[[2]string]sighting{} // id, value -> when first seen
	// A fresh value's first write is its earliest revision in the feed (an
	// identical re-register after a change writes it again, later).
	see := func(id, value string, at time.Duration, rev int64) {
		k := [2]string{id, value}
		s, ok := first[k]
		if !ok || at < s.at {
			s.at = at
		}
		if rev != 0 && (s.rev == 0 || rev < s.rev) {
			s.rev = rev
		}
		first[k] = s
	}
	var covered [][2]int64 // (since, rev] of every page
	var end int64
	for _, p := range pages {
		if p.Reset {
			continue
		}
		covered = append(covered, [2]int64{p.Since, p.Rev})
		end = max(end, p.Rev)
		for _, ch := range p.Changes {
			if !ch.Delete {
				see(ch.ID, ch.Value, p.Return, ch.Rev)
			}
		}
	}
	// The feeds' pages merged into runs of revisions read without a gap.
	sort.Slice(covered, func(i, j int) bool { return covered[i][0] < covered[j][0] })
	var runs [][2]int64
	for _, c := range covered {
		if n := len(runs); n > 0 && c[0] <= runs[n-1][1] {
			runs[n-1][1] = max(runs[n-1][1], c[1])
		} else {
			runs = append(runs, c)
		}
	}
	// read: the feeds hold every revision in (lo, hi].
	read := func(lo, hi int64) bool {
		for _, r := range runs {
			if r[0] <= lo && r[1] >= hi {
				return true
			}
		}
		return false
	}
	// A write called at t commits after every write acknowledged before t:
	// at a revision above theirs.
	type ack struct {
		ret time.Duration
		rev int64
	}
	var acks []ack
	deletes := map[string]map[int64]bool{} // id -> revisions of the feed's deletes no answered deregister claims
	for _, p := range pages {
		for _, ch := range p.Changes {
			if ch.Delete {
				if deletes[ch.ID] == nil {
					deletes[ch.ID] = map[int64]bool{}
				}
				deletes[ch.ID][ch.Rev] = true
			}
		}
	}
	for _, o := range ops {
		switch {
		case (o.Kind == Register || o.Kind == Deregister) && o.Status == OK:
			acks = append(acks, ack{o.Return, o.Rev})
			if o.Kind == Deregister {
				delete(deletes[o.ID], o.Rev)
			}
		case (o.Kind == Get || o.Kind == List) && o.Status == OK:
			for _, s := range o.Seen {
				see(s.ID, s.Value, o.Return, 0)
			}
		}
	}
	sort.Slice(acks, func(i, j int) bool { return acks[i].ret < acks[j].ret })
	for i := 1; i < len(acks); i++ {
		acks[i].rev = max(acks[i].rev, acks[i-1].rev)
	}
	floor := func(t time.Duration) int64 {
		if i := sort.Search(len(acks), func(i int) bool { return acks[i].ret >= t }); i > 0 {
			return acks[i-1].rev
		}
		return 0
	}
	// A client re-registers the value it wrote last: a sighting of a value
	// written more than once may be of another write of it.
	writes := map[[2]string]int{}
	for _, o := range ops {
		if o.Kind == Register {
			writes[[2]string{o.ID, o.Value}]++
		}
	}
	out := ops[:0:0]
	for _, o := range ops {
		if o.Status != Unknown {
			out = append(out, o)
			continue
		}
		lo := floor(o.Call)
		switch {
		case o.Kind == Register && o.Fresh:
			s, ok := first[[2]string{o.ID, o.Value}]
			if ok && writes[[2]string{o.ID, o.Value}] > 1 {
				break
			}
			if o.Bounded {
				s.at = min(s.at, o.Return)
			}
			switch {
			case ok && s.rev != 0 && read(lo, s.rev):
				// No earlier sighting can hide in a gap of the feeds.
				o.Status, o.Rev, o.Inferred, o.Return = OK, s.rev, true, max(s.at, o.Call)
			case ok:
				o.Bounded, o.Return = true, max(s.at, o.Call)
			case end > 0 && read(lo, end):
				continue // never happened
			}
		case o.Kind == Deregister && end > 0 && read(lo, end):
			unclaimed := false
			for rev := range deletes[o.ID] {
				unclaimed = unclaimed || rev > lo
			}
			if !unclaimed {
				continue // never happened
			}
		}
		out = append(out, o)
	}
	return out
}

// checkLinearizable checks each id's history against the model.
func checkLinearizable(ops []Op, opt CheckOptions) []string {
	if opt.Timeout == 0 {
		opt.Timeout = 30 * time.Second
	}
	servers := 1
	for _, o := range ops {
		servers = max(servers, o.Server+1)
	}
	m := model(opt.Lag, servers)
	ids, parts, srcs := partitions(ops)
	if opt.MaxFailing == 0 {
		opt.MaxFailing = 3
	}
	var bad []string
	shrunk := 0
	for k, id := range ids {
		if shrunk >= opt.MaxFailing {
			bad = append(bad, fmt.Sprintf("linearizability: %d more instances not checked (%d already fail)", len(ids)-k, shrunk))
			break
		}
		res, info, n := checkPrefixes(m, parts[id], opt.Timeout)
		parts[id] = parts[id][:n]
		switch res {
		case porcupine.Ok:
			continue
		case porcupine.Unknown:
			bad = append(bad, fmt.Sprintf("linearizability of %s: the checker gave up after %v on %d operations", id, opt.Timeout, len(parts[id])))
			continue
		}
		var b strings.Builder
		mode := "strict: every read sees the latest write"
		if opt.Lag {
			mode = "a read may lag, never behind what its server already answered"
		}
		shrunk++
		keep, from := shrink(m, parts[id], opt.Timeout, 10*time.Second)
		fmt.Fprintf(&b, "not linearizable: instance %s (%s); %d of its %d operations suffice, from the state [%s] the ones before lead to:",
			id, mode, len(keep), len(parts[id]), m.DescribeState(from))
		for _, i := range keep {
			fmt.Fprintf(&b, "\n    %s", srcs[id][i])
		}
		// That state is one of those the operations before may lead to:
		// the last of them show which.
		if k := keep[0]; k > 0 {
			b.WriteString("\n  the operations just before:")
			for i := max(k-6, 0); i < k; i++ {
				if o := srcs[id][i]; o.Kind != applied {
					fmt.Fprintf(&b, "\n    %s", o)
				}
			}
		}
		if opt.Dir != "" {
			path := filepath.Join(opt.Dir, "history-"+id+".html")
			if err := porcupine.VisualizePath(m, info, path); err == nil {
				fmt.Fprintf(&b, "\n  the whole history of %s, drawn: %s", id, path)
			} else {
				fmt.Fprintf(&b, "\n  (no drawing: %v)", err)
			}
		}
		bad = append(bad, b.String())
	}
	return bad
}

// checkPrefixes checks growing prefixes of a history, each ending where
// no answered operation is in flight (64 operations, 128, ... all): a
// linearization of the whole, cut there, is one of the prefix, so a prefix
// that fails is a violation of the whole. A history that fails early is
// decided in a small prefix, not by a search through all of it. n is the
// length of the prefix decided.
func checkPrefixes(m porcupine.Model, ops []porcupine.Operation, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo, int) {
	var done int64 // the latest return of an answered operation so far
	want := 64
	for q := 1; q < len(ops); q++ {
		if ret := ops[q-1].Return; ret < math.MaxInt64-int64(len(ops)) {
			done = max(done, ret)
		}
		if q < want || done >= ops[q].Call {
			continue
		}
		want *= 2
		if res := porcupine.CheckOperationsTimeout(m, ops[:q], timeout); res != porcupine.Ok {
			return verbose(m, ops[:q], res, timeout)
		}
	}
	return verbose(m, ops, porcupine.CheckOperationsTimeout(m, ops, timeout), timeout)
}

// verbose is the check of a history with what is needed to draw it, when it
// failed (the search for partial linearizations slows every backtrack).
func verbose(m porcupine.Model, ops []porcupine.Operation, res porcupine.CheckResult, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo, int) {
	var info porcupine.LinearizationInfo
	if res == porcupine.Illegal {
		res, info = porcupine.CheckOperationsVerbose(m, ops, timeout)
	}
	return res, info, len(ops)
}

// shrink finds a few operations of a failing history that fail on their
// own, from a state the operations before them lead to: the shortest
// failing prefix (by call time); then the latest point before its end where
// no operation was in flight, from which the rest still fails (the state
// there is replayed from a linearization of what came before); then without
// every read that is not needed (dropping a read, or the model's own
// "applied" step, never makes a history easier to refuse). It returns the indexes kept and the state they start
// from. Bounded by budget: past it, what was found so far.
func shrink(m porcupine.Model, ops []porcupine.Operation, timeout, budget time.Duration) ([]int, any) {
	end := time.Now().Add(budget)
	init := m.Init()
	fails := func(from any, idx []int) bool {
		h := make([]porcupine.Operation, len(idx))
		for i, j := range idx {
			h[i] = ops[j]
		}
		mm := m
		mm.Init = func() any { return from }
		return porcupine.CheckOperationsTimeout(mm, h, timeout) == porcupine.Illegal
	}
	all := make([]int, len(ops))
	for i := range all {
		all[i] = i
	}
	n := sort.Search(len(ops), func(k int) bool { return fails(init, all[:k+1]) }) + 1
	n = min(n, len(ops))
	keep, from := all[:n:n], init
	var done int64 // latest return before a cut
	var cuts []int
	for q := 1; q < n; q++ {
		done = max(done, ops[q-1].Return)
		if done < ops[q].Call {
			cuts = append(cuts, q)
		}
	}
	for c := len(cuts) - 1; c >= 0 && time.Now().Before(end); c-- {
		q := cuts[c]
		st, ok := replay(m, ops[:q], timeout)
		if ok && fails(st, all[q:n]) {
			keep, from = all[q:n:n], st
			break
		}
	}
	for i := len(keep) - 1; i >= 0 && len(keep) > 1 && time.Now().Before(end); i-- {
		if in := ops[keep[i]].Input.(input); in.kind != Get && in.kind != List && in.kind != applied {
			continue
		}
		try := append(append([]int(nil), keep[:i]...), keep[i+1:]...)
		if fails(from, try) {
			keep = try
		}
	}
	return keep, from
}

// replay is the state one linearization of a linearizable history ends in.
func replay(m porcupine.Model, ops []porcupine.Operation, timeout time.Duration) (any, bool) {
	res, info := porcupine.CheckOperationsVerbose(m, ops, timeout)
	if res != porcupine.Ok {
		return nil, false
	}
	for _, part := range info.PartialLinearizations() {
		for _, lin := range part {
			if len(lin) != len(ops) {
				continue
			}
			st := m.Init()
			for _, i := range lin {
				var ok bool
				if ok, st = m.Step(st, ops[i].Input, ops[i].Output); !ok {
					return nil, false
				}
			}
			return st, true
		}
	}
	return nil, false
}

// changed reports whether o is an acknowledged write that changed
// something: a deregister answered 200, or a register of a value never
// written before.
func changed(o Op) bool {
	return o.Status == OK && !o.Inferred && (o.Kind == Deregister || o.Kind == Register && o.Fresh)
}

// changedWrites is every acknowledged write that changed something.
func changedWrites(ops []Op) []Op {
	var writes []Op
	for _, o := range ops {
		if changed(o) {
			writes = append(writes, o)
		}
	}
	return writes
}

// checkRevisionOrder: every acknowledged write that changes something has a
// revision of its own, above every one acknowledged before it was called
// (one counter, in commit order, on every server of a cluster).
func checkRevisionOrder(ops []Op) []string {
	writes := changedWrites(ops)
	var bad []string
	byRev := map[int64]Op{}
	for _, w := range writes {
		if o, ok := byRev[w.Rev]; ok {
			bad = append(bad, fmt.Sprintf("two acknowledged writes share revision %d:\n    %s\n    %s", w.Rev, o, w))
		}
		byRev[w.Rev] = w
	}
	byReturn := append([]Op(nil), writes...)
	sort.SliceStable(byReturn, func(i, j int) bool { return byReturn[i].Return < byReturn[j].Return })
	var top Op
	j := 0
	for _, w := range writes { // by call time
		for ; j < len(byReturn) && byReturn[j].Return < w.Call; j++ {
			if byReturn[j].Rev > top.Rev {
				top = byReturn[j]
			}
		}
		if top.Rev != 0 && w.Rev <= top.Rev && len(bad) < 10 {
			bad = append(bad, fmt.Sprintf("revision %d acknowledged after revision %d was (revisions go up with real time):\n    %s\n    %s", w.Rev, top.Rev, top, w))
		}
	}
	return bad
}

// checkFeedAfterAck: once a write is acknowledged at revision N, a read of
// /v1/changes on the same server (any server for one server) has caught up
// to N, and holds N if the write changed something (read-your-writes, for
// the feed). An unchanged re-register answers the instance's revision,
// which the server had applied too.
func checkFeedAfterAck(ops []Op, pages []FeedPage) []string {
	var writes []Op
	for _, o := range ops {
		if o.Status == OK && !o.Inferred && (o.Kind == Register || o.Kind == Deregister) {
			writes = append(writes, o)
		}
	}
	var bad []string
	for _, p := range pages {
		if p.Reset || p.More {
			continue
		}
		revs := map[int64]bool{}
		for _, c := range p.Changes {
			revs[c.Rev] = true
		}
		for _, w := range writes {
			if w.Server != p.Server || w.Return >= p.Call {
				continue
			}
			if w.Rev > p.Rev || changed(w) && w.Rev > p.Since && !revs[w.Rev] {
				bad = append(bad, fmt.Sprintf("the change feed of s%d missed an acknowledged write: /v1/changes?since=%d called at %.3fms answered revision %d with revisions %v, after\n    %s",
					p.Server, p.Since, float64(p.Call)/1e6, p.Rev, changeRevs(p.Changes), w))
				break
			}
		}
		if len(bad) >= 10 {
			break
		}
	}
	return bad
}

func changeRevs(cs []Change) []int64 {
	var out []int64
	for _, c := range cs {
		if len(out) == 0 || out[len(out)-1] != c.Rev {
			out = append(out, c.Rev)
		}
	}
	return out
}

// checkFeedReplay: a reader that followed a server's feed without a gap
// from before the run's ids were first written, replayed, gives the state
// the server lists at the end for those ids; its revisions only go up; and
// it holds every acknowledged change, whoever made it, with the id and
// value written.
func checkFeedReplay(ops []Op, pages []FeedPage, final []map[string]Seen) []string {
	readers := map[int][]FeedPage{}
	for _, p := range pages {
		if p.Follower {
			readers[p.Client] = append(readers[p.Client], p)
		}
	}
	writes := changedWrites(ops)
	ours := map[string]bool{}
	for _, o := range ops {
		if o.Kind != List {
			ours[o.ID] = true
		}
	}
	var bad []string
	for c, ps := range readers {
		whole := true
		state := map[string]Seen{}
		byRev := map[int64][]Change{}
		var last int64
		for i, p := range ps {
			if p.Reset || i > 0 && p.Since != ps[i-1].Rev {
				whole = false
				break
			}
			for _, ch := range p.Changes {
				if ch.Rev < last || ch.Rev <= p.Since || ch.Rev > p.Rev {
					bad = append(bad, fmt.Sprintf("feed reader %d of s%d: revision %d out of order (after %d, page since=%d revision=%d)", c, p.Server, ch.Rev, last, p.Since, p.Rev))
				}
				last = ch.Rev
				byRev[ch.Rev] = append(byRev[ch.Rev], ch)
				if ch.Delete {
					delete(state, ch.ID)
				} else {
					state[ch.ID] = Seen{ID: ch.ID, Value: ch.Value, Rev: ch.Rev}
				}
			}
		}
		if !whole {
			continue
		}
		server, start, end := ps[0].Server, ps[0].Since, ps[len(ps)-1].Rev
		for id := range state {
			if !ours[id] {
				delete(state, id) // another run's
			}
		}
		for _, w := range writes {
			if w.Rev > end || w.Rev <= start {
				continue
			}
			found := false
			for _, ch := range byRev[w.Rev] {
				if ch.ID == w.ID && ch.Delete == (w.Kind == Deregister) && (ch.Delete || ch.Value == w.Value) {
					found = true
				}
			}
			if !found && len(bad) < 20 {
				bad = append(bad, fmt.Sprintf("the change feed of s%d (read from %d to %d) lacks an acknowledged write; at revision %d it holds %v:\n    %s", server, start, end, w.Rev, byRev[w.Rev], w))
			}
		}
		if server < len(final) && final[server] != nil {
			want := final[server]
			for id, s := range want {
				if got, ok := state[id]; !ok || got != s {
					bad = append(bad, fmt.Sprintf("the change feed of s%d replayed to %d gives %s = %+v (present: %v); the server lists %+v", server, end, id, got, ok, s))
				}
			}
			for id, got := range state {
				if _, ok := want[id]; !ok {
					bad = append(bad, fmt.Sprintf("the change feed of s%d replayed to %d holds %s = %+v; the server does not list it", server, end, id, got))
				}
			}
		}
	}
	return bad
}
