// Package hugepage asks Linux to back the Go heap with transparent huge
// pages (2 MiB) where the system leaves them to madvise(2), as Debian and
// most distributions do. It owns one goroutine, which advises each heap
// mapping the runtime adds.
//
// Why: the heap of a bulk load grows by hundreds of MB, and every 4 KiB
// page is one page fault on first touch. On a virtual machine a fault costs
// ~12 us (measured: docs/benchmarks.md), so loading 1,000,000 instances
// spent ~20% of the server's CPU faulting. A huge page is one fault per 512
// pages. The Go runtime does not advise its heap itself (it did in Go
// 1.21.0 and stopped: huge pages can hold memory a sparse heap has freed).
// Sextant's heap is dense (instances, indexes), and the release after a
// burst (cmd/sextant, releaseWhenQuiet) first calls Release, so that freed
// memory goes back to the OS in 4 KiB pages and the kernel's khugepaged does
// not gather it into huge pages again.
package hugepage

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/metrics"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// Mode is the kernel's transparent huge page setting.
type Mode string

const (
	Always  Mode = "always"  // every anonymous mapping may use huge pages: nothing to do
	Madvise Mode = "madvise" // only mappings advised MADV_HUGEPAGE: the Advisor's case
	Never   Mode = "never"   // none, or the kernel has no THP
)

const enabledFile = "/sys/kernel/mm/transparent_hugepage/enabled"

// KernelMode reads the kernel's setting (the bracketed word of
// /sys/kernel/mm/transparent_hugepage/enabled); Never when it cannot.
func KernelMode() Mode {
	b, err := os.ReadFile(enabledFile)
	if err != nil {
		return Never
	}
	return parseMode(b)
}

func parseMode(b []byte) Mode {
	_, after, ok := bytes.Cut(b, []byte("["))
	if !ok {
		return Never
	}
	word, _, ok := bytes.Cut(after, []byte("]"))
	if !ok {
		return Never
	}
	switch m := Mode(word); m {
	case Always, Madvise:
		return m
	}
	return Never
}

// Mapping is one line of /proc/self/maps.
type Mapping struct {
	Lo, Hi uintptr
	Perms  string // "rw-p"
	Anon   bool   // no file, no name
	File   bool   // backed by a file (inode not 0)
}

// parseMaps reads /proc/<pid>/maps lines, calling fn for each. A line
// that does not parse is an error naming it (the format is the kernel's,
// but this keeps a surprise from being read as a mapping).
func parseMaps(r io.Reader, fn func(Mapping)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for line := 1; sc.Scan(); line++ {
		m, err := parseMapping(sc.Bytes())
		if err != nil {
			return fmt.Errorf("hugepage: maps line %d: %w", line, err)
		}
		fn(m)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("hugepage: read maps: %w", err)
	}
	return nil
}

// parseMapping reads "lo-hi perms offset dev inode [name]".
func parseMapping(b []byte) (Mapping, error) {
	var f [6][]byte
	n := 0
	for n < 5 {
		b = bytes.TrimLeft(b, " ")
		i := bytes.IndexByte(b, ' ')
		if i < 0 {
			i = len(b)
		}
		if i == 0 {
			break
		}
		f[n], b = b[:i], b[i:]
		n++
	}
	if n < 5 {
		return Mapping{}, fmt.Errorf("%d fields, want at least 5", n)
	}
	f[5] = bytes.TrimSpace(b)
	lo, hi, ok := bytes.Cut(f[0], []byte("-"))
	if !ok {
		return Mapping{}, fmt.Errorf("range %q has no '-'", f[0])
	}
	l, err1 := strconv.ParseUint(string(lo), 16, 64)
	h, err2 := strconv.ParseUint(string(hi), 16, 64)
	if err1 != nil || err2 != nil || h < l {
		return Mapping{}, fmt.Errorf("range %q is not two ascending hex addresses", f[0])
	}
	if len(f[1]) != 4 {
		return Mapping{}, fmt.Errorf("permissions %q, want 4 letters", f[1])
	}
	inode0 := string(f[4]) == "0"
	return Mapping{Lo: uintptr(l), Hi: uintptr(h), Perms: string(f[1]),
		Anon: inode0 && len(f[5]) == 0, File: !inode0}, nil
}

// heapSpan bounds the Go heap around one of its addresses: the runtime
// places its arenas upward from one base, and no other mapping of the
// process (libc's, thread stacks, files) lies within this distance of them
// in practice, since the kernel puts those near the top of the address
// space.
const heapSpan = 64 << 30

// probe holds an object the runtime allocated on its heap (a package
// variable's initial value could be static data instead); heapAddr is its
// address.
var (
	probe    []byte
	heapAddr = sync.OnceValue(func() uintptr {
		probe = make([]byte, 64)
		return uintptr(unsafe.Pointer(unsafe.SliceData(probe)))
	})
)

