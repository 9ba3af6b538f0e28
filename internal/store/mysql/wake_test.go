package mysql

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
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
// that was, failing after a whole poll: then no announcement woke it.
func (p *parked) await(t *testing.T, rev int64, start time.Time) time.Duration {
	t.Helper()
	timeout := time.After(wakePoll * 9 / 10)
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
			t.Fatalf("revision %d not applied within %v: no announcement woke the follower", rev, wakePoll*9/10)
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
	var lat []time.Duration
	for i := range 60 {
		settle()
		start := time.Now()
		rev := put(t, a, fmt.Sprint("k", i))
		lat = append(lat, fb.await(t, rev, start), fc.await(t, rev, start))
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	t.Logf("commit on A to B's and C's followers: p50 %v, p99 %v, slowest %v (poll %v)", p50, p99, lat[len(lat)-5:], wakePoll)
	// Under the poll by far even on a loaded machine; the poll alone
	// would give a p50 near half of it.
	if p50 > wakePoll/20 || p99 > wakePoll/4 {
		t.Fatalf("wake p50 %v, p99 %v: not woken by announcements (poll %v)", p50, p99, wakePoll)
	}
	if n := count(b.wake.received); n < 60 {
		t.Fatalf("B accepted %v announcements after 60 commits on A", n)
	}

	// C leaves: A's commits neither wait for it nor stop waking B.
	c.Close()
	for i := range 10 {
		settle()
		start := time.Now()
		rev := put(t, a, fmt.Sprint("after-c-", i))
		if d := time.Since(start); d > wakePoll/2 {
			t.Fatalf("a commit took %v with a peer gone", d)
		}
		if d := fb.await(t, rev, start); d > wakePoll/4 {
			t.Fatalf("B woken after %v with C gone", d)
		}
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

	var msg [wakeLen]byte
	a.wake.seal(msg[:], 10)
	forged := msg
	forged[len(forged)-1] ^= 1
	other := &waker{key: make([]byte, 32)} // a key that is not the cluster's
	var stranger [wakeLen]byte
	other.seal(stranger[:], 1000)
	send([]byte("hello"))
	send(forged[:])
	send(stranger[:])
	eventually("3 bad datagrams not all rejected", func() bool { return count(b.wake.rejected) == 3 })
	if h := b.wake.heard.Load(); h != 0 {
		t.Fatalf("B heard revision %d from bad datagrams", h)
	}

	send(msg[:])
	eventually("announcement of 10 not heard", func() bool { return b.wake.heard.Load() == 10 })
	// B's followers wait on this channel; an older announcement must not
	// close it.
	_, _, wake := b.local.after(1 << 62)
	a.wake.seal(msg[:], 5)
	send(msg[:])
	send(msg[:])
	eventually("announcements of 5 not received", func() bool { return count(b.wake.received) == 3 })
	select {
	case <-wake:
		t.Fatal("an announcement older than one heard woke the followers")
	default:
	}
	if h := b.wake.heard.Load(); h != 10 {
		t.Fatalf("B's newest heard revision went to %d", h)
	}
	a.wake.seal(msg[:], 11)
	send(msg[:])
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

// BenchmarkWakeAnnouncement: one announcement end to end on loopback, the
// sender's seal and send and the receiver's read and check, without the
// change-table read it triggers (no database).
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
	var msg [wakeLen]byte
	buf := make([]byte, 512)
	b.ReportAllocs()
	for i := range b.N {
		w.seal(msg[:], int64(i+1))
		if _, err := out.WriteToUDP(msg[:], to); err != nil {
			b.Fatal(err)
		}
		n, _, err := in.ReadFromUDP(buf)
		if err != nil {
			b.Fatal(err)
		}
		if rev, ok := w.open(buf[:n]); !ok || rev != int64(i+1) {
			b.Fatalf("announcement %d opened as %d, %v", i+1, rev, ok)
		}
	}
}
