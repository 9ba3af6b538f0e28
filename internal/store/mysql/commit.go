package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"time"

	"github.com/sextant-mesh/sextant/internal/store"
)

type recKey struct {
	kind store.Kind
	key  string
}

// final is the state a commit leaves a record in: the last op on it.
type final struct {
	op  store.Op
	rev int64
}

// Commit writes txns as one database transaction. It locks the sequence
// row first, so commits of every server are serialised and revisions are
// handed out in commit order; each txn whose checks hold (read FOR UPDATE
// inside the transaction) takes the next revision; one whose checks fail
// writes nothing and gets a ConflictError. The records, their change rows
// and the new sequence value commit together. Commits are always durable
// (the database's own setting decides the fsync): sync is ignored.
//
// A commit without checks (registers, deregisters) is one query: the lock,
// the rows (their revisions computed by the database from the locked
// value, @sx_base + k) and COMMIT go together, so the sequence row is never
// held across a round trip to this process. A commit with checks reads
// them under the lock first (one more round trip).
//
// An error (rather than per-txn results) means the commit was not
// acknowledged: when it wraps store.ErrUnavailable the database may still
// have committed it, and followers will see it if it did.
func (s *Store) Commit(txns []store.Txn, _ bool) ([]store.Result, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	hasOps, hasChecks := false, false
	for _, t := range txns {
		for _, op := range t.Ops {
			if !op.Kind.Valid() {
				return nil, fmt.Errorf("mysql: op on unknown %v", op.Kind)
			}
			hasOps = true
			hasChecks = hasChecks || op.Check
		}
	}
	res := make([]store.Result, len(txns))
	if !hasOps {
		return res, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, unavailable("connect for a commit", err)
	}
	defer conn.Close()
	open := false // a transaction is open on conn
	defer func() {
		if open {
			abort(conn)
		}
	}()
	sc := &script{ctx: ctx, ex: conn}
	head := int64(-1)
	var stored map[recKey]int64
	if hasChecks {
		if _, err := conn.ExecContext(ctx, "START TRANSACTION"); err != nil {
			return nil, unavailable("begin a commit", err)
		}
		open = true
		if err := conn.QueryRowContext(ctx, "SELECT revision FROM sx_sequence WHERE id = 1 FOR UPDATE").Scan(&head); err != nil {
			return nil, unavailable("lock the revision sequence", err)
		}
		if stored, err = readChecked(ctx, conn, txns, s.opts.Rows); err != nil {
			return nil, err
		}
		if err := sc.add("SET @sx_base = ?", 8, head); err != nil {
			return nil, err
		}
	} else {
		open = true // a flush may send it before the end
		sc.add("START TRANSACTION", 0)
		sc.add("SELECT revision INTO @sx_base FROM sx_sequence WHERE id = 1 FOR UPDATE", 0)
	}

	// Revisions are planned relative to the locked value: base + k.
	var (
		k       int64
		written map[recKey]int64 // puts (relative revision) and deletes (0) earlier in this commit
		changes = make([]store.Change, 0, len(txns))
		finals  = make(map[recKey]int, len(txns)) // key -> index in order
		order   []final
	)
	if stored != nil {
		written = make(map[recKey]int64)
	}
	for i, t := range txns {
		if len(t.Ops) == 0 {
			continue
		}
		if stored != nil && failsCheck(t, stored, written, head, &res[i]) {
			continue
		}
		k++
		res[i].Revision = k
		for _, op := range t.Ops {
			key := recKey{op.Kind, op.Key}
			if written != nil {
				if op.Value == nil {
					written[key] = 0
				} else {
					written[key] = k
				}
			}
			if j, ok := finals[key]; ok {
				order[j] = final{op: op, rev: k}
			} else {
				finals[key] = len(order)
				order = append(order, final{op: op, rev: k})
			}
		}
		changes = append(changes, store.Change{Revision: k, Ops: t.Ops})
	}
	if k == 0 {
		return res, nil // every txn failed its checks; the deferred abort ends the transaction
	}
	now := time.Now().UnixNano()
	if err := writeChanges(sc, changes, now); err != nil {
		return nil, err
	}
	if err := writeFinals(sc, order, s.opts.Rows); err != nil {
		return nil, err
	}
	if err := sc.add("UPDATE sx_sequence SET revision = @sx_base + ? WHERE id = 1", 8, k); err != nil {
		return nil, err
	}
	if err := sc.add("COMMIT", 0); err != nil {
		return nil, err
	}
	if err := sc.flush(); err != nil {
		return nil, fmt.Errorf("%w (outcome unknown)", err)
	}
	open = false
	if head < 0 {
		if err := conn.QueryRowContext(ctx, "SELECT @sx_base").Scan(&head); err != nil {
			// Committed, but its revisions are unknown here: the follower
			// reads them from the change table.
			return nil, unavailable("read the revisions of a commit (it committed)", err)
		}
	}
	s.touch()
	for i := range res {
		if res[i].Revision > 0 {
			res[i].Revision += head
		}
	}
	for i := range changes {
		changes[i].Revision += head
		changes[i].Time = now
	}
	s.recent.add(changes)
	if s.wake != nil {
		s.wake.announce(changes, now)
	}
	return res, nil
}

