package config_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

func openRegistry(t *testing.T, dir string) (*registry.Registry, *config.Table, func()) {
	t.Helper()
	st, err := embedded.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	tbl := config.NewTable()
	reg, err := registry.Open(st, registry.Options{Engine: commitOptions(tbl)})
	if err != nil {
		t.Fatal(err)
	}
	tbl.Attach(reg.Catalog())
	return reg, tbl, func() { reg.Close(); st.Close() }
}

func decodeWE(t *testing.T, s string) []*config.Object {
	t.Helper()
	objs, err := config.Decode([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestWorkloadEntryIsAnInstance: applying a WorkloadEntry writes its
// registry instance in the same commit, re-applying it changes the
// instance, the registry's API may not touch it, its delete removes it,
// and it survives a restart as any record.
func TestWorkloadEntryIsAnInstance(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	reg, tbl, closeAll := openRegistry(t, dir)
	eng := reg.Engine()
	const doc = "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: vm1, namespace: shop}\nspec: {address: 10.1.0.5, ports: {http: 8080}, labels: {app: orders, version: v1}}\n"
	objs := decodeWE(t, doc)
	id := config.WorkloadInstanceID(objs[0].Key)

	// A dry run writes nothing.
	if _, err := eng.DryRun(&config.ApplyWrite{Objects: objs, Table: tbl, DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if in := reg.Instances().Get(id); in != nil {
		t.Fatalf("dry run wrote the instance: %+v", in)
	}
	rev, err := eng.Submit(ctx, &config.ApplyWrite{Objects: objs, Table: tbl})
	if err != nil {
		t.Fatal(err)
	}
	in := reg.Instances().Get(id)
	if in == nil || in.Revision != rev || tbl.Get(objs[0].Key).Revision != rev {
		t.Fatalf("after apply at %d: instance %+v, object %+v", rev, in, tbl.Get(objs[0].Key))
	}
	if in.Service != "orders" || in.Host != "10.1.0.5" || in.Port != 8080 || !in.Healthy || in.Version != "v1" {
		t.Errorf("instance = %+v", in)
	}

	// Re-applied with another address and version: one commit changes both.
	objs = decodeWE(t, "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: vm1, namespace: shop}\nspec: {address: 10.1.0.6, ports: {http: 8080}, labels: {app: orders, version: v2}}\n")
	rev2, err := eng.Submit(ctx, &config.ApplyWrite{Objects: objs, Table: tbl})
	if err != nil {
		t.Fatal(err)
	}
	in2 := reg.Instances().Get(id)
	if in2 == nil || in2.Revision != rev2 || in2.Host != "10.1.0.6" || in2.Version != "v2" || !in2.CreatedAt.Equal(in.CreatedAt) {
		t.Fatalf("after re-apply at %d: %+v", rev2, in2)
	}
	if svc := reg.Instances().Lookup(in2.Key()); svc == nil || svc.Len() != 1 {
		t.Fatalf("service %s holds %v", in2.Key(), svc)
	}

	// The registry's API may not change or remove it.
	_, _, err = reg.Deregister(ctx, []string{id})
	var owned *registry.OwnedError
	if !errors.As(err, &owned) || owned.Owner != "WorkloadEntry/shop/vm1" {
		t.Errorf("deregister: %v, want an OwnedError naming the WorkloadEntry", err)
	}
	// Nor may an apply take an instance registered through it.
	regd := &instance.Instance{ID: "we:shop:vm2", Namespace: "shop", Service: "orders", Host: "10.1.0.7", Port: 8080, Weight: 100}
	if err := instance.Prepare(0, regd); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Register(ctx, []*instance.Instance{regd}); err != nil {
		t.Fatal(err)
	}
	vm2 := decodeWE(t, "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: vm2, namespace: shop}\nspec: {address: 10.1.0.8}\n")
	if _, err := eng.Submit(ctx, &config.ApplyWrite{Objects: vm2, Table: tbl}); !errors.Is(err, config.ErrConflict) {
		t.Errorf("apply over a registered instance: %v, want ErrConflict", err)
	}
	if tbl.Get(vm2[0].Key) != nil {
		t.Errorf("the refused apply stored the object")
	}

	// A restart: the instance is a record like any.
	closeAll()
	reg, tbl, closeAll = openRegistry(t, dir)
	defer closeAll()
	eng = reg.Engine()
	if in := reg.Instances().Get(id); in == nil || in.Host != "10.1.0.6" || !in.Healthy {
		t.Fatalf("after restart: %+v", in)
	}

	// The delete removes both, in one commit.
	rev3, err := eng.Submit(ctx, &config.DeleteWrite{Key: objs[0].Key})
	if err != nil {
		t.Fatal(err)
	}
	if in := reg.Instances().Get(id); in != nil || tbl.Get(objs[0].Key) != nil || reg.Revision() != rev3 {
		t.Fatalf("after delete at %d: instance %+v", rev3, in)
	}
	if reg.Instances().Get("we:shop:vm2") == nil {
		t.Errorf("the delete removed the registered instance")
	}
}

func commitOptions(tbl *config.Table) commit.Options {
	return commit.Options{Tables: map[store.Kind]catalog.Table{store.Config: tbl}}
}
