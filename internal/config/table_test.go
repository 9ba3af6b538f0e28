package config_test

import (
	"context"
	"testing"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

func openEngine(t *testing.T, dir string) (*commit.Engine, *config.Table, func()) {
	t.Helper()
	st, err := embedded.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	tbl := config.NewTable()
	eng, err := commit.Open(st, commit.Options{Tables: map[store.Kind]catalog.Table{store.Config: tbl}})
	if err != nil {
		t.Fatal(err)
	}
	tbl.Attach(eng.Catalog())
	return eng, tbl, func() { eng.Close(); st.Close() }
}

// TestConfigIsDurable: applied objects are records of the store: they come
// back after a restart with their revisions, in the one revision sequence
// shared with instances.
func TestConfigIsDurable(t *testing.T) {
	dir := t.TempDir()
	eng, tbl, closeAll := openEngine(t, dir)
	objs, err := config.Decode([]byte(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders, namespace: prod}
spec: {host: orders, subsets: [{name: v1, labels: {version: v1}}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	rev, err := eng.Submit(context.Background(), &config.ApplyWrite{Objects: objs, Table: tbl})
	if err != nil || rev != 1 {
		t.Fatalf("apply: rev %d err %v", rev, err)
	}
	want := tbl.Get(objs[0].Key)
	if want == nil || want.Revision != 1 || tbl.Revision() != 1 {
		t.Fatalf("after apply: %+v", want)
	}
	closeAll()

	eng, tbl, closeAll = openEngine(t, dir)
	defer closeAll()
	got := tbl.Get(objs[0].Key)
	if got == nil || got.Revision != 1 || string(got.Encoded) != string(want.Encoded) || eng.Catalog().Revision() != 1 {
		t.Fatalf("after restart: %+v", got)
	}
	if es, rev := tbl.List("", "prod"); len(es) != 1 || rev != 1 {
		t.Fatalf("list after restart: %d entries at %d", len(es), rev)
	}
}
