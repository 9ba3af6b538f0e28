package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The relayed heartbeats of one batch: a version byte, then for each
// instance its id (uvarint length, bytes) and when the heartbeat arrived
// (varint unix nanoseconds).
const beatsVersion = 1

func appendBeats(b []byte, beats map[string]int64) []byte {
	b = append(b, beatsVersion)
	for id, at := range beats {
		b = binary.AppendUvarint(b, uint64(len(id)))
		b = append(b, id...)
		b = binary.AppendVarint(b, at)
	}
	return b
}

var errBeats = errors.New("cluster: corrupt relayed heartbeats")

// decodeBeats calls fn for each heartbeat of a batch.
func decodeBeats(b []byte, fn func(id string, at int64)) error {
	if len(b) == 0 || b[0] != beatsVersion {
		return fmt.Errorf("%w: unknown version", errBeats)
	}
	b = b[1:]
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > 1024 || uint64(len(b)-k) < n {
			return fmt.Errorf("%w: bad id length", errBeats)
		}
		id := string(b[k : k+int(n)])
		b = b[k+int(n):]
		at, k := binary.Varint(b)
		if k <= 0 {
			return fmt.Errorf("%w: bad time of %q", errBeats, id)
		}
		b = b[k:]
		fn(id, at)
	}
	return nil
}
