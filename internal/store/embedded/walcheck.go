package embedded

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble"
)

// Pebble replays the newest write-ahead log up to its first bad chunk and
// takes the rest as never written: right for a torn tail (a crash in the
// middle of a write), silent data loss for damage in the middle (a flipped
// byte, a bad sector), where every later commit, acknowledged and fsynced,
// is dropped. Older logs it checks strictly. checkWAL reads the newest log
// before pebble does and tells the two apart: damage is before the tail
// when a valid chunk of the same log follows it.

// The log's wire format (pebble/record, recyclable chunks): 32 KiB blocks of
// chunks that never cross a block; each chunk is CRC (4, masked
// Castagnoli over type, log number and payload), length (2), type (1), log
// number (4), payload.
const (
	walBlock  = 32 << 10
	walHeader = 11
	chunkFull = 5 // recyclable full, first, middle, last: 5 to 8
	chunkLast = 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// chunkAt parses the chunk at p of a log numbered logNum: its type, payload
// and length on disk, or ok false if there is no valid chunk there.
func chunkAt(data []byte, p int, logNum uint32) (typ byte, payload []byte, n int, ok bool) {
	blockEnd := min((p/walBlock+1)*walBlock, len(data))
	if p+walHeader > blockEnd {
		return 0, nil, 0, false
	}
	typ = data[p+6]
	if typ < chunkFull || typ > chunkLast || binary.LittleEndian.Uint32(data[p+7:]) != logNum {
		return 0, nil, 0, false
	}
	end := p + walHeader + int(binary.LittleEndian.Uint16(data[p+4:]))
	if end > blockEnd || maskedCRC(data[p+6:end]) != binary.LittleEndian.Uint32(data[p:]) {
		return 0, nil, 0, false
	}
	return typ - chunkFull + 1, data[p+walHeader : end], end - p, true
}

// walRecord is a whole record (one pebble batch: one commit) of the log.
type walRecord struct {
	off int64 // of its first chunk
	end int64 // after its last chunk
	rev int64 // the Sextant revision it writes, 0 if none (or not read)
}

// readRecords reads the records of data from p. With resync it skips what
// does not parse and goes on: a chunk of this log out of sequence by its
// length, anything else to the next block's start (a block always starts
// with a chunk; between, a user's value could pose as one); without, it
// stops there and returns the offset it stopped at (len(data) at a clean
// end).
func readRecords(data []byte, p int, logNum uint32, resync bool) ([]walRecord, int) {
	var (
		recs  []walRecord
		open  bool
		start int // of the open record
		buf   []byte
	)
	for p < len(data) {
		if walBlock-p%walBlock < walHeader {
			p = (p/walBlock + 1) * walBlock // a block's tail too short for a header is padding
			continue
		}
		typ, payload, n, ok := chunkAt(data, p, logNum)
		// 1 full, 2 first, 3 middle, 4 last; a chunk out of sequence does
		// not parse either.
		if ok && (typ == 1 || typ == 2) == open {
			ok = false
		}
		if !ok {
			if !resync {
				return recs, p
			}
			open, buf = false, buf[:0]
			if _, _, n, parsed := chunkAt(data, p, logNum); parsed {
				p += n // a whole chunk of this log, out of sequence
			} else {
				p = (p/walBlock + 1) * walBlock
			}
			continue
		}
		if typ == 1 || typ == 2 {
			open, start, buf = true, p, buf[:0]
		}
		buf = append(buf, payload...)
		p += n
		if typ == 1 || typ == 4 {
			r := walRecord{off: int64(start), end: int64(p)}
			if resync {
				r.rev = batchRevision(buf) // only the lost ones are reported
			}
			recs = append(recs, r)
			open = false
		}
	}
	return recs, len(data) // a record still open at the end is a torn tail
}

// batchRevision is the revision a commit's batch sets (0 if it sets none,
// or does not decode).
func batchRevision(repr []byte) int64 {
	r, _ := pebble.ReadBatch(repr)
	for {
		kind, key, value, ok, err := r.Next()
		if !ok || err != nil {
			return 0
		}
		if kind == pebble.InternalKeyKindSet && string(key) == string(revKey) && len(value) == 8 {
			return int64(binary.BigEndian.Uint64(value))
		}
	}
}

// WALDamageError is a newest write-ahead log damaged before its tail:
// commits after the damage are intact on disk, and starting would drop
// them.
type WALDamageError struct {
	File   string // the log's path
	Offset int64  // of the first byte that does not parse
	Cut    int64  // where the log's intact prefix ends (what --repair keeps)
	Lost   int    // whole commits found from the block after the damage's on
	// FirstLost and LastLost are the first and last revisions lost (0 if
	// none was read).
	FirstLost, LastLost int64
}

func (e *WALDamageError) Error() string {
	return fmt.Sprintf("embedded: write-ahead log %s is damaged at offset %d, before its end: the commit there and at least %d whole later commit(s)%s would be lost; "+
		"the store does not open on it (restore the data directory, or start with --repair to truncate the log at offset %d and drop them)",
		e.File, e.Offset, e.Lost, revRange(e.FirstLost, e.LastLost), e.Cut)
}

func revRange(first, last int64) string {
	if first == 0 && last == 0 {
		return ""
	}
	return fmt.Sprintf(" (revisions %d to %d)", first, last)
}

// WALRepair is what a repair dropped from the newest write-ahead log.
type WALRepair struct {
	File                string
	Offset              int64 // where the damage was
	Cut                 int64 // where the log was truncated
	Bytes               int64 // bytes dropped
	Lost                int   // whole commits dropped
	FirstLost, LastLost int64 // their revisions
}

func (r *WALRepair) String() string {
	return fmt.Sprintf("truncated write-ahead log %s at offset %d (damaged at %d): dropped %d bytes, the damaged commit and at least %d whole later commit(s)%s",
		r.File, r.Cut, r.Offset, r.Bytes, r.Lost, revRange(r.FirstLost, r.LastLost))
}

// checkWAL checks the newest write-ahead log of dir. Damage before its tail
// is a *WALDamageError, or with repair is cut off and reported. A torn tail
// is left to pebble, which drops it.
func checkWAL(dir string, repair bool) (*WALRepair, error) {
	file, logNum, err := newestWAL(dir)
	if err != nil || file == "" {
		return nil, err
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("embedded: read write-ahead log: %w", err)
	}
	damage := inspectWAL(data, logNum)
	if damage == nil {
		return nil, nil
	}
	damage.File = file
	if !repair {
		return nil, damage
	}
	if err := truncateSync(file, damage.Cut); err != nil {
		return nil, err
	}
	return &WALRepair{File: file, Offset: damage.Offset, Cut: damage.Cut, Bytes: int64(len(data)) - damage.Cut,
		Lost: damage.Lost, FirstLost: damage.FirstLost, LastLost: damage.LastLost}, nil
}

// inspectWAL reads the log numbered logNum held in data: nil if it is whole
// or only its tail is torn, else the damage (without its File).
func inspectWAL(data []byte, logNum uint32) *WALDamageError {
	good, stop := readRecords(data, 0, logNum, false)
	if stop >= len(data) {
		return nil
	}
	// Whatever follows the stop is the tail unless a chunk of this log
	// starts a later block. Only block starts are looked at: every block
	// starts with a chunk header, of this log or of the older one a
	// recycled file held (another log number; preallocated space is
	// zeros), while between them old payload, a user's values verbatim,
	// could be made to look like chunks of any log number and refuse a
	// healthy start. Damage with only its own block after it reads as a
	// torn tail.
	next := (stop/walBlock + 1) * walBlock
	tailValid := false
	for q := next; q+walHeader <= len(data) && !tailValid; q += walBlock {
		_, _, _, tailValid = chunkAt(data, q, logNum)
	}
	if !tailValid {
		return nil
	}
	later, _ := readRecords(data, next, logNum, true)
	var cut int64
	if len(good) > 0 {
		cut = good[len(good)-1].end
	}
	damage := &WALDamageError{Offset: int64(stop), Cut: cut, Lost: len(later)}
	if len(good) > 0 {
		// The commits between the damage and the next block are not read
		// (see above): the first revision lost follows the last kept.
		last := good[len(good)-1]
		if kept, _ := readRecords(data[:last.end], int(last.off), logNum, true); len(kept) == 1 && kept[0].rev > 0 {
			damage.FirstLost = kept[0].rev + 1
		}
	}
	for _, r := range later {
		if r.rev == 0 {
			continue
		}
		if damage.FirstLost == 0 {
			damage.FirstLost = r.rev
		}
		damage.LastLost = r.rev
	}
	return damage
}

// newestWAL is the path and number of the highest-numbered log of dir ("" if
// none). Pebble replays every log it has not flushed; the older ones it
// checks strictly itself.
func newestWAL(dir string) (string, uint32, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", 0, nil
		}
		return "", 0, fmt.Errorf("embedded: list %s: %w", dir, err)
	}
	var (
		name string
		max  uint64
	)
	for _, e := range entries {
		base, ok := strings.CutSuffix(e.Name(), ".log")
		if !ok || e.IsDir() {
			continue
		}
		n, err := strconv.ParseUint(base, 10, 64)
		if err != nil {
			continue
		}
		if name == "" || n > max {
			name, max = e.Name(), n
		}
	}
	if name == "" {
		return "", 0, nil
	}
	return filepath.Join(dir, name), uint32(max), nil
}

func truncateSync(file string, size int64) error {
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("embedded: repair: %w", err)
	}
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("embedded: repair %s: %w", file, err)
	}
	return nil
}