// Advisor advises the Go heap's mappings MADV_HUGEPAGE as the runtime
// adds them. Its zero value is not usable; use New.
type Advisor struct {
	maps  string // /proc/self/maps; tests point elsewhere
	lo    uintptr
	hi    uintptr
	mode  Mode
	mu    sync.Mutex          // serialises scans (Run and Release)
	done  map[[2]uintptr]bool // mappings advised (by range)
	calls int                 // madvise calls made, for tests
}

// New returns an advisor for this process under the kernel's mode.
func New() *Advisor {
	p := heapAddr()
	lo := uintptr(0)
	if p > heapSpan {
		lo = p - heapSpan
	}
	return &Advisor{maps: "/proc/self/maps", lo: lo, hi: p + heapSpan, mode: KernelMode(), done: make(map[[2]uintptr]bool)}
}

// Active reports whether the advisor has work: the kernel is in madvise
// mode.
func (a *Advisor) Active() bool { return a.mode == Madvise }

// Mode is the kernel's mode the advisor found.
func (a *Advisor) Mode() Mode { return a.mode }

// Polling: while the heap grows, the advisor reads the runtime's mapped
// bytes every millisecond and scans the mappings when they changed (the
// runtime grows the heap by 4 MiB mappings and starts using one at once:
// pages touched before the advice stay small), and every busyScan ticks
// regardless, for C mappings; quiet, every 100 ms.
const (
	busyPoll  = time.Millisecond
	busyScan  = 10
	quietPoll = 100 * time.Millisecond
	busyFor   = 2 * time.Second
)

// Run advises every heap mapping now and each one the runtime adds, until
// ctx ends. It returns at once when the kernel is not in madvise mode.
func (a *Advisor) Run(ctx context.Context) error {
	if !a.Active() {
		return nil
	}
	sample := []metrics.Sample{{Name: "/memory/classes/total:bytes"}}
	mapped := func() uint64 {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return sample[0].Value.Uint64()
	}
	last := mapped()
	if err := a.scan(); err != nil {
		return err
	}
	grew, ticks := time.Now(), 0
	t := time.NewTimer(busyPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		ticks++
		now := mapped()
		if now != last || ticks%busyScan == 0 {
			if now != last {
				last, grew = now, time.Now()
			}
			if err := a.scan(); err != nil {
				return err
			}
		}
		if time.Since(grew) < busyFor {
			t.Reset(busyPoll)
		} else {
			t.Reset(quietPoll)
		}
	}
}

// scan advises the heap's anonymous read-write mappings not advised yet.
func (a *Advisor) scan() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.each(func(m Mapping) error {
		k := [2]uintptr{m.Lo, m.Hi}
		if a.done[k] {
			return nil
		}
		if err := madvise(m, syscall.MADV_HUGEPAGE); err != nil {
			return err
		}
		a.done[k] = true
		a.calls++
		return nil
	})
}

// Release advises the heap's mappings MADV_NOHUGEPAGE, before memory is
// handed back to the OS: khugepaged would otherwise collapse the freed 4 KiB
// pages of a huge page's range back into a whole huge page. Mappings the
// runtime adds later are advised again by Run.
func (a *Advisor) Release() error {
	if !a.Active() {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.each(func(m Mapping) error { return madvise(m, syscall.MADV_NOHUGEPAGE) })
	// After NOHUGEPAGE the kernel may merge the mappings into new ranges;
	// each is now known as not to advise again until the runtime maps more.
	clear(a.done)
	if err2 := a.each(func(m Mapping) error { a.done[[2]uintptr{m.Lo, m.Hi}] = true; return nil }); err == nil {
		err = err2
	}
	return err
}

// largeC is the size from which an anonymous mapping outside the heap is
// advised too: C allocations that large (pebble's memtables, 64 MiB, written
// from start to end) are dense, while thread stacks (8 MiB) and malloc's
// arenas are not.
const largeC = 32 << 20

// each calls fn for the heap's anonymous private read-write mappings and
// for those of at least largeC elsewhere.
func (a *Advisor) each(fn func(Mapping) error) error {
	f, err := os.Open(a.maps)
	if err != nil {
		return fmt.Errorf("hugepage: %w", err)
	}
	defer f.Close()
	var first error
	var prev Mapping
	perr := parseMaps(f, func(m Mapping) {
		defer func() { prev = m }()
		if first != nil || !m.Anon || m.Perms != "rw-p" {
			return
		}
		// Outside the heap: large, and not a binary's zeroed data (bss),
		// which follows its file's mapping and is sparse.
		if (m.Lo < a.lo || m.Hi > a.hi) && (m.Hi-m.Lo < largeC || prev.File && prev.Hi == m.Lo) {
			return
		}
		first = fn(m)
	})
	return errors.Join(first, perr)
}

func madvise(m Mapping, advice int) error {
	_, _, errno := syscall.Syscall(syscall.SYS_MADVISE, m.Lo, m.Hi-m.Lo, uintptr(advice))
	switch errno {
	case 0, syscall.ENOMEM:
		// ENOMEM: the runtime unmapped part of the range since it was read.
		return nil
	}
	return fmt.Errorf("hugepage: madvise %#x-%#x: %w", m.Lo, m.Hi, errno)
}
