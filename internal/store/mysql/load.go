package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/store"
)

// Load calls fn for every stored record of kinds, kind by kind in the
// order given and in key order (bytewise) within a kind, all from one
// consistent snapshot (a REPEATABLE READ transaction whose first read is
// the sequence row), and returns the revision of that snapshot. Instances
// are read from their columns and handed over in the catalog's encoding.
// The record's slices are only valid during the call.
func (s *Store) Load(kinds []store.Kind, fn func(store.Record) error) (int64, error) {
	if s.closed.Load() {
		return 0, store.ErrClosed
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout+5*time.Minute)
	defer cancel()
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return 0, unavailable("begin a load", err)
	}
	defer tx.Rollback()
	var rev int64
	if err := tx.QueryRowContext(ctx, "SELECT revision FROM sx_sequence WHERE id = 1").Scan(&rev); err != nil {
		return 0, unavailable("read the revision", err)
	}
	for _, k := range kinds {
		if !k.Valid() {
			return 0, fmt.Errorf("mysql: load of unknown %v", k)
		}
		if k == store.Instances {
			err = loadInstances(ctx, tx, fn)
		} else {
			err = loadRecords(ctx, tx, k, fn)
		}
		if err != nil {
			return 0, err
		}
	}
	s.touch()
	return rev, nil
}

func loadRecords(ctx context.Context, tx *sql.Tx, k store.Kind, fn func(store.Record) error) error {
	rows, err := tx.QueryContext(ctx, "SELECT rkey, revision, value FROM sx_record WHERE kind = ? ORDER BY rkey", string(byte(k)))
	if err != nil {
		return unavailable(fmt.Sprintf("load %v", k), err)
	}
	defer rows.Close()
	var key, val sql.RawBytes
	var rev int64
	for rows.Next() {
		if err := rows.Scan(&key, &rev, &val); err != nil {
			return fmt.Errorf("mysql: load %v: %w", k, err)
		}
		if err := fn(store.Record{Kind: k, Key: string(key), Revision: rev, Value: val}); err != nil {
			return err
		}
	}
	return unavailable(fmt.Sprintf("load %v", k), rows.Err())
}

func loadInstances(ctx context.Context, tx *sql.Tx, fn func(store.Record) error) error {
	rows, err := tx.QueryContext(ctx, "SELECT "+instanceColumns+" FROM sx_instance ORDER BY id")
	if err != nil {
		return unavailable("load instances", err)
	}
	defer rows.Close()
	var (
		r   instanceRow
		buf []byte
	)
	for rows.Next() {
		if err := rows.Scan(r.dest()...); err != nil {
			return fmt.Errorf("mysql: load instances: %w", err)
		}
		in, err := r.instance()
		if err != nil {
			return err
		}
		buf = in.AppendBinary(buf[:0])
		if err := fn(store.Record{Kind: store.Instances, Key: in.ID, Revision: in.Revision, Value: buf}); err != nil {
			return err
		}
	}
	return unavailable("load instances", rows.Err())
}

// instanceRow is one row of sx_instance as scanned.
type instanceRow struct {
	id, ns, svc, host, proto, version, meta sql.RawBytes
	port, weight, ttl, deregisterAfter      int
	isolated, healthy                       bool
	created, updated, rev                   int64
}

func (r *instanceRow) dest() []any {
	return []any{&r.id, &r.ns, &r.svc, &r.host, &r.port, &r.proto, &r.version, &r.weight, &r.isolated,
		&r.healthy, &r.ttl, &r.deregisterAfter, &r.meta, &r.created, &r.updated, &r.rev}
}

func (r *instanceRow) instance() (*catalog.Instance, error) {
	md, err := parseMetadata(r.meta)
	if err != nil {
		return nil, fmt.Errorf("mysql: instance %q: %w", r.id, err)
	}
	return &catalog.Instance{
		ID: string(r.id), Namespace: string(r.ns), Service: string(r.svc), Host: string(r.host), Port: r.port,
		Protocol: string(r.proto), Version: string(r.version), Weight: r.weight, Isolated: r.isolated,
		Healthy: r.healthy, TTLSeconds: r.ttl, DeregisterAfterSeconds: int32(r.deregisterAfter), Metadata: md, Revision: r.rev,
		CreatedAt: time.Unix(0, r.created).UTC(), UpdatedAt: time.Unix(0, r.updated).UTC(),
	}, nil
}
