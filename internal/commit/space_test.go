package commit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/disktest"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

// putBlob puts a System record of 256 KiB.
type putBlob struct{ key string }

func (w putBlob) Plan(tx *Tx) error {
	v := []byte(strings.Repeat("b", 256<<10))
	tx.Put(store.System, w.key, v, &catalog.Blob{Key: w.key, Value: v})
	return nil
}

func openOnTmpfs(t *testing.T, size int, leave uint64, opts embedded.Options) (*Engine, string) {
	t.Helper()
	mnt := disktest.Tmpfs(t, size, false)
	st, err := embedded.OpenWith(filepath.Join(mnt, "data"), opts)
	if err != nil {
		t.Fatal(err)
	}
	e, err := Open(st, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(); st.Close() }) // before the unmount
	return e, disktest.Fill(t, mnt, leave)
}

// submitAll submits n writes from 8 goroutines at once (pipelined batches)
// and returns the errors, each bounded in time: a wedged engine fails the
// test instead of hanging it.
func submitAll(t *testing.T, e *Engine, prefix string, n int) []error {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, errs[i] = e.Submit(ctx, putBlob{key: fmt.Sprintf("%s%03d", prefix, i)})
				cancel()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("writes on a full disk still unanswered after 60 s: the engine is wedged")
	}
	return errs
}

// TestEngineOnFullDisk: writes on a nearly full disk fail with the
// store's ErrNoSpace, each answered, none applied; reads go on; once
// space is freed the same engine writes again.
func TestEngineOnFullDisk(t *testing.T) {
	e, filler := openOnTmpfs(t, 32<<20, 2<<20, embedded.Options{Reserve: 4 << 20})
	for i, err := range submitAll(t, e, "full", 16) {
		if !errors.Is(err, store.ErrNoSpace) {
			t.Fatalf("write %d on a full disk: %v, want ErrNoSpace", i, err)
		}
	}
	if rev := e.Catalog().Revision(); rev != 0 {
		t.Fatalf("refused writes reached the catalog: revision %d", rev)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for i, err := range submitAll(t, e, "room", 16) {
		if err != nil {
			t.Fatalf("write %d once space is freed: %v", i, err)
		}
	}
	for i := range 16 {
		if _, _, ok := e.Catalog().Table(store.System).Record(fmt.Sprintf("room%03d", i)); !ok {
			t.Fatalf("room%03d not in the catalog", i)
		}
	}
}

// TestEngineWhenTheStoreFailsAWrite: with the store's check off, pebble
// meets the full disk itself. Every write is answered (success, or
// ErrWriteFailed: unknown outcome), nothing panics, the engine is not
// wedged: later writes fail at once, and it closes.
func TestEngineWhenTheStoreFailsAWrite(t *testing.T) {
	e, _ := openOnTmpfs(t, 16<<20, 4<<20, embedded.Options{Reserve: -1})
	failed := 0
	for i, err := range submitAll(t, e, "w", 64) {
		switch {
		case err == nil:
		case errors.Is(err, store.ErrWriteFailed):
			failed++
		default:
			t.Fatalf("write %d: %v, want success or ErrWriteFailed", i, err)
		}
	}
	if failed == 0 {
		t.Fatal("64 writes of 256 KiB into 4 MiB all succeeded")
	}
	start := time.Now()
	if _, err := e.Submit(context.Background(), putBlob{key: "later"}); !errors.Is(err, store.ErrWriteFailed) {
		t.Fatalf("write after the failure: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("write after the failure took %v", d)
	}
}
