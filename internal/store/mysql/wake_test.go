package mysql

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/mysql/mysqltest"
)

// wakePoll is the poll of the servers in these tests: long, so that a
// follower woken well within it was woken by an announcement.
const wakePoll = time.Second

// count reads a counter.
func count(c prometheus.Counter) float64 {
	var m dto.Metric
	c.Write(&m)
	return m.GetCounter().GetValue()
}

func openWaking(t *testing.T, url string) *Store {
	t.Helper()
	return open(t, url, Options{Poll: wakePoll, Wake: "127.0.0.1:0"})
}

// waitPeers waits (at most 5 s) until s announces to exactly want.
func waitPeers(t *testing.T, s *Store, want ...*Store) {
	t.Helper()
	var addrs []string
	for _, w := range want {
		addrs = append(addrs, w.wake.self)
	}
	slices.Sort(addrs)
	var got []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got = s.wake.peerAddrs(); slices.Equal(got, addrs) {
			return
		}
	}
	t.Fatalf("%s announces to %v, want %v", s.wake.self, got, addrs)
}

// followHead returns a feed of s from the store's current head.
func followHead(t *testing.T, s *Store) store.Feed {
	t.Helper()
	head, _, err := s.Head(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Follow(head)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// put commits one record on s and returns its revision.
func put(t *testing.T, s *Store, key string) int64 {
	t.Helper()
	res, err := s.Commit([]store.Txn{{Ops: []store.Op{{Kind: store.System, Key: key, Value: []byte("v")}}}}, true)
	if err != nil {
		t.Fatal(err)
	}
	return res[0].Revision
}

// parked is a follower blocked in Next from before each write, as a
// blocking query is: what its feed returns arrives on got, stamped when
// Next returned.
type parked struct {
	got chan applied
}

type applied struct {
	rev int64
	at  time.Time
	err error
}

func park(t *testing.T, f store.Feed) *parked {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &parked{got: make(chan applied, 1024)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cs, err := f.Next(ctx)
			a := applied{at: time.Now(), err: err}
			if err == nil {
				a.rev = cs[len(cs)-1].Revision
			}
			select {
			case p.got <- a:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return p
}

// await waits until p has applied rev and returns how long after start
// that was, failing after three polls: then not even the poll brought it.
// Whether announcements, not the poll, woke the follower is for the
// caller to judge over many writes (a stall of a loaded machine can hold
// any one wake-up past the poll).
func (p *parked) await(t *testing.T, rev int64, start time.Time) time.Duration {
	t.Helper()
	timeout := time.After(3 * wakePoll)
	for {
		select {
		case a := <-p.got:
			if a.err != nil {
				t.Fatalf("waiting for revision %d: %v", rev, a.err)
			}
			if a.rev >= rev {
				return a.at.Sub(start)
			}
		case <-timeout:
			t.Fatalf("revision %d not applied within %v: neither an announcement nor the poll brought it", rev, 3*wakePoll)
		}
	}
}

// settle lets the parked followers get back into their wait: past their
// read of the change table, so that only an announcement (or the poll,
// a second away) wakes them.
func settle() { time.Sleep(30 * time.Millisecond) }

// TestWriteOnOneServerWakesTheOthers: over three servers on MariaDB
// polling once a second, a commit on A wakes the followers of B and C
// within milliseconds, for 60 writes in a row; with C gone, A's commits
// still wake B; a fourth server joining late is announced to once the
// others' next renewal finds it; one that hears no announcements gets
// every change at its poll.
func TestWriteOnOneServerWakesTheOthers(t *testing.T) {
	url := mysqltest.URL(t, "")
	a, b, c := openWaking(t, url), openWaking(t, url), openWaking(t, url)
	waitPeers(t, a, b, c)
	waitPeers(t, b, a, c)
	fb, fc := park(t, followHead(t, b)), park(t, followHead(t, c))
	// A follower woken by an announcement takes the commit from memory; one
	// that catches up at its poll reads it from the change table.
	reads := count(b.reads) + count(c.reads)
	var lat []time.Duration
	late := 0
	for i := range 60 {
		settle()
		start := time.Now()
		rev := put(t, a, fmt.Sprint("k", i))
		for _, f := range []*parked{fb, fc} {
			d := f.await(t, rev, start)
			lat = append(lat, d)
			if d > wakePoll*9/10 {
				late++
			}
		}
		// Past 5% of the 120 wake-ups near a whole poll, the poll is doing
		// the work: fail now rather than after a minute of polls.
		if late > 6 {
			t.Fatalf("%d of %d wake-ups after %v or more: not woken by announcements (poll %v)", late, len(lat), wakePoll*9/10, wakePoll)
		}
	}
	slices.Sort(lat)
	p50, p95 := lat[len(lat)/2], lat[len(lat)*95/100]
	reads = count(b.reads) + count(c.reads) - reads
	t.Logf("commit on A to B's and C's followers: p50 %v, p95 %v, slowest %v, read from the change table %v (poll %v)", p50, p95, lat[len(lat)-5:], reads, wakePoll)
	// Under the poll by far even on a loaded machine; the poll alone
	// would give a p50 near half of it. A stall of the machine may hold
	// back a write or two (both followers); p95 leaves room for three.
	if p50 > wakePoll/20 || p95 > wakePoll/4 {
		t.Fatalf("wake p50 %v, p95 %v: not woken by announcements (poll %v)", p50, p95, wakePoll)
	}
	if n := count(b.wake.received); n < 60 {
		t.Fatalf("B accepted %v announcements after 60 commits on A", n)
	}
	// A follower's read at its poll may win the race with a datagram (the
	// commit is visible for a round trip before it is announced): under
	// stress-ng up to 4 of 120, a few more when writes slow down. Most must
	// come from memory.
	if reads > float64(len(lat)/4) {
		t.Fatalf("B's and C's followers read %v of %d commits from the change table: announcements did not wake them", reads, len(lat))
	}

	// C leaves: A's commits neither wait for it nor stop waking B.
	c.Close()
	var gone []time.Duration
	for i := range 10 {
		settle()
		start := time.Now()
		rev := put(t, a, fmt.Sprint("after-c-", i))
		if d := time.Since(start); d > wakePoll/2 {
			t.Fatalf("a commit took %v with a peer gone", d)
		}
		gone = append(gone, fb.await(t, rev, start))
	}
	// One of the ten allowed a stall of the loaded machine.
	slices.Sort(gone)
	if gone[8] > wakePoll/4 {
		t.Fatalf("B woken after %v with C gone", gone)
	}
	waitPeers(t, a, b) // C took itself out of sx_wake

	// D joins late: once A's renewal finds it, A's commits wake it. E
	// hears no announcements at all (none reach it): its poll still gets
	// it every change, in order.
	d := openWaking(t, url)
	e := open(t, url, Options{Poll: wakePoll / 5})
	fd, fe := park(t, followHead(t, d)), followHead(t, e)
	waitPeers(t, a, b, d)
	// Five writes, one of them allowed a stall of the loaded machine.
	var took []time.Duration
	first := int64(0)
	for i := range 5 {
		settle()
		start := time.Now()
		rev := put(t, a, fmt.Sprint("late-", i))
		if first == 0 {
			first = rev
		}
		took = append(took, fd.await(t, rev, start))
	}
	slices.Sort(took)
	if took[3] > wakePoll/4 {
		t.Fatalf("the late server woken after %v", took)
	}
	got, err := fe.Next(context.Background())
	if err != nil || len(got) == 0 || got[0].Revision != first || got[0].Ops[0].Key != "late-0" {
		t.Fatalf("the server without announcements read %+v, %v; want revision %d first", got, err, first)
	}
}

// TestAnnouncementsAuthenticatedAndOrdered: datagrams that are not
// announcements sealed with the cluster's key are counted and ignored; an
// announcement older than one heard (out of order, or replayed) wakes
// nothing; a server whose key differs cannot announce.
func TestAnnouncementsAuthenticatedAndOrdered(t *testing.T) {
	url := mysqltest.URL(t, "")
	a, b := openWaking(t, url), openWaking(t, url)
	to, err := net.ResolveUDPAddr("udp", b.wake.self)
	if err != nil {
		t.Fatal(err)
	}
	send := func(msg []byte) {
		if _, err := a.wake.conn.WriteToUDP(msg, to); err != nil {
			t.Fatal(err)
		}
	}
	// eventually waits (at most 2 s) for cond.
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
		}
	}

	notice := func(w *waker, rev int64) []byte { return w.seal(nil, announcement{first: rev, last: rev}) }
	msg := notice(a.wake, 10)
	forged := bytes.Clone(msg)
	forged[len(forged)-1] ^= 1
	other := &waker{key: make([]byte, 32)} // a key that is not the cluster's
	stranger := notice(other, 1000)
	carrying := a.wake.seal(nil, announcement{first: 7, last: 7, time: 1, changes: []store.Change{
		{Revision: 7, Time: 1, Ops: []store.Op{{Kind: store.KV, Key: "k", Value: []byte("v")}}}}})
	forgedChange := bytes.Clone(carrying)
	forgedChange[len(forgedChange)-wakeMACLen-1] = 'w' // the value
	send([]byte("hello"))
	send(forged)
	send(stranger)
	send(forgedChange)
	eventually("4 bad datagrams not all rejected", func() bool { return count(b.wake.rejected) == 4 })
	if h := b.wake.heard.Load(); h != 0 {
		t.Fatalf("B heard revision %d from bad datagrams", h)
	}
	if held, _, _ := b.recent.after(6); held != nil {
		t.Fatalf("B holds %+v from bad datagrams", held)
	}

	send(msg)
	eventually("announcement of 10 not heard", func() bool { return b.wake.heard.Load() == 10 })
	// B's followers wait on this channel; an older announcement must not
	// close it.
	_, _, wake := b.recent.after(1 << 62)
	msg = notice(a.wake, 5)
	send(msg)
	send(msg)
	eventually("announcements of 5 not received", func() bool { return count(b.wake.received) == 3 })
	select {
	case <-wake:
		t.Fatal("an announcement older than one heard woke the followers")
	default:
	}
	if h := b.wake.heard.Load(); h != 10 {
		t.Fatalf("B's newest heard revision went to %d", h)
	}
	// A commit's changes, sent three times, are held once.
	send(carrying)
	send(carrying)
	send(carrying)
	eventually("announcements carrying revision 7 not received", func() bool { return count(b.wake.received) == 6 })
	if n := count(b.wake.carried); n != 1 {
		t.Fatalf("revision 7 taken %v times", n)
	}
	held, _, _ := b.recent.after(6)
	if len(held) != 1 || held[0].Revision != 7 || string(held[0].Ops[0].Value) != "v" {
		t.Fatalf("B holds %+v after revision 6", held)
	}
	_, _, wake = b.recent.after(1 << 62)
	// An announcement of the version before (SXW1: the revision only)
	// still wakes, during a rolling upgrade.
	v1 := binary.BigEndian.AppendUint64(append([]byte(nil), wakeMagicV1[:]...), 11)
	send(a.wake.mac(v1))
	select {
	case <-wake:
	case <-time.After(2 * time.Second):
		t.Fatal("a newer announcement did not wake the followers")
	}
}

// TestWakeAddressRefused: an address other servers cannot reach back is
// refused at Open with the reason.
func TestWakeAddressRefused(t *testing.T) {
	url := mysqltest.URL(t, "")
	for addr, want := range map[string]string{
		"0.0.0.0:0":    "not an unspecified one",
		":7400":        "not an unspecified one",
		"nohost:x:y:z": `wake address "nohost:x:y:z"`,
	} {
		_, err := Open(context.Background(), url, Options{Wake: addr})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Open with Wake %q: %v, want %q", addr, err, want)
		}
	}
}

// BenchmarkWakeAnnouncement: one announcement carrying a KV put end to end
// on loopback, the sender's seal and send and the receiver's read, check
// and parse (no database).
func BenchmarkWakeAnnouncement(b *testing.B) {
	key := make([]byte, 32)
	ua := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}
	in, err := net.ListenUDP("udp", ua)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	out, err := net.ListenUDP("udp", ua)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	to := in.LocalAddr().(*net.UDPAddr)
	w := &waker{key: key}
	var msg []byte
	buf := make([]byte, maxWakeLen+1)
	// One KV put of a 64-byte value, as the bench's.
	ops := []store.Op{{Kind: store.KV, Key: "bench/key-0042", Value: bytes.Repeat([]byte("v"), 64)}}
	b.ReportAllocs()
	for i := range b.N {
		rev := int64(i + 1)
		msg = w.seal(msg[:0], announcement{first: rev, last: rev, time: 1, changes: []store.Change{{Revision: rev, Time: 1, Ops: ops}}})
		if _, err := out.WriteToUDP(msg, to); err != nil {
			b.Fatal(err)
		}
		n, _, err := in.ReadFromUDP(buf)
		if err != nil {
			b.Fatal(err)
		}
		if a, ok := w.open(buf[:n]); !ok || a.last != rev || len(a.changes) != 1 {
			b.Fatalf("announcement %d opened as %+v, %v", rev, a, ok)
		}
	}
}

