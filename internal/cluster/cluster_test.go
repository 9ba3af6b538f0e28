package cluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sextant-mesh/sextant/internal/store/mysql"
	"github.com/sextant-mesh/sextant/internal/store/mysql/mysqltest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}

// TestRendezvous: every id has one owner among the members; a member
// leaving moves only its own ids, spread over the others; shares are
// about even.
func TestRendezvous(t *testing.T) {
	three := []string{"a", "b", "c"}
	two := []string{"a", "c"}
	count := map[string]int{}
	moved := 0
	for i := range 30000 {
		id := fmt.Sprintf("instance-%d", i)
		o3, o2 := OwnerOf(three, id), OwnerOf(two, id)
		count[o3]++
		if o3 != "b" && o3 != o2 {
			t.Fatalf("%s moved from %s to %s when b left", id, o3, o2)
		}
		if o3 == "b" {
			moved++
		}
	}
	for _, m := range three {
		if c := count[m]; c < 9000 || c > 11000 {
			t.Fatalf("uneven shares %v", count)
		}
	}
	if OwnerOf(nil, "x") != "" || OwnerOf([]string{"c", "a", "b"}, "x") != OwnerOf(three, "x") {
		t.Fatal("owner depends on member order or exists without members")
	}
}

func TestBeatsCodec(t *testing.T) {
	in := map[string]int64{"a": 1, "bb": -5, "ccc": time.Now().UnixNano()}
	got := map[string]int64{}
	if err := decodeBeats(appendBeats(nil, in), func(id string, at int64) { got[id] = at }); err != nil || fmt.Sprint(got) != fmt.Sprint(in) {
		t.Fatalf("round trip: %v %v", got, err)
	}
	for _, bad := range [][]byte{nil, {2}, {1, 5, 'a'}, {1, 1, 'a'}} {
		if err := decodeBeats(bad, func(string, int64) {}); err == nil {
			t.Errorf("decodeBeats(%q) accepted", bad)
		}
	}
}

// FuzzBeats: decodeBeats never panics, and what it accepts re-encodes.
func FuzzBeats(f *testing.F) {
	f.Add(appendBeats(nil, map[string]int64{"a": 1}))
	f.Add([]byte{1, 200, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		m := map[string]int64{}
		if decodeBeats(b, func(id string, at int64) { m[id] = at }) == nil {
			back := map[string]int64{}
			if err := decodeBeats(appendBeats(nil, m), func(id string, at int64) { back[id] = at }); err != nil || len(back) != len(m) {
				t.Fatalf("re-encoding %v: %v", m, err)
			}
		}
	})
}

// sink records relayed heartbeats.
type sink struct {
	mu    sync.Mutex
	beats map[string]int64
}

func (s *sink) Beat(id string, at int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.beats == nil {
		s.beats = map[string]int64{}
	}
	s.beats[id] = at
}
func (s *sink) Revision() int64 { return 0 }
func (s *sink) got(id string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.beats[id]
}

func waitFor(t *testing.T, what string, limit time.Duration, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(limit); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, limit)
		}
	}
}

