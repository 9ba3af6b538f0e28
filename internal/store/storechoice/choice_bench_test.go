package storechoice

// Benchmarks comparing go.etcd.io/bbolt and github.com/cockroachdb/pebble on
// the service registry's workload: 32-hex-char instance ids mapping to ~700
// byte instance JSON documents, every commit fully durable (bbolt default
// options with NoSync=false; pebble batches committed with pebble.Sync), and
// a small "meta" revision key written in the same commit as the records.
//
// Each top-level benchmark builds its own fresh 200k-record store per engine
// (outside the timer, loaded in batches of 5000), closes it (so pebble
// finishes its flushes/compactions) and reopens it, mimicking a registry
// that restarted on a populated store.
//
// Run:
//
//	go test ./internal/store/storechoice -run '^$' -bench . -benchtime=1s -count 3 -timeout 20m

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	bolt "go.etcd.io/bbolt"
)

const (
	numRecords = 200_000
	loadBatch  = 5_000
	valuePool  = 4096
)

var (
	boltInstances = []byte("instances")
	boltMeta      = []byte("meta")
	metaRevKey    = []byte("revision")

	pebbleInstPrefix = []byte("i/")
	pebbleInstUpper  = []byte("i0") // '/'+1 == '0'
	pebbleMetaKey    = []byte("m/revision")
)

// instance mirrors the shape of the registry's stored instance JSON.
type instance struct {
	ID            string            `json:"id"`
	Service       string            `json:"service"`
	Address       string            `json:"address"`
	Port          int               `json:"port"`
	Zone          string            `json:"zone"`
	Version       string            `json:"version"`
	Health        string            `json:"health"`
	Weight        int               `json:"weight"`
	Revision      uint64            `json:"revision"`
	RegisteredAt  time.Time         `json:"registered_at"`
	LastHeartbeat time.Time         `json:"last_heartbeat"`
	Metadata      map[string]string `json:"metadata"`
}

const alnum = "abcdefghijklmnopqrstuvwxyz0123456789"

func randString(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alnum[r.IntN(len(alnum))]
	}
	return string(b)
}

func newID(r *rand.Rand) []byte {
	var raw [16]byte
	binary.LittleEndian.PutUint64(raw[:8], r.Uint64())
	binary.LittleEndian.PutUint64(raw[8:], r.Uint64())
	id := make([]byte, 32)
	hex.Encode(id, raw[:])
	return id
}

func newValue(r *rand.Rand, id []byte, rev uint64) []byte {
	md := make(map[string]string, 16)
	for i := 0; i < 16; i++ {
		md[fmt.Sprintf("meta-key%02d", i)] = randString(r, 10) // 10-byte keys and values
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(r.IntN(1e6)) * time.Second)
	inst := instance{
		ID:            string(id),
		Service:       "svc-" + randString(r, 12),
		Address:       fmt.Sprintf("10.%d.%d.%d", r.IntN(256), r.IntN(256), r.IntN(256)),
		Port:          1024 + r.IntN(60000),
		Zone:          "zone-" + randString(r, 6),
		Version:       fmt.Sprintf("v%d.%d.%d", r.IntN(10), r.IntN(100), r.IntN(100)),
		Health:        "passing",
		Weight:        r.IntN(1000),
		Revision:      rev,
		RegisteredAt:  now,
		LastHeartbeat: now.Add(time.Duration(r.IntN(3600)) * time.Second),
		Metadata:      md,
	}
	v, err := json.Marshal(inst)
	if err != nil {
		panic(err)
	}
	return v
}

type record struct{ key, val []byte }

// store is the minimal surface both engines implement for the benchmarks.
type store interface {
	// commit durably upserts recs and the meta revision in one commit.
	commit(recs []record, rev uint64) error
	close() error
}

type engineDef struct {
	name string
	open func(dir string) (store, error)
	// scanAll opens the store at dir, iterates every instance record and
	// returns the count and the open handle for the caller to close.
	scanAll func(dir string) (int, func() error, error)
}

var engines = []engineDef{
	{"bbolt", openBolt, scanBolt},
	{"pebble", openPebble, scanPebble},
}

// --- bbolt ---

type boltStore struct {
	db      *bolt.DB
	grouped bool // use db.Batch (bbolt's own group commit) instead of db.Update
}

func openBolt(dir string) (store, error) {
	db, err := bolt.Open(filepath.Join(dir, "registry.db"), 0o600, nil) // defaults: NoSync=false
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(boltInstances); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(boltMeta)
		return err
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &boltStore{db: db}, nil
}

