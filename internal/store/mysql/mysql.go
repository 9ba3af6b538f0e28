// Package mysql is Sextant's shared store: several stateless servers over
// one MySQL 8 or MariaDB 10.11 database. It keeps the same records, revision
// sequence and change stream as the embedded store (internal/store), so the
// registry and the catalog work the same over either.
//
// Revisions follow the database's commit order across every server: a
// commit is one transaction that first locks the sequence row (SELECT ...
// FOR UPDATE), takes the next revisions, writes the records and their
// change rows, and holds the lock until COMMIT. So a server that has
// applied revision N has applied every change below N, whoever wrote it.
// Followers read the change table by revision (never by modification time,
// which misses a row that commits late), poll it at a short interval, and
// are woken at once by this process's own commits and by the other
// servers' announcements of theirs (wake.go).
//
// The package also holds what the cluster keeps in the database besides
// records: the membership leases and the relayed heartbeats (members.go).
// It owns the schema (schema/*.sql, embedded and migrated at Open). It does
// not judge health or own instances: internal/cluster and the registry do.
package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sextant-mesh/sextant/internal/store"
)

// Options tune the store; zero values are sensible defaults.
type Options struct {
	// History is how many revisions of the change stream the database
	// keeps (default 100,000); a follower further behind reloads in full.
	History int64
	// Poll is how often a waiting follower asks the database for other
	// servers' commits (default 10ms). This process's commits wake it at
	// once, and so do the others' announcements with Wake set: the poll is
	// then what catches a lost one.
	Poll time.Duration
	// Wake, if set, is the UDP address (host:port, port 0: any) this
	// server listens on for the other servers' commit announcements, and
	// from which it announces its own (wake.go): a follower then wakes at
	// once on another server's commit instead of at its next poll. The
	// host must be one the other servers reach.
	Wake string
	// Timeout bounds one commit, one poll and one cluster round trip
	// (default 10s).
	Timeout time.Duration
	// Logger receives the store's logs (nil: discard).
	Logger *slog.Logger
	// Metrics, if set, receives the database round-trip latency.
	Metrics prometheus.Registerer
	// Password, if set, is the database password, given apart from the
	// URL (which then has none): from a file or the environment, not the
	// command line.
	Password string
	// Rows lays the records of some kinds out as rows of tables of their
	// own (the instance kind's sx_instance); every other kind is opaque
	// values in sx_record. A server passes the same layout every time:
	// records written one way are not found the other.
	Rows map[store.Kind]Columns
}

// Columns lays out the records of one kind as rows of a table of their
// own, one column per field, so that an operator can read and query them,
// instead of opaque values in sx_record. The kind's package implements it
// (instance.Columns); the store knows only the names of its table and
// columns, which its schema migrations create. Called from the committer
// and the loader; must not block.
type Columns interface {
	// Table names the table. Its columns are Names, then revision.
	Table() string
	// Names lists the columns before revision; the first is the key.
	Names() []string
	// Values appends to dst the values of Names for a put of record key
	// (from the writer's decoded obj when set, else from value), and
	// returns an estimate of their size in bytes.
	Values(dst []any, key string, value []byte, obj any) ([]any, int, error)
	// NewRow returns scan destinations for one row's Names and a function
	// that appends the record of the row last scanned to buf (the kind's
	// encoding) and returns its key and the record.
	NewRow() (dest []any, record func(buf []byte) (key string, value []byte, err error))
}

// Store is the MySQL/MariaDB store. Commit is called by one goroutine at a
// time (the write engine's committer); Load, Follow and the cluster methods
// from any goroutine.
type Store struct {
	db   *sql.DB
	opts Options
	log  *slog.Logger

	closed atomic.Bool
	done   chan struct{} // closed by Close: ends waiting feeds and the compactor
	wg     sync.WaitGroup

	recent recentFeed // recent commits known without a read, for the followers
	wake   *waker     // nil: no announcements (Options.Wake unset)

	lastOK   atomic.Int64 // unix ns of the last round trip that reached the database
	rtt      prometheus.Histogram
	reads    prometheus.Counter // the followers' reads of the change table that found changes
	database string
}

// ParseURL turns "mysql://user:pass@tcp(host:port)/db?params" (or a bare
// go-sql-driver DSN) into the driver's configuration.
func ParseURL(url string) (*mysqldrv.Config, error) {
	dsn := strings.TrimPrefix(url, "mysql://")
	cfg, err := mysqldrv.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql: store URL %q: %w (want mysql://user:password@tcp(host:3306)/database)", redact(url), err)
	}
	if cfg.DBName == "" {
		return nil, fmt.Errorf("mysql: store URL %q names no database (want mysql://user:password@tcp(host:3306)/database)", redact(url))
	}
	return cfg, nil
}

// HasPassword reports whether the store URL carries a password.
func HasPassword(url string) bool {
	cfg, err := mysqldrv.ParseDSN(strings.TrimPrefix(url, "mysql://"))
	return err == nil && cfg.Passwd != ""
}

