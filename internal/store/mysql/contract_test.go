package mysql

import (
	"context"
	"testing"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/mysql/mysqltest"
	"github.com/sextant-mesh/sextant/internal/store/storetest"
)

// open opens a store on url, closed when t ends, with the server's layout:
// instances as rows of sx_instance (instance.Columns), which the tests of
// that table need. The store itself imports no kind.
func open(t testing.TB, url string, opts Options) *Store {
	t.Helper()
	if opts.Rows == nil {
		opts.Rows = map[store.Kind]Columns{store.Instances: instance.Columns{}}
	}
	s, err := Open(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestContract runs the contract every backend keeps (the embedded store
// runs the same one) on a fresh database of the real MariaDB, with peers:
// other stores on the same database, as other servers of a cluster.
func TestContract(t *testing.T) {
	urls := map[storetest.Backend]string{}
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T) storetest.Backend {
			url := mysqltest.URL(t, "")
			s := open(t, url, Options{})
			urls[s] = url
			return s
		},
		Reopen: func(t *testing.T, b storetest.Backend) storetest.Backend {
			b.Close()
			s := open(t, urls[b], Options{})
			urls[s] = urls[b]
			return s
		},
		Peer: func(t *testing.T, b storetest.Backend) storetest.Backend {
			return open(t, urls[b], Options{})
		},
	})
}
