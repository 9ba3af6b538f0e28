package callstore

import (
	"cmp"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bodyFor makes a body that depends on (t, a, seq), so a query returning
// the wrong body is caught.
func bodyFor(t, a int64, seq uint32) [BodySize]byte {
	var b [BodySize]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(t))
	binary.LittleEndian.PutUint64(b[8:], uint64(a))
	binary.LittleEndian.PutUint32(b[16:], seq)
	b[33] = byte(t ^ a)
	return b
}

func smallOpts() Options {
	return Options{ChunkRecords: 256, BucketRecords: 32, WriterBatch: 16, MaxBufferedRecords: 1024}
}

func openT(t testing.TB, dir string, o Options) *Store {
	t.Helper()
	s, err := Open(dir, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func msgCmp(x, y Message) int {
	if c := cmp.Compare(x.T, y.T); c != 0 {
		return c
	}
	if c := cmp.Compare(x.A, y.A); c != 0 {
		return c
	}
	return slices.Compare(x.Body[:], y.Body[:])
}

// model is the reference: every record put, answered by brute force.
type model struct{ all []Message }

func (m *model) messages(aMin, aMax, tMin, tMax int64) []Message {
	var out []Message
	for _, r := range m.all {
		if r.A >= aMin && r.A <= aMax && r.T >= tMin && r.T <= tMax {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, msgCmp)
	return out
}

func (m *model) avg(aMin, aMax, tMin, tMax int64) int64 {
	var sum int128
	var n uint64
	for _, r := range m.all {
		if r.A >= aMin && r.A <= aMax && r.T >= tMin && r.T <= tMax {
			sum = sum.add(int128From(r.A))
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum.quo(n)
}

// checkQuery compares one query against the model: same records, t order.
func checkQuery(t *testing.T, s *Store, m *model, aMin, aMax, tMin, tMax int64) {
	t.Helper()
	got, err := s.Messages(aMin, aMax, tMin, tMax)
	if err != nil {
		t.Fatalf("Messages: %v", err)
	}
	if !slices.IsSortedFunc(got, func(x, y Message) int { return cmp.Compare(x.T, y.T) }) {
		t.Fatalf("Messages(%d,%d,%d,%d) not sorted by t", aMin, aMax, tMin, tMax)
	}
	slices.SortFunc(got, msgCmp)
	want := m.messages(aMin, aMax, tMin, tMax)
	if !slices.Equal(got, want) {
		t.Fatalf("Messages(%d,%d,%d,%d): got %d records, want %d", aMin, aMax, tMin, tMax, len(got), len(want))
	}
	avg, err := s.AvgValue(aMin, aMax, tMin, tMax)
	if err != nil {
		t.Fatalf("AvgValue: %v", err)
	}
	if w := m.avg(aMin, aMax, tMin, tMax); avg != w {
		t.Fatalf("AvgValue(%d,%d,%d,%d) = %d, want %d", aMin, aMax, tMin, tMax, avg, w)
	}
}

type genFunc func(r *rand.Rand, i int64) (t, a int64)

var workloads = []struct {
	name string
	gen  genFunc
	aLo  int64
	aHi  int64
}{
	{"a=t", func(_ *rand.Rand, i int64) (int64, int64) { return i, i }, 0, 4000},
	{"random-a", func(r *rand.Rand, i int64) (int64, int64) { return i * 3, r.Int64N(1 << 48) }, 0, 1 << 48},
	{"negative", func(r *rand.Rand, i int64) (int64, int64) { return i - 2000, r.Int64N(2000) - 1000 }, -1000, 1000},
	{"extremes", func(r *rand.Rand, i int64) (int64, int64) {
		v := []int64{math.MinInt64, math.MaxInt64, -1, 0, 1, math.MaxInt64 - 1}
		return math.MinInt64/2 + i*1e12, v[r.IntN(len(v))]
	}, math.MinInt64, math.MaxInt64},
	{"equal-a", func(_ *rand.Rand, i int64) (int64, int64) { return i / 7, 42 }, 40, 44},
}

func TestPutQueryReopen(t *testing.T) {
	for _, wl := range workloads {
		for _, writers := range []int{1, 4} {
			t.Run(wl.name+"/writers="+string(rune('0'+writers)), func(t *testing.T) {
				dir := t.TempDir()
				s := openT(t, dir, smallOpts())
				m := putConcurrently(t, s, writers, 4000/writers, wl.gen)
				if err := s.Sync(); err != nil {
					t.Fatal(err)
				}
				queries := func(s *Store) {
					r := rand.New(rand.NewPCG(7, 9))
					tMin, tMax := m.all[0].T, m.all[len(m.all)-1].T
					checkQuery(t, s, m, math.MinInt64, math.MaxInt64, math.MinInt64, math.MaxInt64)
					checkQuery(t, s, m, wl.aLo, wl.aHi, tMin, tMax)
					for range 25 {
						t0 := m.all[r.IntN(len(m.all))].T
						t1 := m.all[r.IntN(len(m.all))].T
						a0 := m.all[r.IntN(len(m.all))].A
						a1 := m.all[r.IntN(len(m.all))].A
						checkQuery(t, s, m, min(a0, a1), max(a0, a1), min(t0, t1), max(t0, t1))
					}
				}
				queries(s)
				if got := s.Len(); got != uint64(len(m.all)) {
					t.Fatalf("Len = %d, want %d", got, len(m.all))
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				s = openT(t, dir, smallOpts())
				defer s.Close()
				queries(s)
				if got := s.Len(); got != uint64(len(m.all)) {
					t.Fatalf("after reopen Len = %d, want %d", got, len(m.all))
				}
			})
		}
	}
}

// putConcurrently puts n records per writer from `writers` goroutines,
// writer w taking the i with i%writers == w, and returns the model.
func putConcurrently(t testing.TB, s *Store, writers, n int, gen genFunc) *model {
	t.Helper()
	var mu sync.Mutex
	m := &model{}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wr, err := s.Writer()
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer wr.Close()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			local := make([]Message, 0, n)
			for i := range n {
				tt, a := gen(r, int64(i*writers+w))
				b := bodyFor(tt, a, uint32(i))
				if err := wr.Put(tt, a, b); err != nil {
					errs <- err
					return
				}
				local = append(local, Message{T: tt, A: a, Body: b})
			}
			mu.Lock()
			m.all = append(m.all, local...)
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	slices.SortFunc(m.all, msgCmp)
	return m
}

func TestOutOfOrderWriters(t *testing.T) {
	// A writer that starts late, below what Sync already flushed, and
	// memory pressure with an idle writer: both make new runs.
	dir := t.TempDir()
	o := smallOpts()
	s := openT(t, dir, o)
	defer s.Close()
	m := &model{}
	put := func(w *Writer, tt, a int64) {
		t.Helper()
		b := bodyFor(tt, a, 0)
		if err := w.Put(tt, a, b); err != nil {
			t.Fatal(err)
		}
		m.all = append(m.all, Message{T: tt, A: a, Body: b})
	}
	w1, _ := s.Writer()
	idle, _ := s.Writer() // never puts: holds the merge until pressure
	for i := range int64(2000) {
		put(w1, 1000+i, i%97)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	w2, _ := s.Writer()
	for i := range int64(500) {
		put(w2, 500+i*3, i%13) // below and inside what w1 put
	}
	put(w1, 5000, 1)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := len(s.view.Load().runs); n < 2 {
		t.Fatalf("runs = %d, want >= 2", n)
	}
	slices.SortFunc(m.all, msgCmp)
	checkQuery(t, s, m, 0, 100, 0, 10000)
	checkQuery(t, s, m, 5, 10, 700, 1600)
	idle.Close()
	w1.Close()
	w2.Close()
}

func TestBadArguments(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, smallOpts())
	w, err := s.Writer()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Put(10, 1, [BodySize]byte{}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"aMin>aMax messages", func() error { _, err := s.Messages(5, 4, 0, 10); return err }, ErrBadRange},
		{"tMin>tMax messages", func() error { _, err := s.Messages(0, 4, 11, 10); return err }, ErrBadRange},
		{"aMin>aMax avg", func() error { _, err := s.AvgValue(5, 4, 0, 10); return err }, ErrBadRange},
		{"t backwards", func() error { return w.Put(9, 1, [BodySize]byte{}) }, ErrTimeBackwards},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	// The rejected put stored nothing; the good one is there.
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	got, err := s.Messages(math.MinInt64, math.MaxInt64, math.MinInt64, math.MaxInt64)
	if err != nil || len(got) != 1 || got[0].T != 10 {
		t.Fatalf("after bad put: %v %v", got, err)
	}
	if _, err := Open(dir, smallOpts()); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	closedTests := []struct {
		name string
		call func() error
	}{
		{"put", func() error { return w.Put(11, 1, [BodySize]byte{}) }},
		{"messages", func() error { _, err := s.Messages(0, 1, 0, 1); return err }},
		{"avg", func() error { _, err := s.AvgValue(0, 1, 0, 1); return err }},
		{"writer", func() error { _, err := s.Writer(); return err }},
		{"sync", func() error { return s.Sync() }},
	}
	for _, tc := range closedTests {
		t.Run("closed "+tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, ErrClosed) {
				t.Fatalf("err = %v, want ErrClosed", err)
			}
		})
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	w2 := &Writer{released: true}
	if err := w2.Put(1, 1, [BodySize]byte{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed writer: %v", err)
	}
	for _, o := range []Options{{ChunkRecords: -1}, {BucketRecords: 1 << 17}, {WriterBatch: 1 << 21}, {WriterBatch: 100, MaxBufferedRecords: 150}} {
		if _, err := Open(t.TempDir(), o); !errors.Is(err, ErrBadOptions) {
			t.Fatalf("Open(%+v) = %v, want ErrBadOptions", o, err)
		}
	}
}

// TestConcurrentReadWrite runs writers and readers together; readers check
// every answer is sorted, well-formed, and grows monotonically.
func TestConcurrentReadWrite(t *testing.T) {
	s := openT(t, t.TempDir(), Options{ChunkRecords: 512, BucketRecords: 64, WriterBatch: 32, MaxBufferedRecords: 4096})
	defer s.Close()
	const writers, perWriter = 4, 5000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 16)
	for w := range writers {
		wr, err := s.Writer()
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer wr.Close()
			for i := range perWriter {
				tt := int64(i*writers + w)
				if err := wr.Put(tt, tt%1000, bodyFor(tt, tt%1000, 0)); err != nil {
					errs <- err
					return
				}
				if i%1000 == 0 {
					if err := s.Sync(); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	var rg sync.WaitGroup
	for r := range 3 {
		rg.Go(func() {
			prev := 0
			for i := 0; i < 100000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				got, err := s.Messages(0, 499, 0, 1<<40)
				if err != nil {
					errs <- err
					return
				}
				if len(got) < prev {
					errs <- errors.New("result shrank")
					return
				}
				prev = len(got)
				for j, m := range got {
					if m.A != m.T%1000 || m.Body != bodyFor(m.T, m.A, 0) || (j > 0 && got[j-1].T > m.T) {
						errs <- errors.New("bad record or order")
						return
					}
				}
				if _, err := s.AvgValue(int64(r), 900, 0, 1<<40); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	rg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	got, err := s.Messages(0, 499, 0, 1<<40)
	if err != nil || len(got) != writers*perWriter/2 {
		t.Fatalf("final: %d records, %v; want %d", len(got), err, writers*perWriter/2)
	}
}

func TestInt128Mean(t *testing.T) {
	tests := []struct {
		vals []int64
		want int64
	}{
		{[]int64{1, 2}, 1},
		{[]int64{-1, -2}, -1},
		{[]int64{math.MaxInt64, math.MaxInt64, math.MaxInt64}, math.MaxInt64},
		{[]int64{math.MinInt64, math.MinInt64}, math.MinInt64},
		{[]int64{math.MinInt64, math.MaxInt64}, 0},
		{[]int64{-7, 2}, -2},
	}
	for _, tc := range tests {
		var s int128
		for _, v := range tc.vals {
			s = s.add(int128From(v))
		}
		if got := s.quo(uint64(len(tc.vals))); got != tc.want {
			t.Errorf("mean%v = %d, want %d", tc.vals, got, tc.want)
		}
		if m := mulInt64(tc.vals[0], 3); m.quo(3) != tc.vals[0] {
			t.Errorf("mulInt64(%d,3)/3 = %d", tc.vals[0], m.quo(3))
		}
	}
}
