package catalog

import "sync"

// maxMemo bounds the answers kept per version.
const maxMemo = 32

// Memo keeps encoded answers derived from one immutable version (a service,
// a config listing...), so that the many readers woken by one change, or
// polling the same query, encode it once and share the bytes. The zero Memo
// is ready to use; it must not be copied after first use.
type Memo struct {
	mu sync.Mutex
	m  map[string]*memoEntry
}

type memoEntry struct {
	once sync.Once
	b    []byte
}

// Get returns the answer stored under key, building it once with build;
// concurrent callers wait for the one build. Keys beyond the bound are built
// without being kept. The bytes must not be modified.
func (m *Memo) Get(key string, build func() []byte) []byte {
	m.mu.Lock()
	e := m.m[key]
	if e == nil {
		if len(m.m) >= maxMemo {
			m.mu.Unlock()
			return build()
		}
		if m.m == nil {
			m.m = make(map[string]*memoEntry)
		}
		e = &memoEntry{}
		m.m[key] = e
	}
	m.mu.Unlock()
	e.once.Do(func() { e.b = build() })
	return e.b
}