func (s *boltStore) commit(recs []record, rev uint64) error {
	fn := func(tx *bolt.Tx) error {
		b := tx.Bucket(boltInstances)
		for _, r := range recs {
			if err := b.Put(r.key, r.val); err != nil {
				return err
			}
		}
		var rb [8]byte
		binary.BigEndian.PutUint64(rb[:], rev)
		return tx.Bucket(boltMeta).Put(metaRevKey, rb[:])
	}
	if s.grouped {
		return s.db.Batch(fn)
	}
	return s.db.Update(fn)
}

func (s *boltStore) close() error { return s.db.Close() }

func scanBolt(dir string) (int, func() error, error) {
	db, err := bolt.Open(filepath.Join(dir, "registry.db"), 0o600, nil)
	if err != nil {
		return 0, nil, err
	}
	n := 0
	err = db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(boltInstances).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(v) == 0 {
				return fmt.Errorf("empty value for %q", k)
			}
			n++
		}
		return nil
	})
	return n, db.Close, err
}

// --- pebble ---

type quietLogger struct{}

func (quietLogger) Infof(string, ...interface{}) {}
func (quietLogger) Fatalf(format string, args ...interface{}) {
	panic(fmt.Sprintf(format, args...))
}

func pebbleOptions() *pebble.Options {
	return &pebble.Options{Logger: quietLogger{}} // otherwise defaults
}

type pebbleStore struct{ db *pebble.DB }

func openPebble(dir string) (store, error) {
	db, err := pebble.Open(dir, pebbleOptions())
	if err != nil {
		return nil, err
	}
	return &pebbleStore{db: db}, nil
}

func (s *pebbleStore) commit(recs []record, rev uint64) error {
	b := s.db.NewBatch()
	defer b.Close()
	var kb [34]byte
	copy(kb[:], pebbleInstPrefix)
	for _, r := range recs {
		copy(kb[2:], r.key)
		if err := b.Set(kb[:2+len(r.key)], r.val, nil); err != nil {
			return err
		}
	}
	var rb [8]byte
	binary.BigEndian.PutUint64(rb[:], rev)
	if err := b.Set(pebbleMetaKey, rb[:], nil); err != nil {
		return err
	}
	return b.Commit(pebble.Sync)
}

func (s *pebbleStore) close() error { return s.db.Close() }

func scanPebble(dir string) (int, func() error, error) {
	db, err := pebble.Open(dir, pebbleOptions())
	if err != nil {
		return 0, nil, err
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: pebbleInstPrefix, UpperBound: pebbleInstUpper})
	if err != nil {
		db.Close()
		return 0, nil, err
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if len(it.Value()) == 0 || !bytes.HasPrefix(it.Key(), pebbleInstPrefix) {
			it.Close()
			db.Close()
			return 0, nil, fmt.Errorf("bad record %q", it.Key())
		}
		n++
	}
	if err := it.Close(); err != nil {
		db.Close()
		return 0, nil, err
	}
	return n, db.Close, nil
}

// --- fixture ---

type fixture struct {
	dir      string
	keys     [][]byte // all record ids, for picking upsert targets
	values   [][]byte // pool of pre-encoded values used by commit benchmarks
	loadTime time.Duration
	rev      atomic.Uint64
}

// buildFixture loads numRecords records in batches of loadBatch into a fresh
// store under b.TempDir() and closes it. Only the commit calls are counted
// in loadTime (record generation is excluded).
func buildFixture(b *testing.B, e engineDef) *fixture {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()

	f := &fixture{dir: b.TempDir(), keys: make([][]byte, 0, numRecords)}
	r := rand.New(rand.NewPCG(42, 7))
	s, err := e.open(f.dir)
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]record, 0, loadBatch)
	for len(f.keys) < numRecords {
		batch = batch[:0]
		for len(batch) < loadBatch {
			id := newID(r)
			f.keys = append(f.keys, id)
			batch = append(batch, record{id, newValue(r, id, 1)})
		}
		start := time.Now()
		if err := s.commit(batch, f.rev.Add(1)); err != nil {
			b.Fatal(err)
		}
		f.loadTime += time.Since(start)
	}
	start := time.Now()
	if err := s.close(); err != nil { // pebble waits for flushes/compactions here
		b.Fatal(err)
	}
	f.loadTime += time.Since(start)

	f.values = make([][]byte, valuePool)
	for i := range f.values {
		f.values[i] = newValue(r, f.keys[i], 2)
	}
	return f
}

// diskUsage returns the apparent size (sum of file lengths) and the allocated
// size (st_blocks*512) of all files under dir.
func diskUsage(b *testing.B, dir string) (apparent, allocated int64) {
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		apparent += fi.Size()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			allocated += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return apparent, allocated
}

