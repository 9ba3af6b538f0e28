package mysql

import (
	"context"
	"fmt"
	"time"
)

// What a cluster keeps in the database besides records: one lease per
// server (sx_member) and the heartbeats relayed to the server that judges
// an instance (sx_beat). Leases are judged by the database's clock, so
// servers need not agree on theirs.

const nowMicros = "CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)"

// Renew extends the lease of server id to lease from now (the database's
// clock) and returns the ids of the servers whose leases are live, sorted,
// this one included. It measures the round trip.
func (s *Store) Renew(ctx context.Context, id, addr string, started time.Time, lease time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	start := time.Now()
	if _, err := s.db.ExecContext(ctx, `INSERT INTO sx_member (id, addr, started_us, lease_until_us) VALUES (?, ?, ?, `+nowMicros+` + ?)
ON DUPLICATE KEY UPDATE addr = VALUES(addr), started_us = VALUES(started_us), lease_until_us = VALUES(lease_until_us)`,
		id, addr, started.UnixMicro(), lease.Microseconds()); err != nil {
		return nil, unavailable("renew the lease of "+id, err)
	}
	s.rtt.Observe(time.Since(start).Seconds())
	rows, err := s.db.QueryContext(ctx, "SELECT id FROM sx_member WHERE lease_until_us > "+nowMicros+" ORDER BY id")
	if err != nil {
		return nil, unavailable("list members", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("mysql: list members: %w", err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable("list members", err)
	}
	s.touch()
	return out, nil
}

// Leave ends the lease of server id at once (a clean shutdown): the others
// take over its instances at their next renewal.
func (s *Store) Leave(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	_, err := s.db.ExecContext(ctx, "DELETE FROM sx_member WHERE id = ?", id)
	return unavailable("leave the cluster", err)
}

// Relay stores beats (an encoding the caller owns) for server owner.
func (s *Store) Relay(ctx context.Context, owner, sender string, beats []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	_, err := s.db.ExecContext(ctx, "INSERT INTO sx_beat (owner, sender, created_us, beats) VALUES (?, ?, "+nowMicros+", ?)", owner, sender, beats)
	if err == nil {
		s.touch()
	}
	return unavailable("relay heartbeats to "+owner, err)
}

// Collect takes every batch of beats relayed to owner: it reads them and
// deletes what it read (by sequence number, so a batch that commits while
// it reads stays for the next call).
func (s *Store) Collect(ctx context.Context, owner string) ([][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, "SELECT seq, beats FROM sx_beat WHERE owner = ? ORDER BY seq LIMIT 1000", owner)
	if err != nil {
		return nil, unavailable("collect heartbeats", err)
	}
	var (
		out  [][]byte
		seqs []any
	)
	for rows.Next() {
		var seq int64
		var b []byte
		if err := rows.Scan(&seq, &b); err != nil {
			rows.Close()
			return nil, fmt.Errorf("mysql: collect heartbeats: %w", err)
		}
		out = append(out, b)
		seqs = append(seqs, seq)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, unavailable("collect heartbeats", err)
	}
	if len(seqs) > 0 {
		if _, err := s.db.ExecContext(ctx, "DELETE FROM sx_beat WHERE seq IN ("+placeholders(len(seqs))+")", seqs...); err != nil {
			return nil, unavailable("delete collected heartbeats", err)
		}
	}
	s.touch()
	return out, nil
}

// Sweep deletes heartbeats addressed to servers that are no longer live
// and older than age, and member rows whose lease ended more than age ago.
func (s *Store) Sweep(ctx context.Context, age time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	if _, err := s.db.ExecContext(ctx, `DELETE FROM sx_beat WHERE created_us < `+nowMicros+` - ?
AND owner NOT IN (SELECT id FROM sx_member WHERE lease_until_us > `+nowMicros+`)`, age.Microseconds()); err != nil {
		return unavailable("sweep relayed heartbeats", err)
	}
	if _, err := s.db.ExecContext(ctx, "DELETE FROM sx_member WHERE lease_until_us < "+nowMicros+" - ?", age.Microseconds()); err != nil {
		return unavailable("sweep members", err)
	}
	return nil
}

// Head returns the newest committed revision and, when after is below it,
// the commit time (unix ns) of revision after+1: how long a follower at
// after has been behind. It measures the round trip.
func (s *Store) Head(ctx context.Context, after int64) (head, nextCommitted int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	start := time.Now()
	if err := s.db.QueryRowContext(ctx, "SELECT revision FROM sx_sequence WHERE id = 1").Scan(&head); err != nil {
		return 0, 0, unavailable("read the revision", err)
	}
	s.rtt.Observe(time.Since(start).Seconds())
	s.touch()
	if head > after {
		err := s.db.QueryRowContext(ctx, "SELECT committed_ns FROM sx_change WHERE revision = ? AND seq = 0", after+1).Scan(&nextCommitted)
		if err != nil {
			nextCommitted = 0 // compacted: the caller reloads anyway
		}
	}
	return head, nextCommitted, nil
}
