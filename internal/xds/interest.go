package xds

import "github.com/bits-and-blooms/bitset"

// Unwanted returns the keys of type t, among keys, that no subscriber
// names now (wildcard subscriptions name nothing), so that a publisher of
// on-demand resources (a proxyless gRPC server's listener) can drop those
// whose subscribers are gone. Safe from any goroutine; it takes each
// subscriber's lock in turn, never two at once.
func (c *Cache) Unwanted(t Type, keys []string) []string {
	var named bitset.BitSet
	for _, s := range *c.subs.Load() {
		s.mu.Lock()
		named.InPlaceUnion(&s.t[t].subs)
		s.mu.Unlock()
	}
	tc := c.types[t]
	tc.mu.RLock()
	defer tc.mu.RUnlock()
	var out []string
	for _, k := range keys {
		if id, ok := tc.ids[k]; !ok || !named.Test(uint(id)) {
			out = append(out, k)
		}
	}
	return out
}