// redact hides the password of a store URL for messages.
func redact(url string) string {
	at := strings.LastIndex(url, "@")
	if at < 0 {
		return url
	}
	head := url[:at]
	scheme := ""
	if i := strings.Index(head, "://"); i >= 0 {
		scheme, head = head[:i+3], head[i+3:]
	}
	if user, _, ok := strings.Cut(head, ":"); ok {
		return scheme + user + ":***" + url[at:]
	}
	return url
}

// Open connects to the database of url, creating it if missing, migrates
// the schema (once, under GET_LOCK, whichever of several starting servers
// gets there first) and returns the store. It refuses a schema newer than
// this binary's (ErrNewerSchema).
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if opts.History <= 0 {
		opts.History = 100_000
	}
	if opts.Poll <= 0 {
		opts.Poll = 10 * time.Millisecond
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	cfg, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	if opts.Password != "" {
		cfg.Passwd = opts.Password
	}
	// One round trip per statement: arguments are interpolated by the
	// driver rather than prepared (3 round trips).
	cfg.InterpolateParams = true
	// A commit's statements go in one query (commit.go, script).
	cfg.MultiStatements = true
	cfg.ParseTime = false
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = opts.Timeout + 5*time.Second
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = opts.Timeout + 5*time.Second
	}
	if cfg.MaxAllowedPacket == 0 {
		cfg.MaxAllowedPacket = 16 << 20
	}
	if err := createDatabase(ctx, cfg); err != nil {
		return nil, err
	}
	conn, err := mysqldrv.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	db.SetConnMaxIdleTime(5 * time.Minute)
	s := &Store{db: db, opts: opts, log: opts.Logger, done: make(chan struct{}), database: cfg.DBName}
	s.rtt = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "sextant_store_db_round_trip_seconds", Help: "Round trips to the database of the follower's polls and the cluster's lease renewals.",
		Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
	})
	s.reads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sextant_store_change_reads_total", Help: "Reads of the change table by the followers that found changes (the others' commits not taken from memory).",
	})
	if opts.Metrics != nil {
		for _, c := range []prometheus.Collector{s.rtt, s.reads} {
			if err := opts.Metrics.Register(c); err != nil {
				db.Close()
				return nil, fmt.Errorf("mysql: register metrics: %w", err)
			}
		}
	}
	lctx, cancel := context.WithTimeout(ctx, opts.Timeout+time.Minute)
	defer cancel()
	version, err := migrate(lctx, db, time.Minute)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.touch()
	s.recent.init()
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.compactLoop() }()
	if opts.Wake != "" {
		if err := s.startWake(ctx, opts.Wake); err != nil {
			s.Close()
			return nil, err
		}
	}
	s.log.Info("mysql store open", "database", cfg.DBName, "addr", cfg.Addr, "schema", version)
	return s, nil
}

// createDatabase creates cfg's database if it does not exist.
func createDatabase(ctx context.Context, cfg *mysqldrv.Config) error {
	c := cfg.Clone()
	c.DBName = ""
	conn, err := mysqldrv.NewConnector(c)
	if err != nil {
		return fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	name := strings.ReplaceAll(cfg.DBName, "`", "``")
	if _, err := db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return unavailable(fmt.Sprintf("create database %q at %s", cfg.DBName, cfg.Addr), err)
	}
	return nil
}

// DB is the connection pool, for tests and tools.
func (s *Store) DB() *sql.DB { return s.db }

// Database is the name of the store's database.
func (s *Store) Database() string { return s.database }

// touch notes a round trip that reached the database.
func (s *Store) touch() { s.lastOK.Store(time.Now().UnixNano()) }

// Unreachable is how long the database has not answered (0: it answered
// within the last second). Any goroutine.
func (s *Store) Unreachable() time.Duration {
	d := time.Since(time.Unix(0, s.lastOK.Load()))
	if d < time.Second {
		return 0
	}
	return d
}

// Close ends every feed and the compactor and closes the pool. Every
// answered commit is in the database.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.done)
	s.recent.close()
	if s.wake != nil {
		s.wake.conn.Close() // ends its listener
	}
	s.wg.Wait()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("mysql: close: %w", err)
	}
	return nil
}

// unavailable wraps err with store.ErrUnavailable when it means the
// database could not be reached or asked us to retry; errors the server
// answered for this statement alone are returned as they are.
func unavailable(what string, err error) error {
	if err == nil {
		return nil
	}
	if retryable(err) {
		return fmt.Errorf("mysql: %s: %w: the database does not answer (%v)", what, store.ErrUnavailable, err)
	}
	return fmt.Errorf("mysql: %s: %w", what, err)
}

func retryable(err error) bool {
	var me *mysqldrv.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1040, // too many connections
			1053, // server shutdown in progress
			1205, // lock wait timeout
			1213, // deadlock
			1927, // connection killed
			2006, 2013:
			return true
		}
		return false
	}
	var ne net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysqldrv.ErrInvalidConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sql.ErrConnDone)
}

var _ interface {
	Commit([]store.Txn, bool) ([]store.Result, error)
	Load([]store.Kind, func(store.Record) error) (int64, error)
	Follow(int64) (store.Feed, error)
} = (*Store)(nil)