// abort ends a transaction left open on conn by a failed commit; a
// connection that cannot roll back is closed rather than reused.
func abort(conn *sql.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		conn.Raw(func(any) error { return driver.ErrBadConn })
	}
}

// querier is a connection or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// readChecked reads, FOR UPDATE, the stored revision of every record a
// check names; nil if no txn has checks.
func readChecked(ctx context.Context, tx querier, txns []store.Txn, tables map[store.Kind]Columns) (map[recKey]int64, error) {
	byKind := map[store.Kind][]any{}
	seen := map[recKey]bool{}
	for _, t := range txns {
		for _, op := range t.Ops {
			k := recKey{op.Kind, op.Key}
			if !op.Check || seen[k] {
				continue
			}
			seen[k] = true
			if tables[op.Kind] != nil {
				byKind[op.Kind] = append(byKind[op.Kind], op.Key) // the key column is text
			} else {
				byKind[op.Kind] = append(byKind[op.Kind], []byte(op.Key))
			}
		}
	}
	if len(seen) == 0 {
		return nil, nil
	}
	stored := make(map[recKey]int64, len(seen))
	read := func(kind store.Kind, query string, args []any) error {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return unavailable("read checked records", err)
		}
		defer rows.Close()
		for rows.Next() {
			var key []byte
			var rev int64
			if err := rows.Scan(&key, &rev); err != nil {
				return fmt.Errorf("mysql: read checked records: %w", err)
			}
			stored[recKey{kind, string(key)}] = rev
		}
		return unavailable("read checked records", rows.Err())
	}
	for kind, keys := range byKind {
		for start := 0; start < len(keys); start += 1000 {
			chunk := keys[start:min(start+1000, len(keys))]
			var err error
			if cols := tables[kind]; cols != nil {
				key := cols.Names()[0]
				err = read(kind, "SELECT "+key+", revision FROM "+cols.Table()+" WHERE "+key+" IN ("+placeholders(len(chunk))+") FOR UPDATE", chunk)
			} else {
				args := append([]any{string(byte(kind))}, chunk...)
				err = read(kind, "SELECT rkey, revision FROM sx_record WHERE kind = ? AND rkey IN ("+placeholders(len(chunk))+") FOR UPDATE", args)
			}
			if err != nil {
				return nil, err
			}
		}
	}
	return stored, nil
}

// failsCheck evaluates t's checks against the stored revisions and the
// commit's earlier txns (written: relative to head), recording a failure in
// r.
func failsCheck(t store.Txn, stored, written map[recKey]int64, head int64, r *store.Result) bool {
	for _, op := range t.Ops {
		if !op.Check {
			continue
		}
		k := recKey{op.Kind, op.Key}
		have, ok := written[k]
		if ok && have != 0 {
			have += head
		} else if !ok {
			have = stored[k]
		}
		if have != op.IfRevision {
			r.Err = &store.ConflictError{Kind: op.Kind, Key: op.Key, Want: op.IfRevision, Have: have}
			return true
		}
	}
	return false
}

func placeholders(n int) string {
	if n == 0 {
		return ""
	}
	return strings.Repeat("?,", n-1) + "?"
}

// script gathers the statements of one commit and sends them in as few
// round trips as it can (several statements per query, about maxStatement
// bytes of values each): the sequence lock is held for the fewest round
// trips.
type script struct {
	ctx context.Context
	ex  interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	}
	sb    strings.Builder
	args  []any
	bytes int
}

const (
	maxStatement = 4 << 20
	maxRows      = 2000
)

// add appends one statement.
func (sc *script) add(stmt string, size int, args ...any) error {
	if sc.sb.Len() > 0 {
		sc.sb.WriteString(";\n")
	}
	sc.sb.WriteString(stmt)
	sc.args = append(sc.args, args...)
	sc.bytes += size
	if sc.bytes >= maxStatement {
		return sc.flush()
	}
	return nil
}

func (sc *script) flush() error {
	if sc.sb.Len() == 0 {
		return nil
	}
	_, err := sc.ex.ExecContext(sc.ctx, sc.sb.String(), sc.args...)
	sc.sb.Reset()
	clear(sc.args)
	sc.args, sc.bytes = sc.args[:0], 0
	return unavailable("write the commit", err)
}

// bulk builds one multi-row statement of a script, cut at maxRows rows or
// maxStatement bytes.
type bulk struct {
	sc     *script
	prefix string // "INSERT ... VALUES "
	row    string // "(?,?,?)"
	suffix string // " ON DUPLICATE KEY UPDATE ..."
	sb     strings.Builder
	args   []any
	rows   int
	bytes  int
}

