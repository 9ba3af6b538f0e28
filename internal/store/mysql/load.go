package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/sextant-mesh/sextant/internal/store"
)

// Load calls fn for every stored record of kinds, kind by kind in the
// order given and in key order (bytewise) within a kind, all from one
// consistent snapshot (a REPEATABLE READ transaction whose first read is
// the sequence row), and returns the revision of that snapshot. Kinds
// laid out as rows (Options.Rows) are read from their columns and handed
// over in the kind's own encoding.
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
		if cols := s.opts.Rows[k]; cols != nil {
			err = loadRows(ctx, tx, k, cols, fn)
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

// loadRows reads a kind laid out as rows (Columns) and hands each over in
// the kind's own encoding.
func loadRows(ctx context.Context, tx *sql.Tx, k store.Kind, cols Columns, fn func(store.Record) error) error {
	names := cols.Names()
	rows, err := tx.QueryContext(ctx, "SELECT "+strings.Join(names, ", ")+", revision FROM "+cols.Table()+" ORDER BY "+names[0])
	if err != nil {
		return unavailable(fmt.Sprintf("load %v", k), err)
	}
	defer rows.Close()
	dest, record := cols.NewRow()
	var rev int64
	dest = append(dest, &rev)
	var buf []byte
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("mysql: load %v: %w", k, err)
		}
		key, value, err := record(buf[:0])
		if err != nil {
			return fmt.Errorf("mysql: load %v: %w", k, err)
		}
		buf = value
		if err := fn(store.Record{Kind: k, Key: key, Revision: rev, Value: value}); err != nil {
			return err
		}
	}
	return unavailable(fmt.Sprintf("load %v", k), rows.Err())
}
