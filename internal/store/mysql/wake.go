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
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Commit announcements: after each commit a server sends its new revision
// in one UDP datagram to every other server listening (sx_wake), and a
// server that receives one wakes its followers at once instead of at their
// next poll. The poll stays the safety net: an announcement lost, late,
// forged or out of order costs at most one poll of delay, never a change,
// because an announcement only says "read the change table now"; the
// followers read by revision as ever.

// wakeMagic starts every announcement (the format's version).
var wakeMagic = [4]byte{'S', 'X', 'W', '1'}

// wakeLen is an announcement's size: magic, revision, truncated HMAC.
const wakeLen = 4 + 8 + 16

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

	peers   atomic.Pointer[[]*net.UDPAddr] // the other live listeners
	pending atomic.Int64                   // newest own revision to announce
	kick    chan struct{}                  // capacity 1: pending moved
	heard   atomic.Int64                   // newest revision a peer announced

	sent, received, rejected prometheus.Counter
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
	if s.opts.Metrics != nil {
		for _, c := range []prometheus.Collector{w.sent, w.received, w.rejected} {
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

// announce queues revision rev for the peers; it never blocks (the
// committer calls it). Announcements coalesce: only the newest goes.
func (w *waker) announce(rev int64) {
	for {
		cur := w.pending.Load()
		if rev <= cur || w.pending.CompareAndSwap(cur, rev) {
			break
		}
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// announceLoop sends the newest pending revision to every peer. A send to
// a peer that is down or slow fails or is dropped by the network, never
// waits for it.
func (w *waker) announceLoop() {
	var msg [wakeLen]byte
	var last int64
	for {
		select {
		case <-w.s.done:
			return
		case <-w.kick:
		}
		rev := w.pending.Load()
		if rev <= last {
			continue
		}
		last = rev
		w.seal(msg[:], rev)
		for _, p := range *w.peers.Load() {
			if _, err := w.conn.WriteToUDP(msg[:], p); err == nil {
				w.sent.Inc()
			}
		}
	}
}

// seal writes the announcement of rev into msg (wakeLen bytes).
func (w *waker) seal(msg []byte, rev int64) {
	copy(msg, wakeMagic[:])
	binary.BigEndian.PutUint64(msg[4:12], uint64(rev))
	m := hmac.New(sha256.New, w.key)
	m.Write(msg[:12])
	copy(msg[12:], m.Sum(nil)[:16])
}

// open checks an announcement and returns its revision.
func (w *waker) open(msg []byte) (int64, bool) {
	if len(msg) != wakeLen || !bytes.Equal(msg[:4], wakeMagic[:]) {
		return 0, false
	}
	m := hmac.New(sha256.New, w.key)
	m.Write(msg[:12])
	if !hmac.Equal(m.Sum(nil)[:16], msg[12:]) {
		return 0, false
	}
	rev := int64(binary.BigEndian.Uint64(msg[4:12]))
	return rev, rev > 0
}

// listen wakes the followers for each announcement of a revision newer
// than any heard before; an older one (out of order, or replayed) says
// nothing new. It ends when Close closes the socket.
func (w *waker) listen() {
	buf := make([]byte, 512)
	for {
		n, _, err := w.conn.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		rev, ok := w.open(buf[:n])
		if !ok {
			w.rejected.Inc()
			continue
		}
		w.received.Inc()
		if w.heard.Load() < rev {
			w.heard.Store(rev) // this goroutine is the only writer
			w.s.local.nudge()
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
