package mysql

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sextant-mesh/sextant/internal/store"
)

// Commit announcements: after each commit a server sends it, in one UDP
// datagram, to every other server listening (sx_wake): its revisions and,
// when they fit in maxWakeLen bytes, its changes. A server that receives
// one keeps the changes with its recent commits (feed.go), so its
// followers apply them and wake their watchers without a database read;
// an announcement without changes (a commit too big for a datagram, or
// too many waiting to go) wakes them to read the change table at once.
// Correctness never depends on a datagram: a commit's changes are taken
// from memory only when they follow a follower's position without a gap
// (every revision up to a commit's first was committed before it, under
// the sequence lock), each revision is held once, and a follower that
// finds a gap, or hears nothing, reads the change table by revision as
// ever (at once on the next announcement, else at its poll). So a lost,
// late, duplicated or reordered datagram costs a read, never a change.

// wakeMagic starts every announcement (the format's version). A server of
// the version before sent wakeMagicV1 (a revision only): heard as an
// announcement without changes, during a rolling upgrade.
var (
	wakeMagic   = [4]byte{'S', 'X', 'W', '2'}
	wakeMagicV1 = [4]byte{'S', 'X', 'W', '1'}
)

const (
	// wakeMACLen is the truncated HMAC-SHA256 closing every announcement.
	wakeMACLen = 16
	// wakeV1Len is an SXW1 announcement's size: magic, revision, MAC.
	wakeV1Len = 4 + 8 + wakeMACLen
	// wakeHeaderLen: magic, first and last revision, commit time, flags.
	wakeHeaderLen = 4 + 8 + 8 + 8 + 1
	// maxWakeLen bounds a datagram: a commit whose changes take more goes
	// as an announcement without them. Loopback and most LANs carry it
	// (fragmented over a 1,500-byte MTU); a fragment lost costs a read.
	maxWakeLen = 8000
	// maxWakeQueue bounds the commits waiting for the announcer; beyond,
	// they go as one announcement without changes.
	maxWakeQueue = 1024
)

// wakeCarries flags an announcement that carries its commit's changes.
const wakeCarries = 1

// announcement is one commit as announced: revisions first..last,
// committed at time (unix ns), with its changes (nil: not carried).
type announcement struct {
	first, last int64
	time        int64
	changes     []store.Change
}

// wakeLease is how long a server stays in sx_wake without renewing; it
// renews every wakeRenew.
const (
	wakeLease = 5 * time.Second
	wakeRenew = time.Second
)

// waker is the store's announcer and listener.
type waker struct {
	s    *Store
	conn *net.UDPConn
	self string // the address registered in sx_wake
	key  []byte

	peers atomic.Pointer[[]*net.UDPAddr] // the other live listeners
	mu    sync.Mutex                     // guards queue
	queue []announcement                 // own commits to announce, oldest first
	kick  chan struct{}                  // capacity 1: queue grew
	heard atomic.Int64                   // newest revision a peer announced

	// filter, if set (tests), sees each datagram received, and where from,
	// before it is opened, and drops it by answering false.
	filter atomic.Pointer[func([]byte, *net.UDPAddr) bool]

	sent, received, rejected, carried prometheus.Counter
}

// startWake listens on addr (UDP), registers it and starts the waker's
// goroutines, which stop at Close.
func (s *Store) startWake(ctx context.Context, addr string) error {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return fmt.Errorf("mysql: wake address %q: %w", addr, err)
	}
	if ua.IP == nil || ua.IP.IsUnspecified() {
		return fmt.Errorf("mysql: wake address %q: give the host other servers reach this one at, not an unspecified one", addr)
	}
	conn, err := net.ListenUDP("udp", ua)
	if err != nil {
		return fmt.Errorf("mysql: listen for commit announcements on %s: %w", addr, err)
	}
	w := &waker{s: s, conn: conn, self: conn.LocalAddr().String(), kick: make(chan struct{}, 1)}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	w.sent = counter("sextant_store_wake_sent_total", "Commit announcements sent to other servers (one per peer).")
	w.received = counter("sextant_store_wake_received_total", "Commit announcements received from other servers and accepted.")
	w.rejected = counter("sextant_store_wake_rejected_total", "Datagrams received on the announcement address that were not valid announcements.")
	w.carried = counter("sextant_store_wake_carried_total", "Other servers' commits taken from their announcements without a read of the change table.")
	if s.opts.Metrics != nil {
		for _, c := range []prometheus.Collector{w.sent, w.received, w.rejected, w.carried} {
			if err := s.opts.Metrics.Register(c); err != nil {
				conn.Close()
				return fmt.Errorf("mysql: register metrics: %w", err)
			}
		}
	}
	if w.key, err = s.wakeKey(ctx); err != nil {
		conn.Close()
		return err
	}
	// Registered before Open returns, so peers find this server from their
	// next renewal on; until then the poll covers it.
	if err := w.renew(ctx); err != nil {
		conn.Close()
		return err
	}
	s.wake = w
	s.wg.Add(3)
	go func() { defer s.wg.Done(); w.listen() }()
	go func() { defer s.wg.Done(); w.announceLoop() }()
	go func() { defer s.wg.Done(); w.renewLoop() }()
	return nil
}

