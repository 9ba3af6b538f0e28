package catalog

import (
	"context"

	"github.com/sextant-mesh/sextant/internal/store"
)

// Subscription follows every change of some kinds, in revision order, from
// the change log. The writer never waits for a subscriber: a slow one just
// reads further behind, and one that falls behind the log's history gets
// ErrCompacted and must read the state in full and subscribe again (as etcd
// moves slow watchers aside to catch up from history).
type Subscription struct {
	c     *Catalog
	kinds kindSet
	pos   int64
}

// Subscribe returns a subscription to the changes of kinds (every kind if
// none) after revision since. ErrCompacted if the log no longer holds them.
func (c *Catalog) Subscribe(since int64, kinds ...store.Kind) (*Subscription, error) {
	s := &Subscription{c: c, kinds: newKindSet(kinds), pos: since}
	if _, _, _, err := c.log.since(since, 1, s.kinds); err != nil {
		return nil, err
	}
	return s, nil
}

// Revision is the revision the subscription has caught up to.
func (s *Subscription) Revision() int64 { return s.pos }

// Next returns the next changes (up to about limit, whole revisions),
// waiting until there is at least one or ctx ends. Called from one
// goroutine at a time.
func (s *Subscription) Next(ctx context.Context, limit int) ([]Change, error) {
	for {
		// Take the wake channel before reading, so an Apply between the
		// read and the wait is not missed.
		wake := *s.c.advanced.Load()
		out, upto, _, err := s.c.log.since(s.pos, limit, s.kinds)
		if err != nil {
			return nil, err
		}
		if upto > s.pos {
			s.pos = upto
		}
		if len(out) > 0 {
			return out, nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