// TestMembersOverMariaDB: members on one real database see each other,
// split the instances between them, relay heartbeats to the owner, and
// take over a member that stops renewing once its lease ends, or at once
// when it leaves.
func TestMembersOverMariaDB(t *testing.T) {
	url := mysqltest.URL(t, "")
	st, err := mysql.Open(context.Background(), url, mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	opts := func(id string) Options {
		return Options{ID: id, Lease: 1500 * time.Millisecond, Renew: 200 * time.Millisecond, RelayEvery: 50 * time.Millisecond}
	}
	ms := []*Member{New(st, opts("m1")), New(st, opts("m2")), New(st, opts("m3"))}
	sinks := []*sink{{}, {}, {}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cancels := make([]context.CancelFunc, 3)
	done := make([]chan struct{}, 3)
	defer func() {
		cancel()
		for _, d := range done {
			<-d
		}
	}()
	for i, m := range ms {
		mctx, c := context.WithCancel(ctx)
		cancels[i], done[i] = c, make(chan struct{})
		go func() { defer close(done[i]); m.Run(mctx, sinks[i]) }()
	}
	for _, m := range ms {
		waitFor(t, m.ID()+" sees three members", 5*time.Second, func() bool { return len(m.Members()) == 3 })
		if !m.Ready() {
			t.Fatalf("%s not ready at revision 0 of an empty store", m.ID())
		}
	}
	// Each id has exactly one owner, the same for everyone.
	var ofM2 string
	for i := range 300 {
		id := fmt.Sprintf("i%d", i)
		n := 0
		for _, m := range ms {
			if m.Owns(id) {
				n++
			}
		}
		if n != 1 || ms[0].Owner(id) != ms[2].Owner(id) {
			t.Fatalf("%s owned by %d members", id, n)
		}
		if ofM2 == "" && ms[1].Owns(id) {
			ofM2 = id
		}
	}
	// A heartbeat received by m1 for an instance m2 judges reaches m2.
	at := time.Now().UnixNano()
	ms[0].Relay(ofM2, at)
	waitFor(t, "the relayed heartbeat reaches its owner", 5*time.Second, func() bool { return sinks[1].got(ofM2) == at })
	waitFor(t, "the owner has heard until the relayed heartbeat", 5*time.Second, func() bool { return ms[1].HeardUntil() >= at })
	// m2 stops renewing (its goroutine ends without leaving: kill -9);
	// the others take its instances once its lease ends.
	moved := ms[0].Moved()
	for len(moved) > 0 {
		<-moved
	}
	cancels[1]()
	<-done[1]
	// Its clean leave deleted its row, and the others may have seen it
	// leave already: put it back with a long lease until both see it
	// again, then renew it once more as a last renewal with its 1.5 s
	// lease; nothing renews it after that. (Timing from the put-back
	// alone measured nothing when the others had dropped it before the
	// put-back: a loaded machine stretched that window.)
	if _, err := st.Renew(context.Background(), "m2", "", time.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "m1 and m3 see m2 back", 10*time.Second, func() bool { return len(ms[0].Members()) == 3 && len(ms[2].Members()) == 3 })
	start := time.Now()
	if _, err := st.Renew(context.Background(), "m2", "", time.Now(), 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "m1 and m3 drop m2", 6*time.Second, func() bool { return len(ms[0].Members()) == 2 && len(ms[2].Members()) == 2 })
	if d := time.Since(start); d < time.Second {
		t.Fatalf("m2 dropped %v after its last renewal, before its 1.5s lease ended", d)
	}
	if !ms[0].Owns(ofM2) && !ms[2].Owns(ofM2) {
		t.Fatalf("nobody judges %s after m2 left", ofM2)
	}
	select {
	case <-moved:
	default:
		t.Fatal("m1 not told that ownership moved")
	}
	// A clean leave hands over at once.
	cancels[2]()
	waitFor(t, "m1 alone after m3 left", 2*time.Second, func() bool { return len(ms[0].Members()) == 1 })
}

// TestLeaseLapsesWhileTheStoreStalls: a member whose round trips hang (its
// connections to the database stall: nothing answers, nothing closes)
// judges nothing from before the moment the others take its instances
// over, relays the heartbeats it receives to the new judges meanwhile,
// and judges again once it renews.
func TestLeaseLapsesWhileTheStoreStalls(t *testing.T) {
	name := mysqltest.Database(t)
	proxy := mysqltest.NewProxy(t, mysqltest.Addr())
	open := func(addr string) *mysql.Store {
		st, err := mysql.Open(context.Background(), fmt.Sprintf("mysql://root@tcp(%s)/%s", addr, name), mysql.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	// The stall must outlast the store's own timeout of a round trip
	// (10s) for the old member to keep judging: it does not have to.
	slow, direct := open(proxy.Addr()), open(mysqltest.Addr())
	opts := func(id string) Options {
		return Options{ID: id, Lease: 1500 * time.Millisecond, Renew: 200 * time.Millisecond, RelayEvery: 50 * time.Millisecond}
	}
	m1, m2 := New(slow, opts("m1")), New(direct, opts("m2"))
	s1, s2 := &sink{}, &sink{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); proxy.Restore(); wg.Wait() }()
	wg.Add(2)
	go func() { defer wg.Done(); m1.Run(ctx, s1) }()
	go func() { defer wg.Done(); m2.Run(ctx, s2) }()
	for _, m := range []*Member{m1, m2} {
		waitFor(t, m.ID()+" sees two members", 5*time.Second, func() bool { return len(m.Members()) == 2 })
	}
	var ids, ofM1 []string
	for i := range 200 {
		id := fmt.Sprintf("i%d", i)
		ids = append(ids, id)
		if m1.Owns(id) {
			ofM1 = append(ofM1, id)
		}
	}
	if len(ofM1) == 0 {
		t.Fatal("m1 judges none of 200 instances")
	}
	term := m1.Term()

	proxy.Stall()
	stalled := time.Now().UnixNano()
	// m2 drops m1 once m1's lease ends in the database; from then on m2
	// judges everything, so m1 must judge nothing any more.
	waitFor(t, "m2 takes over", 10*time.Second, func() bool { return len(m2.Members()) == 1 })
	// Its collection is stuck too: it must not claim to have every
	// relayed heartbeat from after the stall.
	if h := m1.HeardUntil(); h >= stalled {
		t.Fatalf("m1 heard until %v after the stall began, with its collection stuck", time.Duration(h-stalled))
	}
	for _, id := range ids {
		if m1.Owns(id) {
			t.Fatalf("m1 still judges %s after m2 took it over (m1's store stalled, its lease lapsed)", id)
		}
	}
	if m1.Term() != 0 {
		t.Fatalf("m1 is in term %d without a lease", m1.Term())
	}
	// A heartbeat m1 receives now goes to m2, once m1's store answers.
	at := time.Now().UnixNano()
	m1.Relay(ofM1[0], at)
	time.Sleep(300 * time.Millisecond) // m1's round trips stay stuck past their bound
	proxy.Restore()
	waitFor(t, "the heartbeat m1 received reaches m2", 10*time.Second, func() bool { return s2.got(ofM1[0]) == at })
	for _, m := range []*Member{m1, m2} {
		waitFor(t, m.ID()+" sees two members again", 10*time.Second, func() bool { return len(m.Members()) == 2 })
	}
	waitFor(t, "m1 judges its share again", 5*time.Second, func() bool { return m1.Owns(ofM1[0]) })
	// In a new term: its registry gives what it judges again a grace period.
	if tm := m1.Term(); tm == 0 || tm == term {
		t.Fatalf("m1 judges again in term %d, was %d before its lease lapsed", tm, term)
	}
}
