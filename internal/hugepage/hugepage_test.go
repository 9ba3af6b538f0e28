package hugepage

import (
	"bufio"
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{
		"always [madvise] never\n": Madvise,
		"[always] madvise never\n": Always,
		"always madvise [never]\n": Never,
		"always madvise never\n":   Never, // no choice marked
		"[bogus]":                  Never,
		"[madvise":                 Never,
		"":                         Never,
	} {
		if got := parseMode([]byte(in)); got != want {
			t.Errorf("parseMode(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseMapping(t *testing.T) {
	ok := map[string]Mapping{
		"c000000000-c004000000 rw-p 00000000 00:00 0 ":                                        {Lo: 0xc000000000, Hi: 0xc004000000, Perms: "rw-p", Anon: true},
		"c000000000-c004000000 rw-p 00000000 00:00 0":                                         {Lo: 0xc000000000, Hi: 0xc004000000, Perms: "rw-p", Anon: true},
		"7f04d88e9000-7f04d90e9000 rw-p 00000000 00:00 0          [stack]":                    {Lo: 0x7f04d88e9000, Hi: 0x7f04d90e9000, Perms: "rw-p"},
		"00402000-017ce000 r-xp 00002000 fd:01 1234                 /usr/bin/sextant":         {Lo: 0x402000, Hi: 0x17ce000, Perms: "r-xp", File: true},
		"2ae3c0000000-2ae3c3c00000 ---p 00000000 00:00 0":                                     {Lo: 0x2ae3c0000000, Hi: 0x2ae3c3c00000, Perms: "---p", Anon: true},
		"7f0000000000-7f0000001000 rw-p 00000000 00:00 0    [anon: Go: heap]":                 {Lo: 0x7f0000000000, Hi: 0x7f0000001000, Perms: "rw-p"},
		"7f0000000000-7f0000001000 rw-s 00000000 00:05 77    /memfd:x (deleted)":              {Lo: 0x7f0000000000, Hi: 0x7f0000001000, Perms: "rw-s", File: true},
		"ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]": {Lo: 0xffffffffff600000, Hi: 0xffffffffff601000, Perms: "--xp"},
	}
	for in, want := range ok {
		got, err := parseMapping([]byte(in))
		if err != nil || got != want {
			t.Errorf("parseMapping(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{
		"",
		"c000000000 rw-p 00000000 00:00 0", // no range
		"c004000000-c000000000 rw-p 00000000 00:00 0", // descending
		"zz-c0 rw-p 00000000 00:00 0",
		"c0-c1 rw-p 00000000 00:00", // 4 fields
		"c0-c1 rw 00000000 00:00 0", // short permissions
	} {
		if m, err := parseMapping([]byte(in)); err == nil {
			t.Errorf("parseMapping(%q) = %+v, want an error", in, m)
		}
	}
}

// FuzzParseMaps: any input gives mappings or an error naming a line,
// never a panic, and a mapping read is well formed.
func FuzzParseMaps(f *testing.F) {
	f.Add("c000000000-c004000000 rw-p 00000000 00:00 0\n7f04d88e9000-7f04d90e9000 rw-p 00000000 00:00 0 [stack]\n")
	f.Add("00402000-017ce000 r-xp 00002000 fd:01 1234 /usr/bin/sextant\n")
	f.Add("c0-c1 rw-p\n")
	f.Fuzz(func(t *testing.T, in string) {
		err := parseMaps(strings.NewReader(in), func(m Mapping) {
			if m.Hi < m.Lo || len(m.Perms) != 4 {
				t.Fatalf("mapping %+v read from %q", m, in)
			}
		})
		if err != nil && !strings.HasPrefix(err.Error(), "hugepage: ") {
			t.Fatalf("error %q is not prefixed", err)
		}
	})
}

// vmFlags returns the VmFlags of the mapping holding addr, from
// /proc/self/smaps.
func vmFlags(t *testing.T, addr uintptr) []string {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if m, err := parseMapping([]byte(line)); err == nil && !strings.HasSuffix(strings.Fields(line)[0], ":") {
			in = m.Lo <= addr && addr < m.Hi
			continue
		}
		if flags, ok := strings.CutPrefix(line, "VmFlags:"); ok && in {
			return strings.Fields(flags)
		}
	}
	t.Fatalf("no mapping holds %#x", addr)
	return nil
}

var static [1 << 16]byte

func has(flags []string, f string) bool {
	for _, x := range flags {
		if x == f {
			return true
		}
	}
	return false
}

// TestAdvisorAdvisesHeap runs the advisor in this process: on a kernel in
// madvise mode, memory the runtime maps for the heap while it runs is
// advised (VmFlags "hg"), and Release turns that to "nh"; in another mode
// it does nothing and says so.
func TestAdvisorAdvisesHeap(t *testing.T) {
	a := New()
	if !a.Active() {
		if a.Mode() == Madvise {
			t.Fatal("madvise mode but the advisor is not active")
		}
		if err := a.Run(context.Background()); err != nil {
			t.Fatalf("Run in mode %q: %v", a.Mode(), err)
		}
		if a.calls != 0 {
			t.Fatalf("mode %q: %d madvise calls, want none", a.Mode(), a.calls)
		}
		t.Logf("kernel THP mode %q: the advisor has nothing to do", a.Mode())
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	// A large allocation makes the runtime map fresh heap for it.
	big := make([]byte, 96<<20)
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(big)))
	deadline := time.Now().Add(5 * time.Second)
	for !has(vmFlags(t, addr), "hg") {
		if time.Now().After(deadline) {
			t.Fatalf("heap mapping at %#x not advised after 5 s: VmFlags %v", addr, vmFlags(t, addr))
		}
		time.Sleep(time.Millisecond)
	}
	if addr < a.lo || addr >= a.hi {
		t.Fatalf("allocation at %#x outside the heap span %#x-%#x", addr, a.lo, a.hi)
	}
	// A large C-style mapping (pebble's memtables) is advised, a small one
	// (a thread stack) is not.
	large, err := syscall.Mmap(-1, 0, 64<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(large)
	// Like a thread stack, with guard pages (which also keep the kernel from
	// merging it with the large one).
	stack, err := syscall.Mmap(-1, 0, 8<<20+8<<10, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(stack)
	if err := syscall.Mprotect(stack[:4<<10], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mprotect(stack[len(stack)-4<<10:], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	small := stack[4<<10:]
	for !has(vmFlags(t, uintptr(unsafe.Pointer(&large[0]))), "hg") {
		if time.Now().After(deadline) {
			t.Fatalf("64 MiB anonymous mapping not advised after 5 s")
		}
		time.Sleep(time.Millisecond)
	}
	if fl := vmFlags(t, uintptr(unsafe.Pointer(&small[0]))); has(fl, "hg") {
		t.Fatalf("8 MiB anonymous mapping advised: VmFlags %v", fl)
	}
	// The binary's zeroed data is an anonymous read-write mapping too, and
	// not the heap's.
	if fl := vmFlags(t, uintptr(unsafe.Pointer(&static))); has(fl, "hg") {
		t.Fatalf("static data advised: VmFlags %v", fl)
	}
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	if fl := vmFlags(t, addr); has(fl, "hg") || !has(fl, "nh") {
		t.Fatalf("after Release: VmFlags %v, want nh and no hg", fl)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	big[0] = 1 // keep big mapped until here
}

// BenchmarkScan is one look at this process's mappings with nothing new
// to advise: the advisor's cost per heap growth.
func BenchmarkScan(b *testing.B) {
	a := New()
	a.mode = Madvise
	if err := a.scan(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := a.scan(); err != nil {
			b.Fatal(err)
		}
	}
}