// wakeKey returns the cluster's announcement key, creating it if missing.
func (s *Store) wakeKey(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	k := make([]byte, 32)
	rand.Read(k)
	if _, err := s.db.ExecContext(ctx, "INSERT IGNORE INTO sx_wake_key (id, k) VALUES (1, ?)", k); err != nil {
		return nil, unavailable("create the announcement key", err)
	}
	if err := s.db.QueryRowContext(ctx, "SELECT k FROM sx_wake_key WHERE id = 1").Scan(&k); err != nil {
		return nil, unavailable("read the announcement key", err)
	}
	if len(k) != 32 {
		return nil, fmt.Errorf("mysql: the announcement key in sx_wake_key has %d bytes, want 32", len(k))
	}
	return k, nil
}

// renew extends this server's entry in sx_wake and reads the other live
// listeners.
func (w *waker) renew(ctx context.Context) error {
	s := w.s
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	if _, err := s.db.ExecContext(ctx, "INSERT INTO sx_wake (addr, until_us) VALUES (?, "+nowMicros+" + ?) ON DUPLICATE KEY UPDATE until_us = VALUES(until_us)",
		w.self, wakeLease.Microseconds()); err != nil {
		return unavailable("register the announcement address", err)
	}
	rows, err := s.db.QueryContext(ctx, "SELECT addr FROM sx_wake WHERE until_us > "+nowMicros+" AND addr <> ? ORDER BY addr", w.self)
	if err != nil {
		return unavailable("list announcement addresses", err)
	}
	defer rows.Close()
	var peers []*net.UDPAddr
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			return fmt.Errorf("mysql: list announcement addresses: %w", err)
		}
		ua, err := net.ResolveUDPAddr("udp", a)
		if err != nil {
			s.log.Warn("skipping an announcement address", "addr", a, "err", err)
			continue
		}
		peers = append(peers, ua)
	}
	if err := rows.Err(); err != nil {
		return unavailable("list announcement addresses", err)
	}
	w.peers.Store(&peers)
	// Entries of servers gone for a while: a restarted server listens on
	// a new port.
	if _, err := s.db.ExecContext(ctx, "DELETE FROM sx_wake WHERE until_us < "+nowMicros+" - ?", time.Minute.Microseconds()); err != nil {
		return unavailable("sweep announcement addresses", err)
	}
	return nil
}

func (w *waker) renewLoop() {
	t := time.NewTicker(wakeRenew)
	defer t.Stop()
	for {
		select {
		case <-w.s.done:
			// A clean stop: the others stop announcing here at once.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			w.s.db.ExecContext(ctx, "DELETE FROM sx_wake WHERE addr = ?", w.self)
			cancel()
			return
		case <-t.C:
		}
		// A failed renewal keeps the last peers: announcing to a server
		// that left costs a datagram.
		if err := w.renew(context.Background()); err != nil && !w.s.closed.Load() {
			w.s.log.Warn("renewing the announcement address failed", "err", err)
		}
	}
}

