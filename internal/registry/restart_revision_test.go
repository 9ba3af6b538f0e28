package registry

import (
	"context"
	"testing"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
	"github.com/sextant-mesh/sextant/internal/store/mysql"
	"github.com/sextant-mesh/sextant/internal/store/mysql/mysqltest"
)

// TestServiceRevisionsSurviveReopen: a registry opened again on its store
// (a restart) gives each service the revision of its last stored change,
// on the embedded store and on MySQL's sx tables alike, not the store's
// revision for all.
func TestServiceRevisionsSurviveReopen(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) func() (commit.Store, func())
	}{
		{"embedded", func(t *testing.T) func() (commit.Store, func()) {
			dir := t.TempDir()
			return func() (commit.Store, func()) {
				st, err := embedded.Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				return st, func() { st.Close() }
			}
		}},
		{"mysql", func(t *testing.T) func() (commit.Store, func()) {
			url := mysqltest.URL(t, "")
			return func() (commit.Store, func()) {
				st, err := mysql.Open(context.Background(), url, mysql.Options{Rows: map[store.Kind]mysql.Columns{store.Instances: instance.Columns{}}})
				if err != nil {
					t.Fatal(err)
				}
				return st, func() { st.Close() }
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			open := tc.open(t)
			st, closeStore := open()
			r, err := Open(st, Options{})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			mk := func(id, svc string, port int) *instance.Instance {
				in := &instance.Instance{ID: id, Namespace: "default", Service: svc, Host: "10.0.0.1", Port: port, Weight: 1}
				if err := instance.Prepare(-1, in); err != nil {
					t.Fatal(err)
				}
				return in
			}
			for _, w := range []struct {
				id, svc string
				port    int
			}{{"a1", "alpha", 1}, {"b1", "beta", 1}, {"a2", "alpha", 2}, {"g1", "gamma", 1}, {"b1", "beta", 2}, {"z1", "zeta", 1}} {
				if _, err := r.Register(ctx, []*instance.Instance{mk(w.id, w.svc, w.port)}); err != nil {
					t.Fatal(err)
				}
			}
			before := map[string]int64{}
			for _, n := range []string{"alpha", "beta", "gamma"} {
				before[n] = r.Instances().Lookup(naming.ServiceKey{Namespace: "default", Name: n}).Revision
			}
			r.Close()
			closeStore()

			st, closeStore = open()
			defer closeStore()
			r, err = Open(st, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for n, want := range before {
				if got := r.Instances().Lookup(naming.ServiceKey{Namespace: "default", Name: n}).Revision; got != want {
					t.Errorf("%s: revision %d after the reopen, %d before (all: %v)", n, got, want, before)
				}
			}
		})
	}
}
