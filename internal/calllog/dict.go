package calllog

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"unsafe"
)

// dict maps the strings of one partition's bodies (endpoints, subsets,
// clusters, routes) to ids, in an append-only file of lines
// "<id> <Go-quoted string>\n". Id 0 is "". A torn last line (a crash while
// appending) is ignored on open; the records that would use it were not
// synced either, because the writer syncs the dictionary before the store.
//
// The writer goroutine calls id and sync; queries call name from any
// goroutine. mu guards the maps; the file is the writer's.
type dict struct {
	f     dictFile
	size  int64 // bytes of whole lines in f
	dirty bool
	// broken is set when a torn append could not be cut off: appending
	// after it would hide every later name at the next open.
	broken error

	mu    sync.RWMutex
	ids   map[string]uint32
	names []string
}

// dictFile is what the dictionary needs of its file (tests inject failing
// writes through it).
type dictFile interface {
	Write(p []byte) (int, error)
	Truncate(size int64) error
	Seek(offset int64, whence int) (int64, error)
	Sync() error
	Close() error
}

func openDict(path string) (*dict, error) {
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("calllog: read %s: %w", path, err)
	}
	d := &dict{ids: map[string]uint32{"": 0}, names: []string{""}}
	good := 0
	for len(data) > good {
		nl := bytes.IndexByte(data[good:], '\n')
		if nl < 0 {
			break // torn tail
		}
		line := data[good : good+nl]
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 {
			break
		}
		id, err1 := strconv.ParseUint(string(line[:sp]), 10, 32)
		s, err2 := strconv.Unquote(string(line[sp+1:]))
		if err1 != nil || err2 != nil || id != uint64(len(d.names)) {
			break
		}
		d.ids[s] = uint32(id)
		d.names = append(d.names, s)
		good += nl + 1
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("calllog: open %s: %w", path, err)
	}
	if err := f.Truncate(int64(good)); err != nil {
		f.Close()
		return nil, fmt.Errorf("calllog: truncate %s: %w", path, err)
	}
	if _, err := f.Seek(int64(good), 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("calllog: seek %s: %w", path, err)
	}
	d.f, d.size = f, int64(good)
	return d, nil
}

// id returns s's id, appending it to the file if new. Writer goroutine:
// the maps' only writer, so its reads take no lock (the read lock's two
// atomics, five times a record, were a fifth of the writer's encoding).
func (d *dict) id(s string) (uint32, error) {
	if id, ok := d.ids[s]; ok {
		return id, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.broken != nil {
		return 0, d.broken
	}
	id := uint32(len(d.names))
	line := strconv.AppendUint(nil, uint64(id), 10)
	line = append(line, ' ')
	line = strconv.AppendQuote(line, s)
	line = append(line, '\n')
	if n, err := d.f.Write(line); err != nil {
		if n > 0 {
			d.cut()
		}
		return 0, fmt.Errorf("calllog: append to dictionary: %w", err)
	}
	d.size += int64(len(line))
	d.ids[s] = id
	d.names = append(d.names, s)
	d.dirty = true
	return id, nil
}

// nameCache remembers the ids of the strings a record names by (its
// endpoint, subset, cluster, route), by where the string lies in memory:
// the gateway fills those fields with strings it keeps (an endpoint's
// address, a cluster's name), so a record's names are the last record's,
// found without hashing them. An entry holds its string, which keeps that
// memory from being reused for another string while cached. Writer
// goroutine.
type nameCache [64]struct {
	s  string
	id uint32
}

// id is s's id in d, from the cache when s is the very string cached.
func (c *nameCache) id(d *dict, s string) (uint32, error) {
	if s == "" {
		return 0, nil
	}
	e := &c[(uintptr(unsafe.Pointer(unsafe.StringData(s)))>>4)%uintptr(len(c))]
	if unsafe.StringData(e.s) == unsafe.StringData(s) && len(e.s) == len(s) {
		return e.id, nil
	}
	id, err := d.id(s)
	if err == nil {
		e.s, e.id = s, id
	}
	return id, err
}

// heldBytes is b's id if the dictionary holds it, without making a
// string of b. Writer goroutine (no lock, as id).
func (d *dict) heldBytes(b []byte) (uint32, bool) {
	id, ok := d.ids[string(b)]
	return id, ok
}

// heldLen is how many names the dictionary holds. Writer goroutine.
func (d *dict) heldLen() int { return len(d.names) }

// cut removes a partly written line, so that the next append starts on a
// line of its own; if it cannot, the dictionary takes no more names.
func (d *dict) cut() {
	if err := d.f.Truncate(d.size); err != nil {
		d.broken = fmt.Errorf("calllog: dictionary has a torn line that could not be cut off: %w", err)
		return
	}
	if _, err := d.f.Seek(d.size, 0); err != nil {
		d.broken = fmt.Errorf("calllog: dictionary has a torn line that could not be cut off: %w", err)
	}
}

// lookup returns the id of s if it has one. Any goroutine.
func (d *dict) lookup(s string) (uint32, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	id, ok := d.ids[s]
	return id, ok
}

// name returns the string of id. Any goroutine.
func (d *dict) name(id uint32) string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if int(id) < len(d.names) {
		return d.names[id]
	}
	return "?" + strconv.FormatUint(uint64(id), 10)
}

// sync makes the appended names durable. Writer goroutine.
func (d *dict) sync() error {
	if !d.dirty {
		return nil
	}
	if err := d.f.Sync(); err != nil {
		return fmt.Errorf("calllog: sync dictionary: %w", err)
	}
	d.dirty = false
	return nil
}

func (d *dict) close() error { return d.f.Close() }