// announce queues a commit (its changes, at consecutive revisions) for
// the peers; it never blocks (the committer calls it) and never waits for
// the announcer: past maxWakeQueue waiting commits, they go as one
// announcement without changes. The changes are shared with the local
// followers, read only.
func (w *waker) announce(changes []store.Change, time int64) {
	a := announcement{first: changes[0].Revision, last: changes[len(changes)-1].Revision, time: time, changes: changes}
	w.mu.Lock()
	if len(w.queue) >= maxWakeQueue {
		w.queue[0] = announcement{first: w.queue[0].first, last: a.last, time: time}
		clear(w.queue[1:])
		w.queue = w.queue[:1]
	} else {
		w.queue = append(w.queue, a)
	}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// announceLoop sends each queued commit to every peer. A send to a peer
// that is down or slow fails or is dropped by the network, never waits
// for it.
func (w *waker) announceLoop() {
	var (
		batch []announcement
		buf   = make([]byte, 0, maxWakeLen)
	)
	for {
		select {
		case <-w.s.done:
			return
		case <-w.kick:
		}
		w.mu.Lock()
		batch, w.queue = w.queue, batch[:0]
		w.mu.Unlock()
		for i, a := range batch {
			buf = w.seal(buf[:0], a)
			for _, p := range *w.peers.Load() {
				if _, err := w.conn.WriteToUDP(buf, p); err == nil {
					w.sent.Inc()
				}
			}
			batch[i] = announcement{} // let the changes go
		}
	}
}

// seal appends to dst the datagram announcing a, with its changes when
// they fit in maxWakeLen bytes, else without.
func (w *waker) seal(dst []byte, a announcement) []byte {
	dst = append(dst, wakeMagic[:]...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(a.first))
	dst = binary.BigEndian.AppendUint64(dst, uint64(a.last))
	dst = binary.BigEndian.AppendUint64(dst, uint64(a.time))
	flags := len(dst)
	dst = append(dst, 0)
	if a.changes != nil {
		if body, ok := appendChanges(dst, a.changes); ok {
			dst = body
			dst[flags] = wakeCarries
		}
	}
	return w.mac(dst)
}

// appendChanges appends the changes' encoding to dst: per revision, its
// count of ops, and per op its kind, its key's length and key, and its
// value's length plus one (0: a delete) and value, lengths as uvarints.
// It gives up (false) when the datagram would pass maxWakeLen.
func appendChanges(dst []byte, changes []store.Change) ([]byte, bool) {
	for _, c := range changes {
		dst = binary.AppendUvarint(dst, uint64(len(c.Ops)))
		for _, op := range c.Ops {
			if len(dst)+1+2*binary.MaxVarintLen64+len(op.Key)+len(op.Value)+wakeMACLen > maxWakeLen {
				return dst, false
			}
			dst = append(dst, byte(op.Kind))
			dst = binary.AppendUvarint(dst, uint64(len(op.Key)))
			dst = append(dst, op.Key...)
			if op.Value == nil {
				dst = binary.AppendUvarint(dst, 0)
			} else {
				dst = binary.AppendUvarint(dst, uint64(len(op.Value))+1)
				dst = append(dst, op.Value...)
			}
		}
	}
	return dst, true
}

// mac appends the truncated HMAC of msg under the cluster's key.
func (w *waker) mac(msg []byte) []byte {
	m := hmac.New(sha256.New, w.key)
	m.Write(msg)
	return m.Sum(msg)[:len(msg)+wakeMACLen]
}

// open checks an announcement's MAC, then parses it (outside input: only
// a datagram sealed with the cluster's key is parsed at all).
func (w *waker) open(msg []byte) (announcement, bool) {
	if len(msg) < 4+wakeMACLen || len(msg) > maxWakeLen {
		return announcement{}, false
	}
	body, sum := msg[:len(msg)-wakeMACLen], msg[len(msg)-wakeMACLen:]
	m := hmac.New(sha256.New, w.key)
	m.Write(body)
	if !hmac.Equal(m.Sum(nil)[:wakeMACLen], sum) {
		return announcement{}, false
	}
	a, err := parseAnnouncement(body)
	return a, err == nil
}

// parseAnnouncement decodes an announcement without its MAC.
func parseAnnouncement(b []byte) (announcement, error) {
	if len(b) == wakeV1Len-wakeMACLen && bytes.Equal(b[:4], wakeMagicV1[:]) {
		rev := int64(binary.BigEndian.Uint64(b[4:12]))
		if rev <= 0 {
			return announcement{}, errors.New("mysql: announcement: revision not positive")
		}
		return announcement{first: rev, last: rev}, nil
	}
	if len(b) < wakeHeaderLen || !bytes.Equal(b[:4], wakeMagic[:]) {
		return announcement{}, errors.New("mysql: announcement: not SXW2")
	}
	a := announcement{
		first: int64(binary.BigEndian.Uint64(b[4:12])),
		last:  int64(binary.BigEndian.Uint64(b[12:20])),
		time:  int64(binary.BigEndian.Uint64(b[20:28])),
	}
	flags := b[28]
	b = b[wakeHeaderLen:]
	if a.first <= 0 || a.last < a.first {
		return announcement{}, fmt.Errorf("mysql: announcement: revisions %d..%d", a.first, a.last)
	}
	switch flags {
	case 0:
		if len(b) != 0 {
			return announcement{}, errors.New("mysql: announcement: changes without the flag")
		}
		return a, nil
	case wakeCarries:
	default:
		return announcement{}, fmt.Errorf("mysql: announcement: flags %#x", flags)
	}
	// Each revision takes at least 4 bytes (a count and one op's kind and
	// two lengths): a count of revisions the body cannot hold is refused
	// before anything is allocated for it.
	if uint64(a.last-a.first) >= uint64(len(b)/4) {
		return announcement{}, fmt.Errorf("mysql: announcement: %d revisions in %d bytes", a.last-a.first+1, len(b))
	}
	uvarint := func(what string) (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, fmt.Errorf("mysql: announcement: bad %s", what)
		}
		b = b[n:]
		return v, nil
	}
	a.changes = make([]store.Change, 0, a.last-a.first+1)
	for rev := a.first; rev <= a.last; rev++ {
		nops, err := uvarint("count of ops")
		if err != nil {
			return announcement{}, err
		}
		if nops == 0 || nops > uint64(len(b)/3) {
			return announcement{}, fmt.Errorf("mysql: announcement: revision %d has %d ops in %d bytes", rev, nops, len(b))
		}
		c := store.Change{Revision: rev, Time: a.time, Ops: make([]store.Op, 0, nops)}
		for range nops {
			if len(b) == 0 || !store.Kind(b[0]).Valid() {
				return announcement{}, fmt.Errorf("mysql: announcement: revision %d: bad kind", rev)
			}
			op := store.Op{Kind: store.Kind(b[0])}
			b = b[1:]
			n, err := uvarint("key length")
			if err != nil {
				return announcement{}, err
			}
			if n > uint64(len(b)) {
				return announcement{}, fmt.Errorf("mysql: announcement: revision %d: key of %d bytes in %d", rev, n, len(b))
			}
			op.Key, b = string(b[:n]), b[n:]
			if n, err = uvarint("value length"); err != nil {
				return announcement{}, err
			}
			if n > 0 {
				if n-1 > uint64(len(b)) {
					return announcement{}, fmt.Errorf("mysql: announcement: revision %d: value of %d bytes in %d", rev, n-1, len(b))
				}
				op.Value, b = bytes.Clone(b[:n-1]), b[n-1:]
				if op.Value == nil {
					op.Value = []byte{} // a put of an empty value, not a delete
				}
			}
			c.Ops = append(c.Ops, op)
		}
		a.changes = append(a.changes, c)
	}
	if len(b) != 0 {
		return announcement{}, fmt.Errorf("mysql: announcement: %d bytes after the changes", len(b))
	}
	return a, nil
}

// listen takes each announcement in: the changes it carries go to the
// recent commits (feed.go), which wakes the followers if they are new;
// one without changes of a revision newer than any heard before wakes
// them to read the change table (an older one, out of order or replayed,
// says nothing new). It ends when Close closes the socket.
func (w *waker) listen() {
	// One byte more than the bound: a datagram that fills it is too big
	// (the read truncates it silently).
	buf := make([]byte, maxWakeLen+1)
	for {
		n, from, err := w.conn.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if f := w.filter.Load(); f != nil && !(*f)(buf[:n], from) {
			continue
		}
		a, ok := w.open(buf[:n])
		if !ok {
			w.rejected.Inc()
			continue
		}
		w.received.Inc()
		if a.changes != nil && w.s.recent.add(a.changes) {
			w.carried.Inc()
		}
		if w.heard.Load() < a.last {
			w.heard.Store(a.last) // this goroutine is the only writer
			if a.changes == nil {
				w.s.recent.nudge()
			}
		}
	}
}

// peerAddrs returns the addresses announcements go to (tests).
func (w *waker) peerAddrs() []string {
	var out []string
	for _, p := range *w.peers.Load() {
		out = append(out, p.String())
	}
	return slices.Sorted(slices.Values(out))
}