// TestAnnouncementsLostReorderedDuplicated: two servers write at once
// while every announcement to a third goes through a lossy relay that
// drops a fifth of them, holds a fifth back to deliver after later ones,
// and sends a tenth twice; some commits are too big to carry their
// changes. The third server's follower must get exactly what the change
// table holds (read by a server that hears no announcements): every
// revision once, in order, with the same ops, values and times, having
// taken many commits from the datagrams and read the gaps.
func TestAnnouncementsLostReorderedDuplicated(t *testing.T) {
	url := mysqltest.URL(t, "")
	a, c := openWaking(t, url), openWaking(t, url)
	b := open(t, url, Options{Poll: 200 * time.Millisecond, Wake: "127.0.0.1:0"})
	ref := open(t, url, Options{Poll: 20 * time.Millisecond}) // reads the change table only
	waitPeers(t, a, b, c)
	waitPeers(t, c, a, b)

	relay, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	relayAddr := relay.LocalAddr().String()
	toB, err := net.ResolveUDPAddr("udp", b.wake.self)
	if err != nil {
		t.Fatal(err)
	}
	captured := make(chan []byte, 4096)
	filter := func(msg []byte, from *net.UDPAddr) bool {
		if from.String() == relayAddr {
			return true // what the relay delivers
		}
		select {
		case captured <- bytes.Clone(msg):
		default: // the relay is behind: a loss like any other
		}
		return false
	}
	b.wake.filter.Store(&filter)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var dropped, held, doubled atomic.Int64
	wg.Add(1)
	go func() { // the lossy network, seeded so that a failure replays
		defer wg.Done()
		rnd := rand.New(rand.NewPCG(46, 2))
		var later [][]byte
		deliver := func(m []byte) { relay.WriteToUDP(m, toB) }
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-captured:
				switch p := rnd.IntN(10); {
				case p < 2:
					dropped.Add(1)
				case p < 4:
					held.Add(1)
					later = append(later, m)
				case p < 5:
					doubled.Add(1)
					deliver(m)
					deliver(m)
				default:
					deliver(m)
				}
				// Held ones go after one to three later datagrams.
				if len(later) > 0 && rnd.IntN(3) == 0 {
					rnd.Shuffle(len(later), func(i, j int) { later[i], later[j] = later[j], later[i] })
					for _, m := range later {
						deliver(m)
					}
					later = later[:0]
				}
			}
		}
	}()

	from, _, err := ref.Head(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	// collect follows s from the start and sends what it gets on out.
	collect := func(s *Store) chan []store.Change {
		out := make(chan []store.Change, 4096)
		f, err := s.Follow(from)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer f.Close()
			for {
				cs, err := f.Next(ctx)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("follow: %v", err)
					}
					return
				}
				select {
				case out <- cs:
				case <-ctx.Done():
					return
				}
			}
		}()
		return out
	}
	gotB, gotRef := collect(b), collect(ref)

	// Two writers at once: commits of one to three txns of puts (some of
	// empty values, one in 25 too big for a datagram) and deletes.
	const commits = 150
	writers := make(chan error, 2)
	for w, s := range []*Store{a, c} {
		go func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 46))
			for i := range commits {
				var txns []store.Txn
				for range 1 + rnd.IntN(3) {
					var ops []store.Op
					for range 1 + rnd.IntN(3) {
						op := store.Op{Kind: store.KV, Key: fmt.Sprintf("w%d/%d", w, rnd.IntN(40))}
						switch p := rnd.IntN(10); {
						case p < 2: // a delete
						case p < 3:
							op.Value = []byte{}
						default:
							op.Value = []byte(fmt.Sprintf("value %d of %d", i, w))
						}
						if i%25 == 0 {
							op.Value = bytes.Repeat([]byte{'x'}, 9000)
						}
						ops = append(ops, op)
					}
					txns = append(txns, store.Txn{Ops: ops})
				}
				if _, err := s.Commit(txns, true); err != nil {
					writers <- err
					return
				}
			}
			writers <- nil
		}()
	}
	for range 2 {
		if err := <-writers; err != nil {
			t.Fatal(err)
		}
	}
	head, _, err := ref.Head(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}

	// read gathers a follower's changes up to head (at most 30 s),
	// failing on a revision out of order, twice or skipped.
	read := func(name string, got chan []store.Change) []store.Change {
		var all []store.Change
		pos := from
		deadline := time.After(30 * time.Second)
		for pos < head {
			select {
			case cs := <-got:
				for _, ch := range cs {
					if ch.Revision != pos+1 {
						t.Fatalf("%s: revision %d after %d", name, ch.Revision, pos)
					}
					pos = ch.Revision
					all = append(all, ch)
				}
			case <-deadline:
				t.Fatalf("%s reached revision %d of %d in 30 s", name, pos, head)
			}
		}
		return all
	}
	want, got := read("the change table's reader", gotRef), read("the announced-to server", gotB)
	if len(got) != len(want) {
		t.Fatalf("B got %d revisions, the change table %d", len(got), len(want))
	}
	for i := range want {
		w, g := want[i], got[i]
		if g.Revision != w.Revision || g.Time != w.Time || len(g.Ops) != len(w.Ops) {
			t.Fatalf("revision %d: B got time %d, %d ops; the change table: revision %d, time %d, %d ops", g.Revision, g.Time, len(g.Ops), w.Revision, w.Time, len(w.Ops))
		}
		for j := range w.Ops {
			wo, gop := w.Ops[j], g.Ops[j]
			if gop.Kind != wo.Kind || gop.Key != wo.Key || (gop.Value == nil) != (wo.Value == nil) || !bytes.Equal(gop.Value, wo.Value) {
				t.Fatalf("revision %d op %d: B got %c %q %q (nil %v); the change table %c %q %q (nil %v)", w.Revision, j,
					gop.Kind, gop.Key, gop.Value, gop.Value == nil, wo.Kind, wo.Key, wo.Value, wo.Value == nil)
			}
		}
	}
	carried, reads := count(b.wake.carried), count(b.reads)
	t.Logf("%d revisions in %d commits; relay dropped %d, held back %d, doubled %d; B took %v commits from datagrams and read the change table %v times",
		len(want), 2*commits, dropped.Load(), held.Load(), doubled.Load(), carried, reads)
	if carried < commits/2 || reads == 0 {
		t.Fatalf("B took %v commits from datagrams and read the change table %v times: the test did not exercise both", carried, reads)
	}
}
