package embedded

import (
	"encoding/binary"
	"testing"
)

// FuzzWALRecords: the log check reads whatever the disk holds. On any
// bytes it must not panic, its records lie inside the data in order, and
// its verdict is intact or torn tail, or damage at an offset inside the
// data with a cut before it, where the log checks whole. Seeds: testdata/fuzz (a real log of
// a few commits, and that log damaged and torn).
func FuzzWALRecords(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, walBlock+5))
	f.Fuzz(func(t *testing.T, data []byte) {
		const logNum = 2
		recs, stop := readRecords(data, 0, logNum, false)
		if stop < 0 || stop > len(data) {
			t.Fatalf("stopped at %d of %d bytes", stop, len(data))
		}
		var last int64
		for _, r := range recs {
			if r.off < last || r.end <= r.off || r.end > int64(len(data)) {
				t.Fatalf("record [%d, %d) after %d in %d bytes", r.off, r.end, last, len(data))
			}
			last = r.end
		}
		d := inspectWAL(data, logNum)
		if d == nil {
			return
		}
		if d.Offset < d.Cut || d.Offset >= int64(len(data)) || d.Cut < 0 {
			t.Fatalf("damage %+v in %d bytes", d, len(data))
		}
		// What a repair keeps checks whole.
		if again := inspectWAL(data[:d.Cut], logNum); again != nil {
			t.Fatalf("the log cut at %d is damaged again: %+v", d.Cut, again)
		}
	})
}

// chunk is a valid recyclable full chunk of log 2 holding payload.
func chunk(payload []byte) []byte {
	b := make([]byte, walHeader, walHeader+len(payload))
	binary.LittleEndian.PutUint16(b[4:], uint16(len(payload)))
	b[6] = chunkFull
	binary.LittleEndian.PutUint32(b[7:], 2)
	b = append(b, payload...)
	binary.LittleEndian.PutUint32(b, maskedCRC(b[6:]))
	return b
}

// BenchmarkInspectWAL: the check of an intact 16 MiB log (records of 1 KiB
// in full chunks), what a start after a crash pays before pebble replays
// the same log.
func BenchmarkInspectWAL(b *testing.B) {
	var data []byte
	payload := make([]byte, 1<<10)
	for len(data) < 16<<20 {
		left := walBlock - len(data)%walBlock
		switch {
		case left < walHeader:
			data = append(data, make([]byte, left)...) // the block's zero tail, as pebble leaves it
		case left < walHeader+len(payload):
			data = append(data, chunk(payload[:left-walHeader])...)
		default:
			data = append(data, chunk(payload)...)
		}
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if d := inspectWAL(data, 2); d != nil {
			b.Fatalf("intact log found damaged: %+v", d)
		}
	}
}
