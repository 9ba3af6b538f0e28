package callstore

import (
	"fmt"
	"io"
	"log/slog"
)

// Options tune a Store. The zero value is a sensible default.
type Options struct {
	// ChunkRecords is how many consecutive records (in t order) form one
	// chunk, the unit of writing and of t pruning. Default 65536.
	ChunkRecords int
	// BucketRecords is the target number of records per a-bucket inside a
	// chunk; a chunk has ChunkRecords/BucketRecords buckets. Smaller buckets
	// prune a better but make the in-memory index larger. Default 4096.
	BucketRecords int
	// WriterBatch is how many records a Writer buffers before handing them
	// to the merger. Default 4096.
	WriterBatch int
	// MaxBufferedRecords bounds the records held in memory between Put and
	// disk (writer batches, merger, chunks in flight). Put blocks when it is
	// reached; at half of it the merger stops waiting for slow writers and
	// flushes out of order (see docs/callstore.md, "runs"). Default 1<<21
	// (about 120 MB).
	MaxBufferedRecords int
	// Logger receives rare events (recovery, background errors). Nil
	// discards.
	Logger *slog.Logger
}

func (o Options) withDefaults() (Options, error) {
	if o.ChunkRecords == 0 {
		o.ChunkRecords = 1 << 16
	}
	if o.BucketRecords == 0 {
		o.BucketRecords = 4096
	}
	if o.WriterBatch == 0 {
		o.WriterBatch = 4096
	}
	if o.MaxBufferedRecords == 0 {
		o.MaxBufferedRecords = 1 << 21
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	switch {
	case o.ChunkRecords < 1 || o.ChunkRecords > 1<<20:
		return o, fmt.Errorf("%w: ChunkRecords %d not in [1, 1<<20]", ErrBadOptions, o.ChunkRecords)
	case o.BucketRecords < 1 || o.BucketRecords > o.ChunkRecords:
		return o, fmt.Errorf("%w: BucketRecords %d not in [1, ChunkRecords]", ErrBadOptions, o.BucketRecords)
	case o.WriterBatch < 1 || o.WriterBatch > 1<<20:
		return o, fmt.Errorf("%w: WriterBatch %d not in [1, 1<<20]", ErrBadOptions, o.WriterBatch)
	case o.MaxBufferedRecords < 2*o.WriterBatch:
		return o, fmt.Errorf("%w: MaxBufferedRecords %d below 2*WriterBatch", ErrBadOptions, o.MaxBufferedRecords)
	}
	return o, nil
}
