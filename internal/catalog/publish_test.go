package catalog

import (
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/store"
)

// TestPublishOrder holds the writer after each step of publishing revision
// 2 and checks what a reader may then see: the catalog's revision reaches 2
// only once the change log and the table hold it (a writer answered at
// revision 2 must find its change in /v1/changes), the log only once the
// table does (subscribers re-read tables), and a Settle begun while the
// writer is between steps returns only once revision 2 is whole.
func TestPublishOrder(t *testing.T) {
	for _, stop := range []string{"tables", "log", "revision"} {
		t.Run(stop, func(t *testing.T) {
			c := newCatalog(Options{})
			if err := c.Apply([]store.Change{{Revision: 1, Ops: []store.Op{putOp(testInstance("a", "s", nil), false)}}}); err != nil {
				t.Fatal(err)
			}
			paused, release := make(chan struct{}), make(chan struct{})
			c.stepHook = func(step string) {
				if step == stop {
					close(paused)
					<-release
				}
			}
			applied := make(chan error, 1)
			go func() {
				applied <- c.Apply([]store.Change{{Revision: 2, Ops: []store.Op{putOp(testInstance("b", "s", nil), false)}}})
			}()
			<-paused

			inTable := c.instancesTable().Get("b") != nil
			changes, _, _, err := c.Changes(1, 10)
			if err != nil {
				t.Fatal(err)
			}
			inLog := len(changes) > 0
			atRev := c.Revision() >= 2
			if atRev && (!inLog || !inTable) {
				t.Fatalf("after step %q: revision 2 published with the log holding it %v and the table %v", stop, inLog, inTable)
			}
			if inLog && !inTable {
				t.Fatalf("after step %q: the change log holds revision 2 before the table", stop)
			}
			if !inTable {
				t.Fatalf("after step %q: the table does not hold revision 2: the hook is not where this test thinks", stop)
			}

			settled := make(chan struct{})
			go func() { c.Settle(); close(settled) }()
			select {
			case <-settled:
				t.Fatalf("after step %q: Settle returned while revision 2 was half published", stop)
			case <-time.After(20 * time.Millisecond): // a wrong early return shows within this; a slow machine can only hide it
			}
			close(release)
			select {
			case <-settled:
			case <-time.After(10 * time.Second):
				t.Fatal("Settle did not return once revision 2 was whole")
			}
			if c.Revision() != 2 {
				t.Fatalf("after Settle: revision %d, want 2", c.Revision())
			}
			if changes, _, _, _ := c.Changes(1, 10); len(changes) != 1 {
				t.Fatalf("after Settle: %d changes after revision 1, want 1", len(changes))
			}
			if err := <-applied; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSettleIdle: with no publication under way Settle returns at once,
// and it does across a Load.
func TestSettleIdle(t *testing.T) {
	c := newCatalog(Options{})
	c.Settle()
	if err := c.Apply([]store.Change{{Revision: 1, Ops: []store.Op{putOp(testInstance("a", "s", nil), false)}}}); err != nil {
		t.Fatal(err)
	}
	c.Settle()
	if c.publishing.Load()&1 != 0 {
		t.Fatalf("publishing %d after Apply returned: odd means under way", c.publishing.Load())
	}
}
