package balancer

import "sync"

// stateStore keeps learned per-endpoint state keyed by Endpoint.ID, so that
// a rebuild of the endpoint set keeps what was learned about the endpoints
// that stay. Only Build touches it (one call at a time); pickers hold the
// *T pointers and update them from Done.
type stateStore[T any] struct {
	mu sync.Mutex
	m  map[string]*T
}

// resolve returns the state of each endpoint, in order, creating missing
// ones with fresh and forgetting endpoints no longer in the set.
func (s *stateStore[T]) resolve(eps []Endpoint, fresh func(Endpoint) *T) []*T {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[string]*T, len(eps))
	out := make([]*T, len(eps))
	for i, ep := range eps {
		st, ok := next[ep.ID]
		if !ok {
			st, ok = s.m[ep.ID]
			if !ok {
				st = fresh(ep)
			}
			next[ep.ID] = st
		}
		out[i] = st
	}
	s.m = next
	return out
}
