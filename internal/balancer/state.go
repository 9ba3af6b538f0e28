package balancer

import "sync"

// stateStore keeps learned per-endpoint state keyed by Endpoint.ID, so that
// a rebuild of the endpoint set keeps what was learned about the endpoints
// that stay. Only Build touches it (one call at a time); pickers hold the
// *T pointers and update them from Done.
type stateStore[T any] struct {
	mu sync.Mutex
	m  map[string]*T
	// keep, once Retain was called, is the set of endpoints whose state is
	// kept whatever sets Build is given (a subset balancer builds one
	// picker per subset from one policy).
	keep map[string]struct{}
}

// retain keeps the state of exactly ids from now on (see Retainer).
func (s *stateStore[T]) retain(ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keep = make(map[string]struct{}, len(ids))
	for _, id := range ids {
		s.keep[id] = struct{}{}
	}
	for id := range s.m {
		if _, ok := s.keep[id]; !ok {
			delete(s.m, id)
		}
	}
}

// resolve returns the state of each endpoint, in order, creating missing
// ones with fresh and forgetting endpoints no longer in the set (or, after
// retain, endpoints not retained).
func (s *stateStore[T]) resolve(eps []Endpoint, fresh func(Endpoint) *T) []*T {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keep != nil {
		if s.m == nil {
			s.m = map[string]*T{}
		}
		out := make([]*T, len(eps))
		for i, ep := range eps {
			st, ok := s.m[ep.ID]
			if !ok {
				st = fresh(ep)
				if _, kept := s.keep[ep.ID]; kept {
					s.m[ep.ID] = st
				}
			}
			out[i] = st
		}
		return out
	}
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

// each calls f with every endpoint's state the store keeps, under its lock.
func (s *stateStore[T]) each(f func(id string, st *T)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, st := range s.m {
		f(id, st)
	}
}