func mustOpen(b *testing.B, e engineDef, dir string) store {
	b.Helper()
	s, err := e.open(dir)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// --- benchmarks ---

// BenchmarkCommit measures one durable commit of N upserts (overwrites of
// random existing instances) plus the meta revision key, on a 200k store.
func BenchmarkCommit(b *testing.B) {
	for _, e := range engines {
		b.Run("engine="+e.name, func(b *testing.B) {
			f := buildFixture(b, e)
			s := mustOpen(b, e, f.dir)
			defer s.close()
			for _, n := range []int{1, 16, 256, 500} {
				b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
					r := rand.New(rand.NewPCG(uint64(n), 99))
					recs := make([]record, n)
					b.ReportAllocs()
					b.ResetTimer()
					for b.Loop() {
						for j := range recs {
							recs[j] = record{f.keys[r.IntN(len(f.keys))], f.values[r.IntN(len(f.values))]}
						}
						if err := s.commit(recs, f.rev.Add(1)); err != nil {
							b.Fatal(err)
						}
					}
					el := b.Elapsed()
					b.ReportMetric(float64(el.Microseconds())/float64(b.N), "us/commit")
					b.ReportMetric(float64(el.Nanoseconds())/1e3/float64(b.N*n), "us/record")
				})
			}
		})
	}
}

// BenchmarkConcurrentCommit runs 64 goroutines (SetParallelism with
// GOMAXPROCS) each durably committing batch=1 upserts. bbolt serializes
// writers (one tx + fsyncs per commit); "bbolt-batch" uses bbolt's DB.Batch,
// which coalesces concurrent calls into one tx; pebble group-commits
// concurrent synced batches into shared WAL syncs.
func BenchmarkConcurrentCommit(b *testing.B) {
	type variant struct {
		name    string
		e       engineDef
		grouped bool
	}
	variants := []variant{
		{"bbolt", engines[0], false},
		{"bbolt-batch", engines[0], true},
		{"pebble", engines[1], false},
	}
	// One fixture per engine, built in the parent so both bbolt variants
	// share it (saves a 200k build per -count).
	fixtures := map[string]*fixture{}
	for _, e := range engines {
		fixtures[e.name] = buildFixture(b, e)
	}
	for _, v := range variants {
		b.Run("engine="+v.name, func(b *testing.B) {
			f := fixtures[v.e.name]
			s := mustOpen(b, v.e, f.dir)
			defer s.close()
			if bs, ok := s.(*boltStore); ok {
				bs.grouped = v.grouped
			}
			procs := runtime.GOMAXPROCS(0)
			par := (64 + procs - 1) / procs
			b.SetParallelism(par)
			var seed atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				r := rand.New(rand.NewPCG(seed.Add(1), 123))
				recs := make([]record, 1)
				for pb.Next() {
					recs[0] = record{f.keys[r.IntN(len(f.keys))], f.values[r.IntN(len(f.values))]}
					if err := s.commit(recs, f.rev.Add(1)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			el := b.Elapsed()
			b.ReportMetric(float64(b.N)/el.Seconds(), "commits/s")
			b.ReportMetric(float64(par*procs), "goroutines")
		})
	}
}

// BenchmarkReopenScan measures restart-to-loaded time: open an existing
// 200k-record store and iterate every record (values are not decoded). The
// page cache is warm (the store was just written), so this is the
// CPU/syscall side of a restart, not cold-disk I/O. One untimed reopen runs
// first so pebble's WAL replay after the load is not attributed to a single
// sample. Also reports the store's on-disk size and its 200k load time.
func BenchmarkReopenScan(b *testing.B) {
	for _, e := range engines {
		b.Run("engine="+e.name, func(b *testing.B) {
			f := buildFixture(b, e)
			apparent, allocated := diskUsage(b, f.dir)

			n, closeFn, err := e.scanAll(f.dir) // untimed warm-up reopen
			if err != nil {
				b.Fatal(err)
			}
			if err := closeFn(); err != nil {
				b.Fatal(err)
			}
			if n != numRecords {
				b.Fatalf("scanned %d records, want %d", n, numRecords)
			}

			b.ReportAllocs()
			var timed time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				n, closeFn, err := e.scanAll(f.dir)
				timed += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := closeFn(); err != nil {
					b.Fatal(err)
				}
				if n != numRecords {
					b.Fatalf("scanned %d records, want %d", n, numRecords)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(timed.Microseconds())/1e3/float64(b.N), "ms/op")
			b.ReportMetric(float64(apparent), "disk-bytes")
			b.ReportMetric(float64(allocated), "alloc-bytes")
			b.ReportMetric(float64(f.loadTime.Milliseconds()), "load200k-ms")
		})
	}
}

// TestValueShape checks the synthetic record matches the registry's shape.
func TestValueShape(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	id := newID(r)
	if len(id) != 32 {
		t.Fatalf("id len %d", len(id))
	}
	total := 0
	for i := 0; i < 100; i++ {
		total += len(newValue(r, id, 1))
	}
	if avg := total / 100; avg < 650 || avg > 750 {
		t.Fatalf("avg value size %d, want ~700", avg)
	}
}