func (b *bulk) add(size int, args ...any) error {
	if b.rows == 0 {
		b.sb.Reset()
		b.sb.WriteString(b.prefix)
	} else {
		b.sb.WriteByte(',')
	}
	b.sb.WriteString(b.row)
	b.args = append(b.args, args...)
	b.rows++
	b.bytes += size
	if b.rows >= maxRows || b.bytes >= maxStatement {
		return b.flush()
	}
	return nil
}

func (b *bulk) flush() error {
	if b.rows == 0 {
		return nil
	}
	b.sb.WriteString(b.suffix)
	err := b.sc.add(b.sb.String(), b.bytes, b.args...)
	b.args, b.rows, b.bytes = nil, 0, 0
	return err
}

// writeChanges appends the commit's change rows.
func writeChanges(sc *script, changes []store.Change, now int64) error {
	b := &bulk{sc: sc,
		prefix: "INSERT INTO sx_change (revision, seq, kind, rkey, value, committed_ns) VALUES ", row: "(@sx_base+?,?,?,?,?,?)"}
	for _, c := range changes {
		for i, op := range c.Ops {
			var v any // NULL for a delete
			if op.Value != nil {
				v = op.Value
			}
			if err := b.add(len(op.Key)+len(op.Value)+32, c.Revision, i, string(byte(op.Kind)), []byte(op.Key), v, now); err != nil {
				return err
			}
		}
	}
	return b.flush()
}

// writeFinals leaves every record the commit touched in its last state:
// kinds laid out as rows in their tables (Columns), other kinds in
// sx_record. Revisions are relative to @sx_base.
func writeFinals(sc *script, order []final, tables map[store.Kind]Columns) error {
	recs := &bulk{sc: sc,
		prefix: "INSERT INTO sx_record (kind, rkey, revision, value) VALUES ", row: "(?,?,@sx_base+?,?)",
		suffix: " ON DUPLICATE KEY UPDATE revision = VALUES(revision), value = VALUES(value)"}
	puts := map[store.Kind]*bulk{}
	dels := map[store.Kind][]any{}
	var kinds []store.Kind // in order of first appearance, so statements are deterministic
	var vals []any
	for _, f := range order {
		op := f.op
		cols := tables[op.Kind]
		if _, ok := dels[op.Kind]; !ok {
			dels[op.Kind] = nil
			kinds = append(kinds, op.Kind)
		}
		switch {
		case op.Value == nil && cols != nil:
			dels[op.Kind] = append(dels[op.Kind], op.Key)
		case op.Value == nil:
			dels[op.Kind] = append(dels[op.Kind], []byte(op.Key))
		case cols != nil:
			b := puts[op.Kind]
			if b == nil {
				b = rowsBulk(sc, cols)
				puts[op.Kind] = b
			}
			var size int
			var err error
			if vals, size, err = cols.Values(vals[:0], op.Key, op.Value, op.Object); err != nil {
				return fmt.Errorf("mysql: %w", err)
			}
			if err := b.add(size, append(vals, f.rev)...); err != nil {
				return err
			}
		default:
			if err := recs.add(len(op.Key)+len(op.Value)+16, string(byte(op.Kind)), []byte(op.Key), f.rev, op.Value); err != nil {
				return err
			}
		}
	}
	for _, k := range kinds {
		if b := puts[k]; b != nil {
			if err := b.flush(); err != nil {
				return err
			}
		}
	}
	if err := recs.flush(); err != nil {
		return err
	}
	for _, kind := range kinds {
		keys := dels[kind]
		cols := tables[kind]
		for start := 0; start < len(keys); start += maxRows {
			chunk := keys[start:min(start+maxRows, len(keys))]
			var err error
			if cols != nil {
				err = sc.add("DELETE FROM "+cols.Table()+" WHERE "+cols.Names()[0]+" IN ("+placeholders(len(chunk))+")", 64*len(chunk), chunk...)
			} else {
				args := append([]any{string(byte(kind))}, chunk...)
				err = sc.add("DELETE FROM sx_record WHERE kind = ? AND rkey IN ("+placeholders(len(chunk))+")", 64*len(chunk), args...)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// rowsBulk is the upsert of a kind laid out as rows: every column but the
// key is replaced, with the revision.
func rowsBulk(sc *script, cols Columns) *bulk {
	names := cols.Names()
	var row, update strings.Builder
	row.WriteString("(")
	for i, n := range names {
		row.WriteString("?,")
		if i > 0 {
			update.WriteString(n + " = VALUES(" + n + "), ")
		}
	}
	row.WriteString("@sx_base+?)")
	update.WriteString("revision = VALUES(revision)")
	return &bulk{sc: sc,
		prefix: "INSERT INTO " + cols.Table() + " (" + strings.Join(names, ", ") + ", revision) VALUES ",
		row:    row.String(),
		suffix: " ON DUPLICATE KEY UPDATE " + update.String()}
}
